"""Regenerate the README's example outputs and the spec samples in docs/ from real runs.

    RECON_CACHE_DIR=... python docs/regen.py           # rewrite them
    RECON_CACHE_DIR=... python docs/regen.py --check   # exit 1 and name what differs

Every example is one recon command on a released SGLang wheel, run in this process with stdout not
a terminal (so text is folded at 100 columns, as a pipe gets it). In README.md each lives between
``<!-- regen:NAME -->`` and ``<!-- /regen:NAME -->``: a fenced block of ``$ recon ...`` and what it
printed (abridged only by the rule written next to the command here: the first N lines, or one
section). The outputs carry no timings and no absolute paths, so a run gives the same bytes until
recon's output or the wheel changes; tests/test_docs_regen.py fails when the committed text differs
from today's.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SEED = "0.5.13.post1"
SPEC_SAMPLE = f"spec-{SEED}-rtx-pro-6000-dsv4-flash"  # + .md / .json in docs/


def _section(title: str):
    """Keep the lines from the one that starts with ``title`` to the next blank line."""
    def keep(lines: list[str]) -> list[str]:
        i = next(k for k, x in enumerate(lines) if x.startswith(title))
        j = next((k for k in range(i + 1, len(lines)) if not lines[k].strip()), len(lines))
        return lines[i:j]
    return keep


def _head(n: int):
    return lambda lines: lines[:n]


# name -> (the command's arguments, how it is abridged, the shell suffix shown for that)
REGIONS = {
    "query-path": (["query", "path", "Mxfp4MarlinMoEMethod.apply", "_mxfp4_slot_gemv_kernel", "--sglang", SEED], None, ""),
    "query-where": (["query", "where", "is_sm120_supported", "--sglang", SEED], None, ""),
    "query-launches": (["query", "launches", "Mxfp4MarlinMoEMethod.apply", "--sglang", SEED], _head(10), " | head -10"),
    "kernels-moe": (["kernels", "--sglang", SEED], _section("== moe"), " | sed -n '/^== moe/,/^$/p'"),
    "scan": (["scan", "--sglang", SEED], _head(16), " | head -16"),
}


def run(args: list[str]) -> tuple[int, str]:
    """recon ``args`` in this process: (exit code, stdout)."""
    from typer.testing import CliRunner

    from recon.cli import app

    # as a user runs it: the wheels a release pins are read (the test suite turns that off)
    r = CliRunner().invoke(app, args, catch_exceptions=False, env={"RECON_DIST_MODULES": "on"})
    return r.exit_code, r.stdout


def region_text(name: str) -> str:
    args, abridge, shown = REGIONS[name]
    code, out = run(args)
    if code not in (0, 1):
        raise SystemExit(f"recon {' '.join(args)} exited {code}")
    lines = out.rstrip("\n").split("\n")
    if abridge:
        lines = abridge(lines)
    return "```\n$ recon " + " ".join(args) + shown + "\n" + "\n".join(lines) + "\n```"


# regions cut from the spec sample itself (no command of their own): the lines from the one that
# starts with the key to the end of that block
FROM_SPEC = {"spec-summary": "| | batch M="}


def spec_region(name: str, md: str) -> str:
    lines = md.split("\n")
    i = next(k for k, x in enumerate(lines) if x.startswith(FROM_SPEC[name]))
    j = next((k for k in range(i + 1, len(lines)) if not lines[k].strip()), len(lines))
    return "\n".join(lines[i:j])


def readme_text(old: str, spec_md: str) -> str:
    """README.md with every regen region replaced by today's output."""
    def repl(m: re.Match) -> str:
        name = m.group(1)
        if name in FROM_SPEC:
            return f"<!-- regen:{name} -->\n{spec_region(name, spec_md)}\n<!-- /regen:{name} -->"
        if name not in REGIONS:
            raise SystemExit(f"README.md names a region regen.py does not know: {name}")
        return f"<!-- regen:{name} -->\n{_OUT.get(name) or region_text(name)}\n<!-- /regen:{name} -->"
    return re.sub(r"<!-- regen:([\w-]+) -->\n(?:.*?\n)?<!-- /regen:\1 -->", repl, old, flags=re.S)


def spec_samples() -> dict[Path, str]:
    """The spec sample in docs/ (Markdown and JSON) as `recon spec` writes it today."""
    out = {}
    for fmt, suffix in (("md", ".md"), ("json", ".json")):
        code, text = run(["spec", "--sglang", SEED, "--device", "rtx-pro-6000", "--model", "DeepSeek-V4-Flash", "--format", fmt])
        if code not in (0, 3):  # 3: a rule crashed; the spec says which, and is still the spec
            raise SystemExit(f"recon spec --format {fmt} exited {code}")
        out[ROOT / "docs" / (SPEC_SAMPLE + suffix)] = text
    return out


def expected() -> dict[Path, str]:
    """Every generated file: path -> the text it should hold."""
    samples = spec_samples()
    md = samples[ROOT / "docs" / (SPEC_SAMPLE + ".md")]
    for name in REGIONS:  # run every command first: the README is read last, just before it is compared or written
        _OUT[name] = region_text(name)
    return {README: readme_text(README.read_text(), md), **samples}


_OUT: dict[str, str] = {}


def main(argv: list[str]) -> int:
    want = expected()
    differ = []
    for path, text in want.items():
        have = path.read_text() if path.is_file() else ""
        if have == text:
            continue
        differ.append(path)
        if "--check" in argv:
            diff = difflib.unified_diff(have.splitlines(), text.splitlines(), str(path), "today", lineterm="", n=1)
            sys.stdout.write("\n".join(list(diff)[:40]) + "\n")
        else:
            path.write_text(text)
    for p in differ:
        print(("differs: " if "--check" in argv else "wrote: ") + str(p.relative_to(ROOT)))
    return 1 if differ and "--check" in argv else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
