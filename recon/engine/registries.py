"""Registries SGLang keeps by key, read from the code: functions a decorator registers under
constant keys (``@register_fused_func("none", "marlin")``), the containers a function stores into
or looks up from, and the in-tree function behind a ``torch.ops`` custom op."""

from __future__ import annotations

import ast
from typing import Optional

from ..names import dotted_name
from .. import astwalk


def registrations(world) -> list[tuple[tuple, str, str, int]]:
    """(keys, decorator, function, line) for functions registered by a decorator called with
    constant strings (``@register_fused_func("none", "marlin")``)."""
    from .asts import tree_memo
    memo = tree_memo(world.tree)
    if "regs" in memo:
        return memo["regs"]
    if world._importers is None:
        world._scan_facts()
    out = [(None, None, f"{mod}.{q}", path, line) for path, mod, q, line in world.decorated]
    # keys come from the source (facts keep decorators as dotted names only)
    regs = []
    for _, deco, q, path, line in out:
        tree = world.module_ast(path, keep=False)  # keys, names and lines are kept, not the file
        fn = None
        for n in astwalk.walk(tree) if tree is not None else ():
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == q.rsplit(".", 1)[-1]:
                first = min([n.lineno] + [x.lineno for x in n.decorator_list])
                if first <= line <= n.lineno:
                    fn = n
                    break
        for dn in fn.decorator_list if fn is not None else ():
            if isinstance(dn, ast.Call):
                keys = tuple(a.value for a in dn.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
                if keys:
                    mod = q.rsplit(".", 1)[0]
                    target = world.R.resolve(mod, "", ast.unparse(dn.func)) or ""
                    if not container_names(world, target, "store"):
                        continue  # a decorator that keeps nothing by key is not a registry
                    regs.append((keys, ast.unparse(dn.func), q, path, dn.lineno, target.rsplit(".", 1)[0]))
    memo["regs"] = regs
    return regs


def custom_op_impl(world, op: str) -> Optional[tuple]:
    """The in-tree function registered as ``torch.ops.<ns>.<name>`` and where: a module-level call
    that hands an in-tree function to a registration together with the op's name
    (``direct_register_custom_op(op_name="x", op_func=x, ...)``), or a decorator that names the op
    (``@torch.library.custom_op("ns::x")``). None when the op is registered outside the tree."""
    from .asts import tree_memo
    memo = tree_memo(world.tree).setdefault("custom_ops", {})  # the tree's alone: every scenario shares it
    if op in memo:
        return memo[op]
    memo[op] = None
    name = op.rsplit(".", 1)[-1]
    ns = op.split(".")[2] if op.count(".") >= 3 else ""
    wanted = {name, f"{ns}::{name}"}
    for path, module in sorted({x for v in wanted for x in world.files_with_string(v)}):
        tree = world.module_ast(path, keep=False)
        for st in tree.body if tree is not None else ():
            fn_name, line = None, st.lineno
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
                vals = list(st.value.args) + [k.value for k in st.value.keywords]
                if any(isinstance(v, ast.Constant) and v.value in wanted for v in vals):
                    fn_name = next((v.id for v in vals if isinstance(v, ast.Name)), None)
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for d in st.decorator_list:
                    if isinstance(d, ast.Call) and any(isinstance(a, ast.Constant) and a.value in wanted for a in d.args):
                        fn_name, line = st.name, d.lineno
            if fn_name:
                qual = world.R.resolve(module, "", fn_name)
                if qual and world.G.nodes.get(qual, {}).get("kind") == "function":
                    memo[op] = (qual, path, line)
                    return memo[op]
    return None


def container_names(world, qual: str, how: str, depth: int = 2) -> frozenset:
    """Names of the containers a function keeps things in by key (``how="store"``: ``X[k] = v``)
    or looks them up in (``how="load"``: ``X[k]``, ``X.get(k)``), directly or through the in-tree
    functions it calls: a registering decorator and its lookup meet in the same container."""
    memo = world.__dict__.setdefault("_containers", {})
    key = (qual, how, depth)
    if key in memo:
        return memo[key]
    memo[key] = frozenset()  # recursion guard
    fn = world.function_ast(qual) if world.G.nodes.get(qual, {}).get("kind") == "function" else None
    names: set = set()
    for n in astwalk.walk(fn) if fn is not None else ():
        if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store if how == "store" else ast.Load):
            names.add(dotted_name(n.value).rsplit(".", 1)[-1])
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if (how == "store" and n.func.attr in ("append", "add", "setdefault", "update")) or (how == "load" and n.func.attr == "get"):
                names.add(dotted_name(n.func.value).rsplit(".", 1)[-1])
    names.discard("")
    if depth > 0:
        for _, v, e in world.G.out_edges(qual, data=True):
            if e.get("kind") in ("calls", "defines"):  # a decorator's inner function does the keeping
                names |= container_names(world, v, how, depth - 1)
    memo[key] = frozenset(names)
    return memo[key]
