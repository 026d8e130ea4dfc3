"""Text for people: every text output at most 100 columns off a terminal, assumptions that change
no choice counted instead of listed, and the spec's chart carrying the numbers its tables print.

The commands run on a real wheel (SGLang 0.5.13.post1, DeepSeek-V4-Flash) through the CLI, whose
output is not a terminal here. Exempt, and only these: Markdown table rows, headings and fenced
blocks (a table row or a heading cannot fold without breaking; a fenced block is code), and a
Markdown line that is one word after its indentation (a code span or URL longer than a line;
Markdown cannot break inside it).
"""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from recon import columns
from recon.cli import app

WIDTH = columns.WIDTH
runner = CliRunner()


def _run(*args):
    r = runner.invoke(app, list(args), catch_exceptions=False)
    return r


def _too_wide_text(text: str) -> list[str]:
    return [x for x in text.split("\n") if len(x) > WIDTH]


def _too_wide_md(text: str) -> list[str]:
    bad, fenced = [], False
    for x in text.split("\n"):
        if x.startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced or len(x) <= WIDTH or x.lstrip().startswith(("|", "#")):
            continue
        if len(x.split()) == 1 or (len(x.split()) == 2 and x.split()[0] in ("-", "*")):
            continue  # one unbreakable word (a long code span or URL)
        bad.append(x)
    return bad


# --- the folding itself (no tree) --------------------------------------------------------------


def test_fold_keeps_a_list_a_list():
    line = "  - " + " ".join(f"word{i}" for i in range(40))
    got = columns.fold(line)
    assert len(got) > 1 and all(len(x) <= WIDTH for x in got)
    assert got[0].startswith("  - ") and all(x.startswith("    ") and not x.startswith("    -") for x in got[1:])
    assert " ".join(x.strip() for x in got).replace("- ", "", 1) == line.strip()[2:]


def test_fold_cuts_a_long_path_at_a_joint():
    path = "sglang/srt/" + "/".join(f"package_{i}" for i in range(20)) + "/file.py:12"
    got = columns.fold("at " + path)
    assert all(len(x) <= WIDTH for x in got) and "".join(x.strip() for x in got) == "at " + path
    assert got[0].startswith("at sglang/") and got[0].endswith("/") and got[1].startswith("  ") and got[1].strip()[0] != "/"


def test_markdown_folds_prose_not_tables_and_never_opens_a_list():
    prose = " ".join(["text"] * 20) + " - not a list 1. nor this " + " ".join(["more"] * 30)
    table = "| " + " | ".join(["cell"] * 40) + " |"
    got = columns.markdown(prose + "\n\n" + table + "\n```\n" + "x " * 80 + "\n```")
    lines = got.split("\n")
    assert table in lines and ("x " * 80) in lines
    folded = lines[:lines.index("")]
    assert len(folded) > 1 and all(len(x) <= WIDTH for x in folded)
    assert not any(re.match(r"^(\s*)([-*+]|\d+\.)\s", x) for x in folded)  # no line opens a list item


# --- every text command on a real wheel -------------------------------------------------------

