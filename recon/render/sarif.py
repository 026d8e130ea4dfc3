"""Findings as SARIF 2.1.0, so code-scanning UIs (GitHub, VS Code SARIF viewer) show them in place.

One run, tool ``recon``; each rule becomes a ``reportingDescriptor`` (title, what it finds, why and
fix as help), each finding a ``result`` whose first evidence is the location and the rest related
locations. Output is deterministic: rules sorted by id, results in the findings' sort order,
fingerprints from :attr:`Finding.fingerprint`.
"""

from __future__ import annotations

from typing import Any, Iterable

from .. import notanalyzed
from ..findings import Finding
from ..rules import Rule

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
VERSION = "2.1.0"
INFORMATION_URI = "https://github.com/sgl-project/sglang"  # what recon reads; recon has no public page
_LEVEL = {"error": "error", "warning": "warning", "note": "note"}


def _level(severity: str) -> str:
    return _LEVEL.get(severity, "warning")


def _rule_descriptor(rule: Rule) -> dict:
    help_text = f"{rule.why}\n\nFix: {rule.fix}"
    return {
        "id": rule.id,
        "name": "".join(w.capitalize() for w in rule.id.replace("_", "-").split("-")),
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.finds},
        "help": {"text": help_text, "markdown": f"**Why:** {rule.why}\n\n**Fix:** {rule.fix}"},
        "defaultConfiguration": {"level": _level(rule.severity)},
        "properties": {"category": rule.category, "check": rule.check},
    }


def _location(ev, uri_base_id: str) -> dict:
    region: dict[str, Any] = {"startLine": max(1, int(ev.line))}
    if ev.end_line and ev.end_line >= ev.line:
        region["endLine"] = int(ev.end_line)
    if ev.snippet:
        region["snippet"] = {"text": ev.snippet}
    loc = {"physicalLocation": {"artifactLocation": {"uri": ev.path.lstrip("/"), "uriBaseId": uri_base_id}, "region": region}}
    if ev.note:
        loc["message"] = {"text": ev.note}
    return loc


def _jsonable(v):
    """data values as JSON types (tuples -> lists, other objects -> str), for result properties."""
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set)):
        return [_jsonable(x) for x in (sorted(v, key=str) if isinstance(v, set) else v)]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def public_label(label: str) -> str:
    """The target as a public upload may name it: a local directory by its last component only (an
    absolute path names the user's machine layout; the SARIF is meant for code-scanning UIs)."""
    import os

    if label and (os.path.isabs(label) or label.startswith("~")):
        head, sep, rest = label.partition(" ")  # "PATH @ REV" keeps its revision
        return (os.path.basename(head.rstrip("/\\")) or "target") + (sep + rest if sep else "")
    return label


def to_sarif(findings: Iterable[Finding], rules: Iterable[Rule], tool_version: str, target_label: str,
             not_analyzed: Iterable[dict] = (), errors: Iterable[tuple[str, str]] = ()) -> dict:
    """A SARIF 2.1.0 log (a dict ready for ``json.dumps``) of ``findings`` from ``rules``.

    The run's one ``invocation`` carries a notification per file not analyzed
    (:mod:`recon.notanalyzed`) and per check that crashed, so a code-scanning UI shows what the
    results do not cover."""
    target_label = public_label(target_label)
    rules = sorted(rules, key=lambda r: r.id)
    index = {r.id: i for i, r in enumerate(rules)}
    findings = sorted(findings, key=Finding.sort_key)
    uri_base = "SRCROOT"
    results = []
    for f in findings:
        placement = f.data.get("placement")
        res: dict[str, Any] = {
            "ruleId": f.rule_id,
            # off the mapped step: a note, whatever the rule's level (its costs were not bound here)
            "level": "note" if placement == "elsewhere" else _level(f.severity),
            "message": {"text": f.message},
            "partialFingerprints": {"reconFingerprint/v1": f.fingerprint},
        }
        if f.rule_id in index:
            res["ruleIndex"] = index[f.rule_id]
        if f.evidence:
            res["locations"] = [_location(f.evidence[0], uri_base)]
            related = []
            for i, ev in enumerate(f.evidence[1:], start=1):
                loc = _location(ev, uri_base)
                loc["id"] = i
                related.append(loc)
            if related:
                res["relatedLocations"] = related
        if f.data:
            res["properties"] = _jsonable(f.data)
        if placement:
            res.setdefault("properties", {})["onMappedStep"] = placement == "on-step"
        results.append(res)
    errors = sorted(errors)
    notifications = notanalyzed.sarif_notifications(list(not_analyzed), uri_base) + [
        {"descriptor": {"id": rule_id}, "level": "error", "message": {"text": f"check crashed, its findings are missing: {msg}"}}
        for rule_id, msg in errors
    ]
    return {
        "$schema": SCHEMA,
        "version": VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "recon",
                        "version": tool_version,
                        "informationUri": INFORMATION_URI,
                        "rules": [_rule_descriptor(r) for r in rules],
                    }
                },
                "automationDetails": {"id": f"recon/{target_label}"},
                "invocations": [{"executionSuccessful": not errors, "toolExecutionNotifications": notifications}],
                "originalUriBaseIds": {uri_base: {"description": {"text": target_label}}},
                "properties": {"target": target_label},
                "results": results,
                "columnKind": "unicodeCodePoints",
            }
        ],
    }
