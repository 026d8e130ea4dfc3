"""Questions answered from the dispatch graph: where, callers, callees, path, launches.

Symbols are found by qualified name, by ``Class.method`` or by short name; an ambiguous name
returns its candidates instead of a guess. Paths prefer edges resolved statically and fall back to
dynamic dispatch (``calls_dynamic``), saying so on each inferred hop.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional

import networkx as nx

from .errors import NothingToDo

CALL_KINDS = frozenset({"calls", "launches", "wraps", "captures"})
DYNAMIC_KINDS = CALL_KINDS | {"calls_dynamic"}
TARGET_KINDS = ("triton_kernel", "native_op")


class AmbiguousSymbol(NothingToDo):
    def __init__(self, name: str, candidates: list[str]):
        self.name = name
        self.candidates = candidates  # best first (see _best_first)
        shown = ", ".join(candidates[:12]) + (f" … ({len(candidates)} in all)" if len(candidates) > 12 else "")
        super().__init__(f"{name!r} is ambiguous; give one of: {shown}")


class UnknownSymbol(NothingToDo):
    pass


def name_index(G: nx.MultiDiGraph) -> dict[str, list[str]]:
    idx = G.graph.get("_by_name")
    if idx is None:
        idx = {}
        for n, d in G.nodes(data=True):
            idx.setdefault(d.get("name", n), []).append(n)
        G.graph["_by_name"] = idx
    return idx


def find(G: nx.MultiDiGraph, symbol: str) -> str:
    """The one node ``symbol`` names; raises with candidates when it names several or none."""
    if symbol in G:
        return symbol
    short = symbol.rsplit(".", 1)[-1]
    cands = [n for n in name_index(G).get(short, ()) if n == symbol or n.endswith("." + symbol)]
    if not cands:
        raise UnknownSymbol(f"no symbol {symbol!r} in this tree")
    if len(cands) > 1:
        # a definition beats a native op or a re-export of the same name
        defs = [c for c in cands if G.nodes[c].get("kind") in ("function", "class", "triton_kernel")]
        if len(defs) == 1:
            return defs[0]
        raise AmbiguousSymbol(symbol, _best_first(G, cands))
    return cands[0]


_KIND_RANK = {"function": 0, "class": 0, "triton_kernel": 0, "native_op": 1}


def _best_first(G: nx.MultiDiGraph, cands: list[str]) -> list[str]:
    """Definitions before ops and re-exports, then the most called, then the shortest name."""
    def key(n: str):
        called = sum(1 for _, _, e in G.in_edges(n, data=True) if e.get("kind") in CALL_KINDS)
        return (_KIND_RANK.get(G.nodes[n].get("kind"), 2), -called, n.count("."), n)

    return sorted(cands, key=key)


def loc(d: dict) -> str:
    return f"{d.get('path', '')}:{d.get('line', 0)}"


@dataclass
class Hop:
    node: str
    kind: str  # node kind
    at: str  # where the node is defined
    via_edge: Optional[str] = None  # edge kind that led here
    call_at: Optional[str] = None  # where the previous node calls/launches this one
    inferred: bool = False

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def where(G: nx.MultiDiGraph, symbol: str) -> dict:
    n = find(G, symbol)
    d = dict(G.nodes[n])
    out = {"symbol": n, "kind": d.get("kind"), "at": loc(d)}
    if d.get("defined_by") == "assignment":
        kw = ", ".join(f"{k}={v}" for k, v in d.get("wrap_kwargs", ()))
        out["defined_by"] = "assignment"
        out["wraps"] = d.get("wraps")
        wrapped = [v for _, v, e in G.out_edges(n, data=True) if e["kind"] == "wraps"]
        if wrapped:
            out["wraps_symbol"] = wrapped[0]
            out["wraps_at"] = loc(G.nodes[wrapped[0]])
        out["bound_arguments"] = kw
        if d.get("aliases"):
            out["aliases"] = list(d["aliases"])
    else:
        out["defined_by"] = {"class": "class statement", "module": "module"}.get(d.get("kind"), "def statement")
    if d.get("decorators"):
        out["decorators"] = list(d["decorators"])
    if d.get("end_line"):
        out["end_line"] = d["end_line"]
    return out


def _edges(G, n, direction: str, kinds) -> list[dict]:
    it = G.in_edges(n, data=True) if direction == "in" else G.out_edges(n, data=True)
    rows = []
    for u, v, e in it:
        if e["kind"] not in kinds:
            continue
        other = u if direction == "in" else v
        od = G.nodes[other]
        row = {"symbol": other, "kind": od.get("kind"), "edge": e["kind"], "call_at": loc(e), "defined_at": loc(od)}
        if e.get("via"):
            row["via"] = e["via"]
        if e.get("grid"):
            row["grid"] = e["grid"]
        rows.append(row)
    rows.sort(key=lambda r: (r["edge"] == "calls_dynamic", r["call_at"], r["symbol"]))
    return rows


def callers(G: nx.MultiDiGraph, symbol: str, dynamic: bool = True, tree=None) -> list[dict]:
    """Who calls ``symbol``; with the tree, also code that reaches it through a name -> function
    table read as an attribute (``get_platform().is_sm120`` for ``is_sm120_supported``)."""
    node = find(G, symbol)
    rows = _edges(G, node, "in", DYNAMIC_KINDS if dynamic else CALL_KINDS)
    if tree is not None and G.nodes[node].get("kind") == "function":
        from .engine.tables import readers
        rows += readers(tree, node)
    return rows


def callees(G: nx.MultiDiGraph, symbol: str, dynamic: bool = True) -> list[dict]:
    return _edges(G, find(G, symbol), "out", DYNAMIC_KINDS if dynamic else CALL_KINDS)


def _bfs_path(G, src: str, dst: str, kinds) -> Optional[list[tuple[str, Optional[dict]]]]:
    prev: dict[str, tuple[str, dict]] = {}
    seen = {src}
    q = deque([src])
    while q:
        u = q.popleft()
        if u == dst:
            break
        # deterministic: visit successors in sorted order
        nbrs = []
        for _, v, e in G.out_edges(u, data=True):
            if e["kind"] in kinds and v not in seen:
                nbrs.append((v, e))
        nbrs.sort(key=lambda t: (t[1]["kind"] == "calls_dynamic", t[0], t[1].get("line", 0)))
        for v, e in nbrs:
            if v in seen:
                continue
            seen.add(v)
            prev[v] = (u, e)
            q.append(v)
    if dst not in seen:
        return None
    out = [(dst, None)]
    cur = dst
    while cur != src:
        u, e = prev[cur]
        out[-1] = (cur, e)
        out.append((u, None))
        cur = u
    out.reverse()
    return out


def path(G: nx.MultiDiGraph, src: str, dst: str) -> list[Hop]:
    """Shortest call path from ``src`` to ``dst``, static edges first, dynamic dispatch if needed."""
    a, b = find(G, src), find(G, dst)
    steps = _bfs_path(G, a, b, CALL_KINDS) or _bfs_path(G, a, b, DYNAMIC_KINDS)
    if steps is None:
        raise UnknownSymbol(f"no call path from {a} to {b}")
    hops = []
    for node, e in steps:
        d = G.nodes[node]
        hops.append(
            Hop(
                node,
                d.get("kind", ""),
                loc(d),
                e["kind"] if e else None,
                loc(e) if e else None,
                bool(e and e["kind"] == "calls_dynamic"),
            )
        )
    return hops


def launches(G: nx.MultiDiGraph, symbol: str, depth: int = 8, dynamic: bool = False) -> list[dict]:
    """Triton kernels and native ops reachable from ``symbol`` within ``depth`` hops, with the route."""
    start = find(G, symbol)
    kinds = DYNAMIC_KINDS if dynamic else CALL_KINDS
    prev: dict[str, tuple[str, dict]] = {}
    dist = {start: 0}
    q = deque([start])
    found = []
    while q:
        u = q.popleft()
        if dist[u] >= depth:
            continue
        for _, v, e in sorted(G.out_edges(u, data=True), key=lambda t: (t[1], t[2].get("line", 0))):
            if e["kind"] not in kinds or v in dist:
                continue
            if G.nodes[u].get("kind") == "triton_kernel" and e["kind"] != "launches":
                continue  # a @triton.jit helper called from a kernel's body is inlined into it: no launch
            dist[v] = dist[u] + 1
            prev[v] = (u, e)
            if G.nodes[v].get("kind") in TARGET_KINDS:
                found.append(v)
            q.append(v)
    rows = []
    for v in found:
        route, cur = [], v
        while cur != start:
            u, e = prev[cur]
            route.append(f"{G.nodes[cur].get('name', cur)} @ {loc(e)}")
            cur = u
        route.reverse()
        d = G.nodes[v]
        u, e = prev[v]
        row = {"symbol": v, "kind": d.get("kind"), "defined_at": loc(d), "launched_at": loc(e), "depth": dist[v], "route": route}
        if e.get("grid"):
            row["grid"] = e["grid"]
        rows.append(row)
    rows.sort(key=lambda r: (r["depth"], r["symbol"]))
    return rows
