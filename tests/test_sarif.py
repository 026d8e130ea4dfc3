"""SARIF 2.1.0 output: the keys code-scanning tools read, related locations, determinism."""

from __future__ import annotations

import json

from recon.findings import Evidence, Finding
from recon.rules import Rule
from recon.render.sarif import to_sarif


def _rule(rid="arch-gate", severity="note"):
    return Rule(id=rid, title=f"Title of {rid}", severity=severity, category="dispatch", finds="What it finds.",
                why="Why it costs.", fix="How to fix.", check="arch_gate")


def _findings():
    return [
        Finding("backend-selection", "backend sm120_triton taken", "warning", [
            Evidence("sglang/srt/layers/q.py", 10, 12, "set here", "x = 'a'"),
            Evidence("sglang/srt/layers/q.py", 40, None, "compared here"),
            Evidence("sglang/srt/layers/k.py", 5),
        ], {"chain": [("a.b", "p.py", 3)], "value": "sm120_triton"}),
        Finding("arch-gate", "is_sm120_supported is true", "note", [Evidence("sglang/srt/utils/common.py", 277)],
                {"gate": "is_sm120_supported", "value": True}),
    ]


def test_sarif_structure():
    rules = [_rule("backend-selection", "warning"), _rule("arch-gate")]
    log = to_sarif(_findings(), rules, "0.1.0", "sglang==0.5.13.post1")
    assert log["version"] == "2.1.0" and "sarif-2.1.0" in log["$schema"]
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "recon" and driver["version"] == "0.1.0"
    ids = [r["id"] for r in driver["rules"]]
    assert ids == ["arch-gate", "backend-selection"]
    r0 = driver["rules"][1]
    assert r0["shortDescription"]["text"] == "Title of backend-selection"
    assert r0["fullDescription"]["text"] == "What it finds."
    assert "Why it costs." in r0["help"]["text"] and "How to fix." in r0["help"]["text"]
    assert r0["defaultConfiguration"]["level"] == "warning"

    res = {r["ruleId"]: r for r in run["results"]}
    b = res["backend-selection"]
    assert b["level"] == "warning" and b["message"]["text"] == "backend sm120_triton taken"
    assert driver["rules"][b["ruleIndex"]]["id"] == "backend-selection"
    loc = b["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "sglang/srt/layers/q.py"
    assert loc["region"] == {"startLine": 10, "endLine": 12, "snippet": {"text": "x = 'a'"}}
    assert [r["physicalLocation"]["region"]["startLine"] for r in b["relatedLocations"]] == [40, 5]
    assert b["relatedLocations"][0]["message"]["text"] == "compared here"
    assert b["partialFingerprints"]["reconFingerprint/v1"] == _findings()[0].fingerprint
    assert b["properties"]["chain"] == [["a.b", "p.py", 3]]  # tuples become JSON lists
    assert "relatedLocations" not in res["arch-gate"]
    assert res["arch-gate"]["level"] == "note"


def test_sarif_is_deterministic_and_json():
    rules = [_rule("backend-selection", "warning"), _rule("arch-gate")]
    a = json.dumps(to_sarif(_findings(), rules, "0.1.0", "t"), sort_keys=True)
    b = json.dumps(to_sarif(list(reversed(_findings())), list(reversed(rules)), "0.1.0", "t"), sort_keys=True)
    assert a == b


def test_sarif_from_real_scan(tree_0513):
    """Findings of the real rules on the real tree become a log whose every location is a real line."""
    from recon.profiles import load_device, load_model
    from recon.rules import load_rules
    from recon.scan import run_rules

    rules = [r for r in load_rules() if r.id in ("arch-gate", "backend-selection")]
    result = run_rules(tree_0513, load_device("rtx-pro-6000"), load_model("DeepSeek-V4-Flash"), rules)
    assert not result.errors
    log = to_sarif(result.findings, rules, "0.1.0", tree_0513.target.label)
    results = log["runs"][0]["results"]
    assert results and {r["ruleId"] for r in results} == {"arch-gate", "backend-selection"}
    for r in results:
        for loc in r.get("locations", []) + r.get("relatedLocations", []):
            pl = loc["physicalLocation"]
            lines = tree_0513.lines(pl["artifactLocation"]["uri"])
            assert 1 <= pl["region"]["startLine"] <= len(lines)


def test_sarif_names_no_absolute_local_path():
    """A public code-scanning upload must not carry the machine's directory layout."""
    log = to_sarif(_findings(), [_rule("backend-selection", "warning"), _rule("arch-gate")], "0.1.0", "/home/someone/src/sglang @ abc123")
    text = json.dumps(log)
    assert "/home/someone" not in text
    run = log["runs"][0]
    assert run["originalUriBaseIds"]["SRCROOT"]["description"]["text"] == "sglang @ abc123"
    assert to_sarif([], [], "0.1.0", "sglang==0.5.5")["runs"][0]["properties"]["target"] == "sglang==0.5.5"
