"""Running rules over a loaded tree for a device and a model."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field

from .checks import CheckContext, registry
from .findings import Finding
from .rules import Rule


@dataclass
class ScanResult:
    findings: list[Finding]
    errors: list[tuple[str, str]] = field(default_factory=list)  # (rule id, one-line error) of checks that crashed
    context: CheckContext | None = None


def run_rules(tree, device, model, rules: list[Rule]) -> ScanResult:
    """Every rule's findings; a check that crashes is reported and the others still run."""
    ctx = CheckContext(tree, device, model)
    checks = registry()
    findings: list[Finding] = []
    errors: list[tuple[str, str]] = []
    for rule in rules:
        try:
            out = checks[rule.check](ctx, rule) or []
        except Exception as e:  # one broken check must not hide the others' findings
            tb = traceback.extract_tb(e.__traceback__)[-1]
            errors.append((rule.id, f"{type(e).__name__}: {e} (at {tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"))
            continue
        for f in out:
            if not f.rule_id:
                f.rule_id = rule.id
            findings.append(f)
    findings.sort(key=Finding.sort_key)
    return ScanResult(findings, errors, ctx)
