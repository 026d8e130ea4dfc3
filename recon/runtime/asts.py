"""Syntax trees of the tree's files, parsed on demand and kept for the run (``ctx.cache``), the
``def`` node of a graph function found by its line, the per-tree memo, and an expression's source
on one line. The bottom floor of ``runtime``: it imports nothing of it.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from .. import bounded


def tree_memo(tree) -> dict:
    """Device-independent results kept on the loaded tree for the life of the process (parsed
    modules, indexes of its facts), so evaluating it for a second device or model re-reads nothing."""
    memo = getattr(tree, "_recon_memo", None)
    if memo is None:
        memo = {}
        try:
            tree._recon_memo = memo
        except AttributeError:  # a tree object that takes no attributes: no sharing
            pass
    return memo


def source_line(node) -> str:
    """An expression's source with its whitespace folded: one line for messages and keys."""
    return re.sub(r"\s+", " ", ast.unparse(node)).strip()


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
