"""Rows the spec of a MoE model and of a dense model share: the target it was made for, the
will-it-run rows and the step budget's ranked rows."""

from __future__ import annotations

from typing import Optional

from .common import path_line


def target_row(tree, reason: Optional[str]) -> dict:
    t = tree.target
    return {"label": t.label, "kind": t.kind, "version": t.version, "revision": t.revision, "reason": reason or t.reason}


_SEVERITY_ORDER = {"error": 0, "warning": 1, "note": 2}


def will_it_run(findings, roles, titles) -> list[dict]:
    """Findings of the rules whose spec section is "will-it-run" (ops with no kernels for the device,
    family-lumping gates): errors first, each with its op or gate, step and avoidance."""
    rows = [f for f in findings if roles.is_(f, "will-it-run")]
    rows.sort(key=lambda f: (_SEVERITY_ORDER.get(f.severity, 3), f.rule_id, f.primary.path if f.primary else "", f.primary.line if f.primary else 0))
    return [{"rule": f.rule_id, "title": titles.get(f.rule_id, f.rule_id), "severity": f.severity, "message": f.message,
             "at": path_line(f.primary.path, f.primary.line) if f.primary else "", "op": f.data.get("op") or ", ".join(f.data.get("ops", [])),
             "test": f.data.get("test"), "step": f.data.get("step"), "layer": f.data.get("layer"), "avoid": list(f.data.get("avoid", []))}
            for f in rows]


def ranked_rows(budget: Optional[dict]) -> list[dict]:
    """Every budget row, the ones with a share of the step first, largest first."""
    if not budget:
        return []
    from ..kernels.budget import ranked

    first = ranked(budget, budget["M"][0])
    return first + [r for r in budget["rows"] if r not in first]


def headline(budget: Optional[dict]) -> list[dict]:
    """The rows of the step budget by their share of the step at M=1, largest first."""
    if not budget:
        return []
    from ..kernels.budget import ranked

    m = budget["M"][0]
    return [{"kind": r["kind"], "op": r["op"], "share": r["share"][str(m)], "time": r["time"].get(str(m)),
             "floor_us": r["points"][0]["floor_us"], "M": m} for r in ranked(budget, m)]
