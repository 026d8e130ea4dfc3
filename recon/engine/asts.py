"""Syntax trees of the tree's files, parsed on demand and kept for the run (``ctx.cache``), the
``def`` node of a graph function found by its line, the per-tree memo, and an expression's source
on one line. The bottom floor of ``runtime``: it imports nothing of it.
"""

from __future__ import annotations

import ast
import re
import weakref
from typing import Optional

from .. import bounded
from .. import astwalk


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


_SOURCE_LINES: "weakref.WeakKeyDictionary[ast.AST, str]" = weakref.WeakKeyDictionary()


def source_line(node) -> str:
    """An expression's source with its whitespace folded: one line for messages and keys. Kept
    per node while the node lives: the parsed modules are shared by every scenario of a tree and
    never edited (a rewrite works on a copy, a new node), and the MoE walk renders the same
    conditions for each device and model."""
    try:
        return _SOURCE_LINES[node]
    except KeyError:
        pass
    except TypeError:  # not weakly referable: render it each time
        return re.sub(r"\s+", " ", ast.unparse(node)).strip()
    text = _SOURCE_LINES[node] = re.sub(r"\s+", " ", ast.unparse(node)).strip()
    return text


def module_ast(tree, path: str, keep: bool = True) -> Optional[ast.Module]:
    """The syntax tree of one of the tree's files, parsed once per loaded tree (``bounded.parse``)
    and shared by every reader and every scenario: the gate model, the engine's world, the checks.
    None when the file does not parse; a file that cannot be read raises (OSError, KeyError), and
    is not remembered. Readers never edit what they get (a rewrite works on a copy).

    ``keep=False`` is for a scan over many files whose result is kept on its own (as strings and
    lines, in the tree's memo): a file not parsed yet is parsed for it without being kept by the
    tree, and freed once the scan is done with it. The parsed modules were half of a large
    release's memory, and some hundreds of them were read by such scans alone, once."""
    asts = tree_memo(tree).setdefault("asts", {})
    if path in asts:
        return asts[path]
    got = _parsed(tree, path)
    if keep:
        asts[path] = got
    return got


def _parsed(tree, path: str) -> Optional[ast.Module]:
    """The file parsed: shared with another tree holding the same content, else parsed now (and
    offered to the next one). None when it does not parse."""
    meta = getattr(getattr(tree, "index", None), "files", {}).get(path)
    key = (path, meta.digest) if getattr(meta, "digest", "") else None
    got = _PARSED.get(key) if key else None
    if got is None:
        text = tree.read_text(path)
        try:
            got = bounded.parse(text)
        except (SyntaxError, ValueError):
            return None
        if key:
            _PARSED[key] = got
    return got


# (path, content digest) -> its parsed module, while a loaded tree still holds it: a copy of a tree,
# a checkout made from a release, or the next release where a file did not change shares the
# parse (and the indexes kept on it: all derived from the file's content and path) instead of
# parsing the same bytes again. Weak values: nothing stays once no tree holds it.
_PARSED: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def check_ast(ctx, path: str) -> Optional[ast.Module]:
    """:func:`module_ast` for a check, with a file that cannot be read as None."""
    try:
        return module_ast(ctx.tree, path)
    except (OSError, KeyError):
        return None


# Indexes of a parsed module, made on first use and kept on its syntax tree (shared per loaded tree,
# see module_ast): finding one def by walking the whole module, for every lookup of every scenario,
# was the largest item of a second device's or model's scan. Each lists in ``ast.walk`` order, so a
# lookup over it finds what the walk found first.

def _index(mod: ast.AST) -> None:
    """The defs, classes, one-target assignments and ``if`` statements of ``mod``, found in one walk
    (each asked of most modules a scenario reads: four walks before) and kept on the node."""
    funcs, classes, assigns, ifs = [], {}, [], []
    for n in astwalk.walk(mod):
        t = type(n)
        if t is ast.FunctionDef or t is ast.AsyncFunctionDef:
            funcs.append(n)
        elif t is ast.ClassDef:
            classes.setdefault(n.name, []).append(n)
        elif t is ast.Assign:
            if len(n.targets) == 1:
                assigns.append(n)
        elif t is ast.If:
            ifs.append(n)
    mod._recon_functions = funcs
    mod._recon_classes_by_name = classes
    mod._recon_single_assignments = assigns
    mod._recon_ifs = ifs


