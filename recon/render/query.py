"""``recon query`` as text a person reads at 100 columns: plain lines, no tables.

Each entry is its symbol on one line and its ``path:line`` places on their own indented lines
below, so a long path never breaks mid-name and nothing runs off the right edge. What repeats is
said once: several call sites of one symbol share a line per file; the routes that ``launches``
finds are merged into one tree, so a common prefix of the call chain is printed once.
(``--format json`` keeps every field of every row.)
"""

from __future__ import annotations

from collections import defaultdict

from ..names import short

AMBIGUOUS_SHOWN = 10  # candidates listed for an ambiguous name; the count says how many more


WIDTH = 100


def _sites(places: list[str], room: int = WIDTH - 8) -> list[str]:
    """``a.py:3, a.py:9, b.py:1`` -> ``["a.py:3, 9", "b.py:1"]``: one line per file, its line
    numbers in order, continued on another line for the same file when they would not fit."""
    by_file: dict[str, list[int]] = defaultdict(list)
    for p in places:
        path, _, line = p.rpartition(":")
        by_file[path].append(int(line) if line.isdigit() else 0)
    out = []
    for path, lines in by_file.items():
        cur: list[str] = []
        for n in sorted(set(lines)):
            if cur and len(path) + 1 + len(", ".join(cur + [str(n)])) > room:
                out.append(f"{path}:{', '.join(cur)}")
                cur = []
            cur.append(str(n))
        out.append(f"{path}:{', '.join(cur)}")
    return out


def where(r: dict) -> list[str]:
    out = [f"{r['symbol']}  ({r['kind']})", f"    {r['at']}"]
    if r.get("defined_by") == "assignment":
        out.append(f"  defined by assignment, wrapping {r.get('wraps_symbol') or r['wraps']}")
        if r.get("wraps_at"):
            out.append(f"    {r['wraps_at']}")
        if r.get("bound_arguments"):
            out.append(f"  bound arguments: {r['bound_arguments']}")
        if r.get("aliases"):
            out.append(f"  same object as: {', '.join(r['aliases'])}")
    else:
        out.append(f"  defined by {r['defined_by']}")
    if r.get("decorators"):
        out.append(f"  decorators: {', '.join(r['decorators'])}")
    return out


def edges(rows: list[dict], title: str) -> list[str]:
    """callers / callees: one entry per (symbol, edge kind), its call sites grouped by file."""
    if not rows:
        return [f"{title}: none"]
    groups: dict[tuple, dict] = {}
    for r in rows:
        g = groups.setdefault((r["symbol"], r["edge"], r.get("via")), {"sites": [], "defined_at": r["defined_at"]})
        g["sites"].append(r["call_at"])
    out = [f"{title}: {len(groups)} symbol(s), {len(rows)} site(s)"]
    for (symbol, edge, via), g in groups.items():
        out.append("")
        out.append(symbol)
        if edge != "calls" or via:  # the common case goes unsaid
            out.append(f"    {edge}" + (f" via {via}" if via else "") + (" (inferred: dynamic dispatch)" if edge == "calls_dynamic" else ""))
        out += [f"    at {s}" for s in _sites(g["sites"])]
        out.append(f"    defined {g['defined_at']}")
    return out


def path(hops: list[dict]) -> list[str]:
    out = []
    for i, h in enumerate(hops):
        if i == 0:
            out += [h["node"], f"    {h['at']}"]
            continue
        tag = "  (inferred: dynamic dispatch)" if h.get("inferred") else ""
        pad = "  " * i
        out += [f"{pad}└─ {h['via_edge']} {short(h['node'])}{tag}", f"{pad}     at {h['call_at']}", f"{pad}     defined {h['at']}"]
    return out


def launches(rows: list[dict], root: str) -> list[str]:
    """The routes to every kernel and op merged into one tree; each kernel says its kind and
    where it is defined. Indentation is capped so deep routes stay inside 100 columns."""
    if not rows:
        return [f"no Triton kernel or native op reachable from {root}"]
    tree: dict = {}
    leaf: dict[tuple, dict] = {}
    for r in rows:
        node = tree
        steps = tuple(r["route"])
        for i, step in enumerate(steps):
            node = node.setdefault(step, {})
        leaf[steps] = r
    kernels = sum(1 for r in rows if r["kind"] == "triton_kernel")
    out = [f"{len(rows)} reachable from {root}: {kernels} Triton kernel(s), {len(rows) - kernels} native op(s)", root]

    def walk(node: dict, prefix: tuple, depth: int) -> None:
        pad = "  " * min(depth, 5)  # deeper hops stay at this indentation (the tree lines still say whose child)
        for step, child in node.items():
            name, _, at = step.partition(" @ ")
            here = prefix + (step,)
            r = leaf.get(here)
            mark = f"  [{r['kind']}]" if r else ""
            out.append(f"{pad}└─ {name}{mark}")
            out.append(f"{pad}   at {at}")
            if r and r.get("defined_at") and r["defined_at"] != at:
                out.append(f"{pad}   def {r['defined_at']}")
            walk(child, here, depth + 1)

    walk(tree, (), 1)
    return out


def ambiguous(name: str, candidates: list[str]) -> list[str]:
    """An ambiguous name's candidates, best first (as given), one per line, capped with a count."""
    out = [f"error: {name!r} names {len(candidates)} symbols; give one of these (best first):"]
    out += [f"  {c}" for c in candidates[:AMBIGUOUS_SHOWN]]
    if len(candidates) > AMBIGUOUS_SHOWN:
        out.append(f"  … and {len(candidates) - AMBIGUOUS_SHOWN} more (--format json lists them all)")
    return out
