"""Syntax trees of the tree's files, parsed on demand and kept for the run (``ctx.cache``), and the
``def`` node of a graph function found by its line.
"""

from __future__ import annotations

import ast
from typing import Optional

from .. import bounded

def _ast(ctx, path: str) -> Optional[ast.Module]:
    key = ("ast", path)
    if key not in ctx.cache:
        try:
            ctx.cache[key] = bounded.parse(ctx.tree.read_text(path))
        except (SyntaxError, ValueError, OSError, KeyError):
            ctx.cache[key] = None
    return ctx.cache[key]


def _function(ctx, node_id: str) -> Optional[tuple[str, ast.FunctionDef]]:
    """(path, def node) of a graph function node, found by its line."""
    d = ctx.tree.graph.nodes.get(node_id) or {}
    path, line = d.get("path"), d.get("line")
    if not path or d.get("kind") not in ("function", "triton_kernel"):
        return None
    mod = _ast(ctx, path)
    if mod is None:
        return None
    for n in ast.walk(mod):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == d.get("name"):
            first = min([n.lineno] + [x.lineno for x in n.decorator_list])
            if first <= line <= n.lineno or n.lineno == line:
                return path, n
    return None
