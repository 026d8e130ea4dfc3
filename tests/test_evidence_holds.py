"""Every finding of every rule, on two real releases: the cited lines exist and hold what is quoted.

A check may quote the cited line in ``Evidence.snippet``; then the file's line must say exactly that.
Rules must also not cite files the tree does not have (nothing stale from another version).
"""

from __future__ import annotations

import pytest

from recon.profiles import load_device, load_model
from recon.rules import load_rules
from recon.scan import run_rules

pytestmark = pytest.mark.network


def _every_cited_line_holds(tree, device):
    result = run_rules(tree, load_device(device), load_model(None), load_rules())
    assert not result.errors, result.errors
    assert result.findings
    checked = 0
    for f in result.findings:
        assert f.evidence, f"{f.rule_id}: a finding without evidence: {f.message}"
        for ev in f.evidence:
            assert ev.path in tree.index.files, f"{f.rule_id} cites {ev.path}, not in {tree.target.label}"
            lines = tree.lines(ev.path)
            assert 1 <= ev.line <= len(lines), f"{f.rule_id} cites {ev.path}:{ev.line} beyond the file"
            if ev.end_line:
                assert ev.line <= ev.end_line <= len(lines)
            if ev.snippet:
                first = ev.snippet.splitlines()[0].strip()
                assert first and first in lines[ev.line - 1], f"{f.rule_id}: {ev.path}:{ev.line} does not hold {first!r}"
                checked += 1
    assert checked > 0  # the checks do quote their lines


# One class per release: `--dist loadscope` gives each to one worker (each is minutes of scans).
class TestSeedRelease:
    @pytest.mark.parametrize("device", ["rtx-pro-6000", "h200"])
    def test_every_cited_line_holds(self, tree_0513, device):
        _every_cited_line_holds(tree_0513, device)


class TestNewestRelease:
    @pytest.mark.parametrize("device", ["rtx-pro-6000", "h200"])
    def test_every_cited_line_holds(self, tree_new, device):
        _every_cited_line_holds(tree_new, device)
