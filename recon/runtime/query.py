"""Questions answered for what runs: ``recon query`` with ``--device``/``--model``/``--server-args``
keeps only the calls and kernels on the path the runtime view resolved."""

from __future__ import annotations

from ..query import find, loc


def path_nodes(view) -> dict:
    """node -> the hops (what, path:line) by which the resolved MoE path reaches it."""
    out: dict = {}
    for lf in view.moe.get("leaves", []):
        if not lf.get("primary"):
            continue
        hops = lf["via"]
        for i, h in enumerate(hops):
            if h.get("node"):
                out.setdefault(h["node"], hops[i:])
        out.setdefault(lf["name"], [])
    return out


def launches_on_path(G, view, symbol: str) -> list[dict]:
    """The kernels and ops the resolved path reaches from ``symbol`` (which must be on it)."""
    start = find(G, symbol)
    rows = []
    for lf in view.moe.get("leaves", []):
        if not lf.get("primary"):
            continue
        nodes = [h.get("node") for h in lf["via"]]
        if start not in nodes:
            continue
        i = nodes.index(start)
        d = G.nodes.get(lf["name"], {})
        rows.append({"symbol": lf["name"], "kind": lf["kind"], "defined_at": loc(d) if d else "(outside the tree)",
                     "launched_at": f"{lf['path']}:{lf['line']}", "depth": len(nodes) - i,
                     "route": [f"{h['what']} @ {h['path']}:{h['line']}" for h in lf["via"][i:]],
                     "when": lf.get("when", [])})
    rows.sort(key=lambda r: (r["depth"], r["symbol"]))
    return rows


def callees_on_path(G, view, rows: list[dict], symbol: str) -> list[dict]:
    """Graph callees of ``symbol`` kept when the resolved path calls them from there."""
    start = find(G, symbol)
    on = path_nodes(view)
    if start not in on and not any(h.get("node") == start for lf in view.moe.get("leaves", []) for h in lf["via"]):
        return []
    taken_lines = {(h["path"], h["line"]) for lf in view.moe.get("leaves", []) if lf.get("primary")
                   for h in lf["via"] if h.get("node") == start}
    return [r for r in rows if tuple(r["call_at"].rsplit(":", 1)) in {(p, str(ln)) for p, ln in taken_lines}]


def path_on_path(G, view, src: str, dst: str) -> list[dict]:
    """The hops from ``src`` to ``dst`` as the resolved path takes them (UnknownSymbol when ``dst``
    is not reached from ``src`` there)."""
    from ..query import UnknownSymbol

    a, b = find(G, src), find(G, dst)
    for lf in view.moe.get("leaves", []):
        if not lf.get("primary"):
            continue
        nodes = [h.get("node") for h in lf["via"]] + [lf["name"]]
        if a in nodes and b in nodes and nodes.index(a) < nodes.index(b):
            i, j = nodes.index(a), nodes.index(b)
            out = [{"node": a, "at": loc(G.nodes.get(a, {})), "via_edge": None, "call_at": None, "inferred": False}]
            for k in range(i, j):
                h = lf["via"][k]
                n = nodes[k + 1]
                out.append({"node": n, "at": loc(G.nodes.get(n, {})) if n in G else "(outside the tree)", "via_edge": "calls",
                            "call_at": f"{h['path']}:{h['line']}", "inferred": False, "what": h["what"]})
            return out
    raise UnknownSymbol(f"{b} is not reached from {a} on the path that runs for this device, model and flags")
