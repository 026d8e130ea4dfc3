"""Every rule's own examples, run through its check: a rule cannot silently stop matching.

Positive examples must give at least one finding of that rule; negative ones none. Examples run on
a tiny synthetic tree (a code string becomes sglang/srt/example.py) with the default device and
model.
"""

from __future__ import annotations

import pytest

from recon.profiles import load_device, load_model
from recon.rules import load_rules
from recon.scan import run_rules

RULES = load_rules()
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


@pytest.mark.parametrize("rule,kind,i,example", CASES)
def test_rule_example(synthetic, rule, kind, i, example):
    files = {"sglang/srt/example.py": example} if isinstance(example, str) else dict(example)
    tree = synthetic(files)
    device = load_device(None)
    model = load_model(None)
    result = run_rules(tree, device, model, [rule], use_cache=False)
    assert not result.errors, result.errors
    mine = [f for f in result.findings if f.rule_id == rule.id]
    if kind == "positive":
        assert mine, f"{rule.id}: positive example {i} gave no finding"
        for f in mine:
            for ev in f.evidence:
                assert ev.path in tree.index.files, f"{rule.id} cites a file not in the tree: {ev.path}"
                assert 1 <= ev.line <= len(tree.lines(ev.path)), f"{rule.id} cites a line out of range"
    else:
        assert not mine, f"{rule.id}: negative example {i} gave {[f.message for f in mine]}"
