"""Graph export: GraphML, node-link JSON, Graphviz DOT and Mermaid, whole or around one symbol."""

from __future__ import annotations

import io
import json
from collections import deque
from typing import Optional

import networkx as nx

from .. import safetext
from ..query import DYNAMIC_KINDS, find

FORMATS = ("graphml", "json", "dot", "mermaid")
_SCALAR = (str, int, float, bool)


def subgraph(G: nx.MultiDiGraph, root: Optional[str], depth: int, dynamic: bool = True) -> nx.MultiDiGraph:
    """The whole graph (no root), or what ``root`` reaches through call-like edges in ``depth`` hops."""
    if root is None:
        H = G.copy()
        H.graph.clear()
        return H
    start = find(G, root)
    kinds = DYNAMIC_KINDS if dynamic else DYNAMIC_KINDS - {"calls_dynamic"}
    dist = {start: 0}
    q = deque([start])
    while q:
        u = q.popleft()
        if dist[u] >= depth:
            continue
        for _, v, e in G.out_edges(u, data=True):
            if e["kind"] in kinds and v not in dist:
                dist[v] = dist[u] + 1
                q.append(v)
    H = nx.MultiDiGraph()
    for n in sorted(dist):
        H.add_node(n, **G.nodes[n])
    for u, v, k, e in G.edges(list(dist), keys=True, data=True):
        if v in dist and e["kind"] in kinds:
            H.add_edge(u, v, key=k, **e)
    return H


def _flat(attrs: dict, text=str) -> dict:
    """GraphML takes scalars only: tuples become comma-joined text; ``text`` makes each string
    fit the output (:func:`recon.safetext.xml` for GraphML)."""
    out = {}
    for k, v in attrs.items():
        if isinstance(v, str):
            out[text(k)] = text(v)
        elif isinstance(v, _SCALAR):
            out[text(k)] = v
        elif isinstance(v, (tuple, list)):
            out[text(k)] = text(", ".join("=".join(map(str, x)) if isinstance(x, tuple) else str(x) for x in v))
        elif v is not None:
            out[text(k)] = text(str(v))
    return out


def _sorted_edges(H):
    return sorted(H.edges(keys=True, data=True), key=lambda t: (t[0], t[1], t[3]["kind"], t[3].get("line", 0)))


def to_graphml(H: nx.MultiDiGraph) -> str:
    F = nx.MultiDiGraph()
    x = safetext.xml  # a name from the tree may hold characters XML 1.0 cannot
    for n in sorted(H.nodes):
        F.add_node(x(n), **_flat(H.nodes[n], x))
    for u, v, k, e in _sorted_edges(H):
        F.add_edge(x(u), x(v), key=x(k) if isinstance(k, str) else k, **_flat(e, x))
    buf = io.BytesIO()
    nx.write_graphml(F, buf)
    return buf.getvalue().decode("utf-8")


def to_json(H: nx.MultiDiGraph) -> str:
    nodes = [{"id": n, **_flat(H.nodes[n])} for n in sorted(H.nodes)]
    edges = [{"source": u, "target": v, **_flat(e)} for u, v, _, e in _sorted_edges(H)]
    return json.dumps({"directed": True, "multigraph": True, "nodes": nodes, "edges": edges}, indent=1, sort_keys=True)


_q = safetext.dot_string  # quoted, controls escaped: a name cannot end the string or add a statement


def _labels(H: nx.MultiDiGraph) -> dict[str, str]:
    """The shortest dotted tail of each node's qualified name that no other node shares
    (``MoeRunner.run``, not six nodes all labelled ``run``)."""
    parts = {n: n.split(".") for n in H.nodes}
    k = {n: 1 for n in H.nodes}
    while True:
        seen: dict[str, list[str]] = {}
        for n in H.nodes:
            seen.setdefault(".".join(parts[n][-k[n]:]), []).append(n)
        clash = [n for ns in seen.values() if len(ns) > 1 for n in ns if k[n] < len(parts[n])]
        if not clash:
            return {n: ".".join(parts[n][-k[n]:]) for n in H.nodes}
        for n in clash:
            k[n] += 1


_DOT_SHAPE = {"triton_kernel": "box3d", "native_op": "component", "class": "box", "module": "folder", "capture_site": "octagon"}


def to_dot(H: nx.MultiDiGraph) -> str:
    lines = ["digraph recon {", "  rankdir=LR;", '  node [fontname="monospace" fontsize=10];']
    names = _labels(H)
    for n in sorted(H.nodes):
        d = H.nodes[n]
        label = safetext.dot_label([names[n], f"{d.get('path', '')}:{d.get('line', '')}"])
        lines.append(f"  {_q(n)} [label={label} shape={_DOT_SHAPE.get(d.get('kind'), 'ellipse')}];")
    for u, v, _, e in _sorted_edges(H):
        style = " style=dashed" if e["kind"] == "calls_dynamic" else ""
        lines.append(f"  {_q(u)} -> {_q(v)} [label={_q(e['kind'] + ' @' + str(e.get('line', '')))}{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def mermaid_id(i: int) -> str:
    return f"n{i}"


def to_mermaid(H: nx.MultiDiGraph) -> str:
    ids = {n: mermaid_id(i) for i, n in enumerate(sorted(H.nodes))}
    names = _labels(H)
    lines = ["flowchart LR"]
    for n, i in ids.items():
        d = H.nodes[n]
        label = f"{safetext.mermaid_label(names[n])}<br/>{safetext.mermaid_label(d.get('path', ''))}:{safetext.mermaid_label(d.get('line', ''))}"
        shape = ('[["', '"]]') if d.get("kind") in ("triton_kernel", "native_op") else ('["', '"]')
        lines.append(f"  {i}{shape[0]}{label}{shape[1]}")
    # one arrow per (caller, callee, kind): several call sites say how many, not one arrow each
    counts: dict[tuple, int] = {}
    for u, v, _, e in _sorted_edges(H):
        counts[(u, v, e["kind"])] = counts.get((u, v, e["kind"]), 0) + 1
    for (u, v, kind), n in counts.items():
        arrow = "-.->" if kind == "calls_dynamic" else "-->"
        lines.append(f"  {ids[u]} {arrow}|{kind}{f' ×{n}' if n > 1 else ''}| {ids[v]}")
    return "\n".join(lines) + "\n"


def export(G: nx.MultiDiGraph, fmt: str, root: Optional[str] = None, depth: int = 3) -> str:
    H = subgraph(G, root, depth)
    return {"graphml": to_graphml, "json": to_json, "dot": to_dot, "mermaid": to_mermaid}[fmt](H)
