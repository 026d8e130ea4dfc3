"""Backend choices stored as strings, resolved for a device: one method stores a constant in an
attribute under arch gates (``layer._dsv4_mxfp4_backend = "sm120_triton"`` in
``process_weights_after_loading``) and another compares the same attribute with the same constant
(``if layer._dsv4_mxfp4_backend == "sm120_triton":`` in ``apply``). The setter is walked statement
by statement with the gates evaluated for the device (:mod:`recon.engine.gatemodel`), which tells
the value this device stores; the comparison then tells which part of the comparing method runs,
and the graph's ``calls`` and ``launches`` edges from that part give the chain down to the kernel.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Optional

from ..engine.gatemodel import gate_model, interpreter
from ..engine.interp import UNKNOWN

@dataclass(frozen=True)
class SelectionScope:
    """Which attributes count as a backend choice, and in which files they are looked for."""

    attribute_pattern: str = r"(backend|kernel|impl)$"
    paths: str = r"sglang/srt/(layers|model_executor|models)/"


def _const(src: str):
    try:
        return ast.literal_eval(src)
    except Exception:
        return None


def _method_ast(model, qual):
    node = model.G.nodes.get(qual)
    return model.function_ast(qual) if node else None


def _walk_sets(ctx, qual: str, attr: str, device) -> list[tuple]:
    """Stores of a constant into ``*.attr`` reached in ``qual`` on ``device``: (value, line, certain)."""
    model = gate_model(ctx)
    fn = _method_ast(model, qual)
    if fn is None:
        return []
    it = interpreter(ctx, device)
    mod, scope = model.module_scope(qual)
    out: list[tuple] = []

    def walk(stmts, certain: bool) -> bool:
        """True when every path through ``stmts`` ends the method (return/raise)."""
        for st in stmts:
            if isinstance(st, (ast.Return, ast.Raise)):
                return True
            if isinstance(st, ast.If):
                t = it.eval(st.test, {}, mod, scope)
                if t is UNKNOWN:
                    a = walk(st.body, False)
                    b = walk(st.orelse, False)
                    if a and b:
                        return True
                elif walk(st.body if t else st.orelse, certain):
                    return True
                continue
            if isinstance(st, ast.Assign):
                for tgt in st.targets:
                    if isinstance(tgt, ast.Attribute) and tgt.attr == attr and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
                        out.append((st.value.value, st.lineno, certain))
                continue
            for body_name in ("body", "orelse", "finalbody"):  # with / try / for: walked as maybe-run
                body = getattr(st, body_name, None)
                if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                    if walk(body, certain if isinstance(st, (ast.With, ast.Try)) and body_name == "body" else False) and isinstance(st, ast.With):
                        return True
        return False

    walk(fn.body, True)
    return out


def selection_chain(ctx, start: str, lo: int, hi: int, depth: int = 3) -> list[tuple]:
    """(qualname, path, line) from ``start``'s calls on lines [lo, hi] down to launched kernels."""
    G = ctx.tree.graph
    chain: list[tuple] = []
    first = sorted(((d.get("line", 0), v) for _, v, d in G.out_edges(start, data=True)
                    if d.get("kind") in ("calls", "calls_dynamic", "launches") and d.get("via") != "__init__"  # the class node says it
                    and lo <= d.get("line", 0) <= hi), key=lambda x: x[0])
    seen = set()
    frontier = []
    for line, v in first:
        if v in seen:
            continue
        seen.add(v)
        chain.append((v, G.nodes[start].get("path", ""), line))
        frontier.append(v)
    # follow each callee down to the kernels it launches (a few levels, calls inside the tree)
    for _ in range(depth):
        nxt = []
        for u in frontier:
            for _, v, d in sorted(G.out_edges(u, data=True), key=lambda e: e[2].get("line", 0)):
                if v in seen or d.get("kind") not in ("launches", "calls"):
                    continue
                kind = G.nodes[v].get("kind")
                if d["kind"] == "launches" or kind == "triton_kernel" or (kind == "function" and G.nodes[v].get("path") == G.nodes[u].get("path")):
                    seen.add(v)
                    chain.append((v, d.get("path", ""), d.get("line", 0)))
                    nxt.append(v)
        frontier = nxt
    return chain


