"""Snapshots of what recon answers for a matrix of (release x device x model) cells: the JSON of
`recon runtime`, `recon kernels` and `recon spec` for each, written outside git, with a digest
table. Run it before and after a change to the engine; `--compare` names the cells (and the
keys) that changed.

    python bench/snapshots.py OUTDIR [--releases 0.5.5,0.5.23] [--devices h200] [--models gpt-oss-120b] [--commands runtime,kernels]
    python bench/snapshots.py --compare BEFORE AFTER

One process per release (the tree's index and graph loaded once, each command run through recon's
own CLI entry in that process). Uses the default cache (RECON_CACHE_DIR or ~/.cache/recon); a
release not there is downloaded by recon's `--sglang`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RELEASES = ["0.5.5", "0.5.9", "0.5.13.post1", "0.5.18", "0.5.23"]
DEVICES = ["h200", "rtx-pro-6000", "b200"]
MODELS = ["gpt-oss-120b", "qwen3-30b-a3b"]
COMMANDS = ("runtime", "kernels", "spec")


def _one_release(outdir: Path, release: str, devices: list, models: list, commands: list) -> None:
    """All cells of one release, in this process."""
    sys.path.insert(0, str(REPO))
    from recon.cli import run

    for dev in devices:
        for mdl in models:
            cell = outdir / release / dev / mdl
            cell.mkdir(parents=True, exist_ok=True)
            for cmd in commands:
                buf = io.StringIO()
                t0 = time.perf_counter()
                with contextlib.redirect_stdout(buf):
                    rc = run([cmd, "--sglang", release, "--device", dev, "--model", mdl, "--format", "json"])
                (cell / f"{cmd}.json").write_text(buf.getvalue())
                (cell / f"{cmd}.rc").write_text(f"{rc}\n")
                print(f"{release} {dev} {mdl} {cmd}: rc {rc}, {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def digest_table(outdir: Path) -> list[str]:
    rows = [f"| release | device | model | {' | '.join(COMMANDS)} |", "|" + "---|" * (3 + len(COMMANDS))]
    for cell in sorted(p for p in outdir.glob("*/*/*") if p.is_dir()):
        rel, dev, mdl = cell.relative_to(outdir).parts
        cols = []
        for cmd in COMMANDS:
            f = cell / f"{cmd}.json"
            rc = (cell / f"{cmd}.rc").read_text().strip() if (cell / f"{cmd}.rc").exists() else "?"
            cols.append(f"{hashlib.sha256(f.read_bytes()).hexdigest()[:12]} (rc {rc})" if f.exists() else "-")
        rows.append(f"| {rel} | {dev} | {mdl} | {' | '.join(cols)} |")
    return rows


def _diff_keys(a, b, where="") -> list[str]:
    """The JSON paths where two documents differ (the first few)."""
    if type(a) is not type(b):
        return [where or "."]
    if isinstance(a, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{where}.{k}")
            else:
                out += _diff_keys(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{where}[len {len(a)} -> {len(b)}]"]
        return [x for i, (p, q) in enumerate(zip(a, b)) for x in _diff_keys(p, q, f"{where}[{i}]")]
    return [] if a == b else [where or "."]


def compare(before: Path, after: Path) -> int:
    changed = 0
    for f in sorted(before.glob("*/*/*/*.json")):
        rel = f.relative_to(before)
        g = after / rel
        if not g.exists():
            print(f"{rel}: missing after")
            changed += 1
            continue
        if f.read_bytes() == g.read_bytes():
            continue
        changed += 1
        try:
            keys = _diff_keys(json.loads(f.read_text()), json.loads(g.read_text()))
        except json.JSONDecodeError:
            keys = ["(not JSON)"]
        print(f"{rel}: {len(keys)} differences: {', '.join(keys[:8])}")
    print(f"{changed} files differ")
    return 1 if changed else 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--releases", default=",".join(RELEASES))
    ap.add_argument("--devices", default=",".join(DEVICES))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--commands", default=",".join(COMMANDS), help="a subset of runtime,kernels,spec (spec is the costly one: a cold scan per cell)")
    ap.add_argument("--one-release", help=argparse.SUPPRESS)
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args()
    if a.compare:
        sys.exit(compare(Path(a.compare[0]), Path(a.compare[1])))
    out = Path(a.outdir).resolve()
    devices, models = a.devices.split(","), a.models.split(",")
    if a.one_release:
        _one_release(out, a.one_release, devices, models, a.commands.split(","))
        return
    for rel in a.releases.split(","):
        subprocess.run([sys.executable, __file__, str(out), "--one-release", rel, "--devices", a.devices, "--models", a.models,
                        "--commands", a.commands],
                       check=False)
    print("\n".join(digest_table(out)))


if __name__ == "__main__":
    main()