def functions(mod: ast.AST) -> list:
    """Every ``def`` / ``async def`` in ``mod``, in ``ast.walk`` order."""
    funcs = getattr(mod, "_recon_functions", None)
    if funcs is None:
        _index(mod)
        funcs = mod._recon_functions
    return funcs


def defs_by_line(mod: ast.AST) -> dict:
    """line -> the def of ``mod`` starting there (the last in ``ast.walk`` order among equals)."""
    by_line = getattr(mod, "_recon_defs_by_line", None)
    if by_line is None:
        by_line = mod._recon_defs_by_line = {n.lineno: n for n in functions(mod)}
    return by_line


def functions_named(mod: ast.AST, name: str) -> list:
    """The defs of ``mod`` named ``name``, in ``ast.walk`` order."""
    by_name = getattr(mod, "_recon_functions_by_name", None)
    if by_name is None:
        by_name = {}
        for n in functions(mod):
            by_name.setdefault(n.name, []).append(n)
        mod._recon_functions_by_name = by_name
    return by_name.get(name, ())


def enclosing_function(mod: ast.AST, line: int):
    """The innermost def of ``mod`` whose lines hold ``line`` (the first listed among equals), or None."""
    best = None
    for n in functions(mod):
        if n.lineno <= line <= (n.end_lineno or n.lineno):
            if best is None or n.lineno > best.lineno:
                best = n
    return best


def classes_named(mod: ast.AST, name: str) -> list:
    """The classes of ``mod`` named ``name``, in ``ast.walk`` order."""
    by_name = getattr(mod, "_recon_classes_by_name", None)
    if by_name is None:
        _index(mod)
        by_name = mod._recon_classes_by_name
    return by_name.get(name, ())


def single_assignments(mod: ast.AST) -> list:
    """Every ``target = value`` statement (one target) in ``mod``, in ``ast.walk`` order."""
    found = getattr(mod, "_recon_single_assignments", None)
    if found is None:
        _index(mod)
        found = mod._recon_single_assignments
    return found


def if_statements(mod: ast.AST) -> list:
    """Every ``if`` statement in ``mod``, in ``ast.walk`` order."""
    ifs = getattr(mod, "_recon_ifs", None)
    if ifs is None:
        _index(mod)
        ifs = mod._recon_ifs
    return ifs


def global_names(fn: ast.AST) -> frozenset:
    """The names a function (nested scopes included) declares ``global``."""
    names = getattr(fn, "_recon_globals", None)
    if names is None:
        names = frozenset(x for n in astwalk.walk(fn) if isinstance(n, ast.Global) for x in n.names)
        fn._recon_globals = names
    return names


def module_global_writes(mod: ast.AST) -> frozenset:
    """The ids of the one-target assignments of ``mod`` that bind a name of the module's globals:
    at module level (``if`` / ``try`` blocks included), or in a function that declares the name
    ``global``. A bare name assigned in a function otherwise is that function's local, and one in a
    class body is a class attribute: neither is the module's."""
    found = getattr(mod, "_recon_global_writes", None)
    if found is not None:
        return found
    # statements only (an assignment or a `global` is never inside an expression): each bare-name
    # assignment with the scope it sits in, and each scope's `global`s
    module, candidates, declared = object(), [], {}
    stack = [(st, module) for st in mod.body]
    while stack:
        n, scope = stack.pop()
        t = type(n)
        if t is ast.Assign:
            if len(n.targets) == 1 and type(n.targets[0]) is ast.Name:
                candidates.append((n, scope))
            continue
        if t is ast.Global:
            declared.setdefault(id(scope), set()).update(n.names)
            continue
        inner = n if t is ast.FunctionDef or t is ast.AsyncFunctionDef or t is ast.ClassDef else scope
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for st in getattr(n, field, ()):
                stack.append((st, inner))
    found = mod._recon_global_writes = frozenset(
        id(n) for n, scope in candidates
        if scope is module or (type(scope) is not ast.ClassDef and n.targets[0].id in declared.get(id(scope), ())))
    return found


def graph_function(ctx, node_id: str) -> Optional[tuple[str, ast.FunctionDef]]:
    """(path, def node) of a graph function node, found by its line."""
    d = ctx.tree.graph.nodes.get(node_id) or {}
    path, line = d.get("path"), d.get("line")
    if not path or d.get("kind") not in ("function", "triton_kernel"):
        return None
    mod = check_ast(ctx, path)
    if mod is None:
        return None
    for n in functions_named(mod, d.get("name")):
        first = min([n.lineno] + [x.lineno for x in n.decorator_list])
        if first <= line <= n.lineno or n.lineno == line:
            return path, n
    return None