def _taken(op: str, const, value) -> Optional[bool]:
    if value is None or const is None:
        return None
    if op == "==":
        return value == const
    if op == "!=":
        return value != const
    if op == "in":
        return value in const if isinstance(const, (tuple, list, set, str)) else None
    if op == "not in":
        return value not in const if isinstance(const, (tuple, list, set, str)) else None
    return None


def resolve_selections(ctx, scope: Optional[SelectionScope] = None, device=None) -> list[dict]:
    """Every backend attribute set in one method and compared in another, resolved for ``device``."""
    device = device or ctx.device
    scope = scope or SelectionScope()
    key = ("backend_selections", device.name, scope.attribute_pattern, scope.paths)
    if key in ctx.cache:
        return ctx.cache[key]
    attr_re = re.compile(scope.attribute_pattern)
    path_re = re.compile(scope.paths)
    G = ctx.tree.graph
    out = []
    for path in sorted(p for p in ctx.tree.index.files if p.endswith(".py") and path_re.search(p)):
        f = ctx.tree.index.facts(path)
        if f is None or f.error or not f.module:
            continue
        sets = defaultdict(list)
        for a in f.assigns:
            if a.value_kind == "const" and "." in a.target and a.scope and "." in a.scope:
                name = a.target.rsplit(".", 1)[1]
                v = _const(a.value)
                if attr_re.search(name) and isinstance(v, str):
                    sets[(a.scope.rsplit(".", 1)[0], name)].append(a)
        if not sets:
            continue
        for c in f.compares:
            if "." not in c.left or not c.scope or "." not in c.scope:
                continue
            cls, name = c.scope.rsplit(".", 1)[0], c.left.rsplit(".", 1)[1]
            const = _const(c.const)
            setters = [a for a in sets.get((cls, name), []) if a.scope != c.scope]
            consts = const if isinstance(const, (tuple, list, set)) else (const,)
            if not any(_const(a.value) in consts for a in setters):
                continue
            set_methods = sorted({a.scope for a in setters})
            values = []
            for sm in set_methods:
                values += [(v, ln, certain, sm) for v, ln, certain in _walk_sets(ctx, f"{f.module}.{sm}", name, device)]
            certain = [v for v in values if v[2]]
            chosen = certain[-1] if certain else (values[-1] if len({v[0] for v in values}) == 1 and values else None)
            value = chosen[0] if chosen else None
            branch = next((b for b in f.branches if b.scope == c.scope and b.line <= c.line <= max(b.line, b.body_end) and c.line < (b.body_end or b.line) + 1), None)
            taken = _taken(c.op, const, value)
            meth = f"{f.module}.{c.scope}"
            end = G.nodes.get(meth, {}).get("end_line", 10**9)
            rng = None
            if branch is not None and taken is not None:
                if taken:
                    rng = (branch.line, branch.body_end)
                elif branch.else_line:
                    rng = (branch.else_line, branch.end_line)
                else:
                    rng = (branch.end_line + 1, end)
            chain = [(meth, path, c.line)] + (selection_chain(ctx, meth, *rng) if rng else [])
            setter = next((a for a in setters if _const(a.value) == value), None) if value else None
            out.append({
                "attribute": name, "class": f"{f.module}.{cls}", "value": value, "const": const, "op": c.op,
                "taken": taken, "set_in": f"{f.module}.{setter.scope}" if setter else (f"{f.module}.{set_methods[0]}" if set_methods else None),
                "set_line": setter.line if setter else None, "taken_in": meth, "compare_line": c.line, "path": path,
                "branch": branch, "range": rng, "chain": chain,
                "all_values": sorted({_const(a.value) for a in setters}), "possible": sorted({v[0] for v in values}),
            })
    ctx.cache[key] = out
    return out


def fmt_chain(chain) -> str:
    return " -> ".join(q.rsplit(".", 2)[-2] + "." + q.rsplit(".", 1)[-1] if q.count(".") >= 2 else q for q, _, _ in chain[:6])