COMMANDS = {
    "runtime": ["runtime", "--sglang", "0.5.13.post1"],
    "kernels": ["kernels", "--sglang", "0.5.13.post1"],
    "kernels --diff-device": ["kernels", "--sglang", "0.5.13.post1", "--diff-device", "h200"],
    "scan": ["scan", "--sglang", "0.5.13.post1"],
    "query launches": ["query", "launches", "Mxfp4MarlinMoEMethod.apply", "--sglang", "0.5.13.post1"],
    "query path": ["query", "path", "Mxfp4MarlinMoEMethod.apply", "_mxfp4_slot_gemv_kernel", "--sglang", "0.5.13.post1"],
    "error": ["kernels", "--sglang", "0.5.13.post1", "--device", "no-such-gpu-" + "x" * 40],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_text_output_fits_100_columns(name, sglang_0513):
    r = _run(*COMMANDS[name])
    text = r.stdout + r.stderr
    assert text.strip(), name
    if name == "error":
        # an error is one whole line whatever its width (a script reads it from "error: "); the rest fits
        assert r.exit_code == 2
        errors = [x for x in text.splitlines() if x.startswith("error: ")]
        assert len(errors) == 1 and "no-such-gpu-" + "x" * 40 in errors[0]
        text = "\n".join(x for x in text.splitlines() if not x.startswith("error: "))
    else:
        assert r.exit_code in (0, 1), r.output
        assert len(r.stdout.split("\n")) > 5  # a real view, not an error line
    assert _too_wide_text(text) == [], name


def test_kernels_text_to_a_file_and_markdown_fit(sglang_0513, tmp_path):
    out = tmp_path / "k.txt"
    assert _run("kernels", "--sglang", "0.5.13.post1", "-o", str(out)).exit_code == 0
    assert _too_wide_text(out.read_text()) == []
    md = tmp_path / "k.md"
    assert _run("kernels", "--sglang", "0.5.13.post1", "--format", "md", "-o", str(md)).exit_code == 0
    assert _too_wide_md(md.read_text()) == []


def test_spec_markdown_prose_fits(seed_md):
    assert _too_wide_md(seed_md[1]) == []


# --- assumptions: the ones whose flip changes a choice are shown, the rest counted ---------------


def test_assumptions_that_change_nothing_are_counted_not_listed(sglang_0513, tree_0513):
    from tests.scenarios import kernel_map

    m = kernel_map(tree_0513, "rtx-pro-6000")
    idle = set(m["notes_idle"])
    assert idle and idle <= set(m["notes"])  # the mechanism marked some, and only notes
    from recon.render.kernels import render_text

    quiet, loud = render_text(m), render_text(m, verbose=True)
    assert not any(n in quiet for n in idle)
    assert all(n in loud for n in idle)
    assert f"and {len(idle)} more that change no kernel or op chosen" in quiet
    # what stays shown: an environment value, or a test whose other branch gives another value
    for n in set(m["notes"]) - idle:
        assert n in quiet


def test_a_flip_that_changes_the_value_is_kept():
    """The mechanism on a function of three ways: a test whose other branch returns the same value
    changes nothing; one whose other branch returns another value, or raises, changes it."""
    from recon.engine.evaluator import Outcome
    from recon.engine.world import _flip_changes

    a = ("x", False, "f.py", 3)
    primary = Outcome("triton", (a,), 5)
    same = Outcome("triton", (("x", True, "f.py", 3),), 4)
    other = Outcome("cutlass", (("x", True, "f.py", 3),), 4)
    raises = Outcome(None, (("x", True, "f.py", 3),), 4, raises=True)
    assert _flip_changes(primary, a, [primary, same]) is False
    assert _flip_changes(primary, a, [primary, same, other]) is True
    assert _flip_changes(primary, a, [primary, raises]) is True
    assert _flip_changes(primary, a, [primary]) is True  # the other way not explored: not known to change nothing


# --- the chart --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seed_md(tree_0513):
    from recon import spec
    from recon.profiles import load_device, load_model

    ctx = spec.spec_for(tree_0513, load_device("rtx-pro-6000"), load_model("DeepSeek-V4-Flash"))
    return ctx, spec.render(ctx, "md")


def _table_after(md: str, header_start: str) -> list[list[str]]:
    lines = md.split("\n")
    i = next(k for k, x in enumerate(lines) if x.startswith(header_start))
    rows = []
    for x in lines[i + 2:]:
        if not x.startswith("|"):
            break
        rows.append([c.strip() for c in x.strip("|").split("|")])
    return rows


def test_the_chart_carries_the_tables_numbers(seed_md):
    ctx, md = seed_md
    block = re.search(r"```mermaid\n(xychart-beta\n.*?)\n```", md, re.S)
    assert block, "no xychart block"
    body = block.group(1).split("\n")
    assert body[0] == "xychart-beta" and body[1].strip().startswith('title "')
    xs = re.search(r'x-axis "[^"]*" \[(.*)\]', block.group(1)).group(1)
    ms = [int(x.strip().strip('"')) for x in xs.split(",")]
    y = re.search(r'y-axis "[^"]*" 0 --> ([0-9.]+)', block.group(1))
    lines = [[float(v) for v in re.search(r"line \[(.*)\]", x).group(1).split(",")] for x in body if x.strip().startswith("line [")]
    assert len(lines) == 4 and all(len(v) == len(ms) for v in lines) and len(ms) >= 2
    assert float(y.group(1)) >= max(max(v) for v in lines)
    # the section 6 table as printed: M, grouped ms, floor ms, %, slot ms, ...
    table = {int(r[0]): r for r in _table_after(md, "| M | grouped kernel ms/layer")}
    pred = {int(r[0]): r for r in _table_after(md, "| M | path it would run")}
    for i, m in enumerate(ms):
        assert lines[0][i] == float(table[m][2])  # floor
        assert lines[1][i] == float(table[m][4])  # the slot kernel today
        assert lines[2][i] == float(table[m][1])  # recon's kernel, measured
        assert lines[3][i] == float(pred[m][6].split()[0])  # the prediction for the device
    left = [m for m in table if m not in ms]
    if left:
        assert "M=" + ", ".join(map(str, left)) + " are in the table but not in the chart" in md
    # the legend names the lines in order
    assert "- line 1: floor on" in md and "- line 4: recon's grouped kernel on rtx-pro-6000 (prediction)" in md
    assert ctx["chart"]["M"] == ms


def test_spec_writes_a_png_beside_the_markdown_where_matplotlib_is_importable(sglang_0513, tmp_path):
    out = tmp_path / "spec.md"
    r = _run("spec", "--sglang", "0.5.13.post1", "-o", str(out))
    assert r.exit_code in (0, 3), r.output
    md = out.read_text()
    assert "xychart-beta" in md
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert not (tmp_path / "spec.png").exists() and "](spec.png)" not in md
    else:
        png = tmp_path / "spec.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "](spec.png)" in md
