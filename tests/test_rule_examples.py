"""Every rule's own examples, run through its check: a rule cannot silently drift.

A positive example pins each finding it must give (the line its primary evidence lands on and a
fragment of its message) and gives no other; a negative example gives none. Examples run on a tiny
synthetic tree (``code`` becomes sglang/srt/example.py) with the default device and model. The
shipped rules and the README's example rule (docs/rules/) are both run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from recon.profiles import load_device, load_model
from recon.rules import Example, Expect, RuleError, load_rules
from recon.scan import run_rules

DOC_RULES = Path(__file__).resolve().parent.parent / "docs" / "rules"  # the README's YAML-only example rule
RULES = load_rules([DOC_RULES])
CASES = [
    pytest.param(rule, kind, i, ex, id=f"{rule.id}-{kind}-{i}")
    for rule in RULES
    for kind in ("positive", "negative")
    for i, ex in enumerate(rule.examples.get(kind, []))
]


def test_every_rule_has_both_kinds_of_example():
    for rule in RULES:
        assert rule.examples.get("positive"), f"{rule.id} has no positive example"
        assert rule.examples.get("negative"), f"{rule.id} has no negative example"
        assert all(ex.expect for ex in rule.examples["positive"]), f"{rule.id}: a positive example pins nothing"


def _run(synthetic, rule, example: Example):
    tree = synthetic(example.files)
    result = run_rules(tree, load_device(None), load_model(None), [rule], use_cache=False)
    assert not result.errors, result.errors
    return tree, [f for f in result.findings if f.rule_id == rule.id]


def _unmatched(expect, findings) -> tuple[list, list]:
    """(expectations no finding meets, findings no expectation names): each finding meets one."""
    left = list(findings)
    missing = []
    for e in expect:
        hit = next((f for f in left if f.primary and (f.primary.path, f.primary.line) == (e.path, e.line) and e.message in f.message), None)
        if hit is None:
            missing.append(e)
        else:
            left.remove(hit)
    return missing, left


@pytest.mark.parametrize("rule,kind,i,example", CASES)
def test_rule_example(synthetic, rule, kind, i, example):
    tree, mine = _run(synthetic, rule, example)
    if kind == "negative":
        assert not mine, f"{rule.id}: negative example {i} gave {[f.message for f in mine]}"
        return
    missing, extra = _unmatched(example.expect, mine)
    got = [f"{f.primary.path}:{f.primary.line} {f.message[:120]}" for f in mine if f.primary]
    assert not missing, f"{rule.id}: positive example {i} expected {missing}; it gave {got}"
    assert not extra, f"{rule.id}: positive example {i} gave findings its expect block does not name: {got}"
    for f in mine:  # every cited line is in the tree and the snippet is that line
        for ev in f.evidence:
            assert ev.path in tree.index.files, f"{rule.id} cites a file not in the tree: {ev.path}"
            lines = tree.lines(ev.path)
            assert 1 <= ev.line <= len(lines), f"{rule.id} cites a line out of range"
            if ev.snippet:
                assert ev.snippet.splitlines()[0] == lines[ev.line - 1].strip(), (rule.id, ev)


def test_the_readme_example_rule_is_loaded():
    assert "small-grid-launch" in {r.id for r in RULES}


def test_a_drifted_example_fails(synthetic):
    """The pin bites: the same example with its line moved, or with another message, fails."""
    rule = next(r for r in RULES if r.id == "arch-gate")
    ex = rule.examples["positive"][1]
    _tree, mine = _run(synthetic, rule, ex)
    e = ex.expect[0]
    assert _unmatched(ex.expect, mine) == ([], [])
    assert _unmatched((Expect(e.path, e.line + 1, e.message),), mine)[0]
    assert _unmatched((Expect(e.path, e.line, e.message + " but not this"),), mine)[0]
    assert _unmatched((), mine)[1]  # a finding nobody expected


def test_positive_example_without_expect_is_refused(tmp_path):
    from recon.rules import RULES_DIR

    text = (RULES_DIR / "triton-cuda-core-reduction.yaml").read_text()
    cut = text.index("      expect:")
    end = text.index("  negative:")
    d = tmp_path / "r"
    d.mkdir()
    (d / "x.yaml").write_text(text[:cut] + text[end:])
    with pytest.raises(RuleError, match=r"examples\.positive\[0\]\.expect is missing"):
        load_rules([d])


def test_rules_show_prints_the_pins():
    from typer.testing import CliRunner

    from recon.cli import app

    res = CliRunner().invoke(app, ["rules", "show", "arch-gate"])
    assert res.exit_code == 0, res.output
    assert "expect: sglang/srt/example.py:3 — is_hopper is false" in res.output
    assert "def is_hopper():" in res.output
