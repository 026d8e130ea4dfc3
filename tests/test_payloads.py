"""What a finding carries in ``Finding.data`` is declared per check (small dataclasses), and every
finding the checks make matches one of its check's declarations, keys and value types."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from recon.checks import SCAN_KEYS, payload_errors, payload_fields, registry
from recon.profiles import load_device, load_model
from recon.rules import load_rules
from recon.scan import run_rules

ROOT = Path(__file__).resolve().parent.parent
RULES = {r.id: r for r in load_rules()}


def _check_all(findings) -> list[str]:
    bad = []
    for f in findings:
        check = RULES[f.rule_id].check
        err = payload_errors(f.data, registry()[check].payload)
        if err:
            bad.append(f"{f.rule_id} at {f.primary.path}:{f.primary.line}: {err}" if f.primary else f"{f.rule_id}: {err}")
    return bad


def test_every_shipped_check_declares_its_payloads():
    for rule in RULES.values():
        payload = registry()[rule.check].payload
        assert payload, f"{rule.check} declares no payload"
        assert all(dataclasses.is_dataclass(p) and payload_fields(p) for p in payload), rule.check


def test_payload_errors_bite():
    from recon.checks.gates import GateData

    good = {"gate": "is_x", "qualname": "m.is_x", "value": True, "predicate": "p", "form": "def", "aliases": [],
            "true_on": ["h200"], "wraps": None, "kwargs": {}, "on_moe_path": False}
    assert payload_errors(good, (GateData,)) is None
    assert "undeclared ['extra']" in payload_errors({**good, "extra": 1}, (GateData,))
    assert "missing ['form']" in payload_errors({k: v for k, v in good.items() if k != "form"}, (GateData,))
    assert "wrong types" in payload_errors({**good, "value": "yes"}, (GateData,))
    assert payload_errors({**good, "on_moe_path": "no"}, (GateData,))


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_example_findings_match_their_payloads(synthetic, rule_id):
    rule = RULES[rule_id]
    for ex in rule.examples["positive"]:
        res = run_rules(synthetic(ex.files), load_device(None), load_model(None), [rule], use_cache=False)
        mine = [f for f in res.findings if f.rule_id == rule_id]
        assert mine and not _check_all(mine), _check_all(mine)


@pytest.mark.parametrize("device", ["rtx-pro-6000", "h200"])
def test_release_findings_match_their_payloads(tree_0513, tree_new, device):
    for tree in (tree_0513, tree_new):
        res = run_rules(tree, load_device(device), load_model("DeepSeek-V4-Flash"), list(RULES.values()))
        assert res.findings and not _check_all(res.findings), _check_all(res.findings)[:5]


def test_what_spec_and_apply_read_from_finding_data_is_declared():
    declared = set(SCAN_KEYS)
    for fn in registry().values():
        for p in fn.payload:
            declared |= set(payload_fields(p))
    reads = set()
    for p in sorted((ROOT / "recon" / "spec").rglob("*.py")) + sorted((ROOT / "recon" / "apply").rglob("*.py")):
        reads |= {(p.name, k) for k in re.findall(r'(?:\.data|\["data"\])(?:\.get\(|\[)"(\w+)"', p.read_text())}
    assert len(reads) > 20
    assert not {r for r in reads if r[1] not in declared}, sorted(r for r in reads if r[1] not in declared)
