"""Small helpers every part of the spec uses: short names, ``path:line``, findings as data."""

from __future__ import annotations

from typing import Optional



TYPICAL_BATCH = 16  # the concurrency the seed scenario decoded at


def _short(qualname: Optional[str]) -> str:
    """``pkg.mod.Class.method`` -> ``Class.method`` (or ``mod.func`` for a module-level function)."""
    if not qualname:
        return ""
    parts = qualname.split(".")
    tail = parts[-2:] if len(parts) >= 2 else parts
    return ".".join(tail)


def _at(path: Optional[str], line: Optional[int]) -> str:
    return f"{path}:{line}" if path else ""


def _node(G, qual: Optional[str]) -> dict:
    return dict(G.nodes[qual]) if qual and qual in G else {}


def _ev(f) -> list[dict]:
    return [{"at": _at(e.path, e.line), "path": e.path, "line": e.line, "end_line": e.end_line, "note": e.note, "snippet": e.snippet} for e in f.evidence]


def _fd(f) -> dict:
    return {"rule": f.rule_id, "severity": f.severity, "message": f.message, "evidence": _ev(f), "fingerprint": f.fingerprint,
            "on_moe_path": f.data.get("on_moe_path"), "placement": f.data.get("placement")}


def _mb(b: float) -> float:
    return round(b / 1e6, 2)


def _slim(d: dict) -> dict:
    """The parts of a finding's data the spec shows (drop long lists such as scanned functions)."""
    return {k: v for k, v in d.items() if k not in ("scanned", "functions", "reached_by")}


def _by_name(G, name: str) -> list[str]:
    idx = G.graph.get("_by_name")
    if idx is None:
        from ..query import _name_index

        idx = _name_index(G)
    return sorted(idx.get(name, ()))
