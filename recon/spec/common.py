"""Small helpers every part of the spec uses: short names, ``path:line``, findings as data."""

from __future__ import annotations

from typing import Optional



TYPICAL_BATCH = 16  # the concurrency the seed scenario decoded at


def path_line(path: Optional[str], line: Optional[int]) -> str:
    return f"{path}:{line}" if path else ""


def graph_node(G, qual: Optional[str]) -> dict:
    return dict(G.nodes[qual]) if qual and qual in G else {}


def evidence_rows(f) -> list[dict]:
    return [{"at": path_line(e.path, e.line), "path": e.path, "line": e.line, "end_line": e.end_line, "note": e.note, "snippet": e.snippet} for e in f.evidence]


def finding_row(f) -> dict:
    return {"rule": f.rule_id, "severity": f.severity, "message": f.message, "evidence": evidence_rows(f), "fingerprint": f.fingerprint,
            "on_moe_path": f.data.get("on_moe_path"), "placement": f.data.get("placement")}


def megabytes(b: float) -> float:
    return round(b / 1e6, 2)


def slim(d: dict) -> dict:
    """The parts of a finding's data the spec shows (drop long lists such as scanned functions)."""
    return {k: v for k, v in d.items() if k not in ("scanned", "functions", "reached_by")}


def by_name(G, name: str) -> list[str]:
    idx = G.graph.get("by_name")
    if idx is None:
        from ..query import name_index

        idx = name_index(G)
    return sorted(idx.get(name, ()))
