"""Name -> function tables: a module-level dict of strings to function names that code reads through
an attribute (``{"is_sm120": "is_sm120_supported"}`` behind ``get_platform().is_sm120``).

The graph has no call edge for such a read, so ``query callers is_sm120_supported`` would miss every
``get_platform().is_sm120`` user. This finds the tables (a dict literal with at least two string
pairs whose values resolve to functions of the tree) and, from the per-file facts, every function
that reads one of their keys on a receiver whose name says what the table serves (``platform``)."""

from __future__ import annotations

import ast
import re
from typing import Optional

from .asts import tree_memo


def tables(tree) -> dict:
    """key -> (function qualname, table path, line) over every such table in the tree."""
    memo = tree_memo(tree)
    if "name_tables" in memo:
        return memo["name_tables"]
    out: dict = {}
    R = tree.resolver
    for f in tree.index.py_facts():
        if not f.module or not any(re.fullmatch(r"is_\w+", s[1] or "") for s in f.strings):
            continue
        try:
            mod = ast.parse(tree.read_text(f.path))
        except (SyntaxError, ValueError, UnicodeDecodeError):
            continue
        for st in mod.body:
            value = getattr(st, "value", None)
            if not isinstance(value, ast.Dict):
                continue
            pairs = [(k.value, v.value, k.lineno) for k, v in zip(value.keys, value.values)
                     if isinstance(k, ast.Constant) and isinstance(v, ast.Constant) and isinstance(k.value, str) and isinstance(v.value, str)]
            hits = {}
            for k, v, line in pairs:
                q = R.resolve(f.module, "", v) or _by_name(tree, v)  # names looked up lazily, by getattr
                if q and tree.graph.nodes.get(q, {}).get("kind") == "function":
                    hits[k] = (q, f.path, line)
            if len(hits) >= 2:
                for k, hit in hits.items():
                    out.setdefault(k, hit)
    memo["name_tables"] = out
    return out


def _by_name(tree, name: str) -> Optional[str]:
    idx = tree_memo(tree).get("fn_by_name")
    if idx is None:
        idx = {}
        for n, d in tree.graph.nodes(data=True):
            if d.get("kind") == "function" and "." not in d.get("qualname", "."):
                idx.setdefault(d.get("name"), []).append(n)
        tree_memo(tree)["fn_by_name"] = idx
    cands = sorted(idx.get(name, []), key=lambda n: ("/utils/" not in tree.graph.nodes[n].get("path", ""), n))
    return cands[0] if cands else None


def readers(tree, function: str, receiver: str = r"platform") -> list[dict]:
    """Functions that read a table key standing for ``function`` (``get_platform().is_sm120``)."""
    keys = {k for k, (q, _, _) in tables(tree).items() if q == function}
    if not keys:
        return []
    rx = re.compile(r"(^|\.)(" + "|".join(map(re.escape, sorted(keys))) + r")$")
    recv = re.compile(receiver, re.I)
    out, seen = [], set()
    for f in tree.index.py_facts():
        if not f.module:
            continue
        texts = [(a.scope, a.line, a.value) for a in f.assigns] + [(b.scope, b.line, n) for b in f.branches for n in b.names] \
            + [(c.scope, c.line, c.left) for c in f.compares]
        for scope, line, text in texts:
            text = (text or "").replace("()", "")
            if not text or not rx.search(text) or not recv.search(text.rsplit(".", 1)[0]):
                continue
            who = f"{f.module}.{scope}" if scope else f.module
            if (who, line) in seen:
                continue
            seen.add((who, line))
            key = rx.search(text).group(2)
            q, tpath, tline = tables(tree)[key]
            out.append({"symbol": who, "kind": tree.graph.nodes.get(who, {}).get("kind", "module"), "edge": "reads table",
                        "call_at": f"{f.path}:{line}", "defined_at": f"{tpath}:{tline}", "via": f"{text} ({key} -> {q.rsplit('.', 1)[-1]})"})
    return sorted(out, key=lambda r: r["call_at"])
