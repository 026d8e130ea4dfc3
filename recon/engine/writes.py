"""Guarded writes: every place code stores a value under a name, with the branch tests that guard it.

One mechanism serves the server arguments (``self.moe_runner_backend = "marlin"`` in
``ServerArgs``, ``server_args.x = ...`` in a hook, ``overrides["moe_runner_backend"] = ...`` in a
per-model override function) and the attributes of in-tree objects (``self.is_fp4_experts = ...``
in ``ModelConfig.__init__``, ``quant_config.is_fp4_experts = ...`` in the loader). A write carries
the tests of the ``if``/``elif``/``else`` around it (with the polarity each must have), the
function it is in, and the simple local assignments before it, so the evaluator can decide it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Iterator, Optional

from .handoffs import exits
from .interp import UNKNOWN  # every path through a block ends (return/raise)
from .. import astwalk


@dataclass
class Write:
    path: str
    module: str
    scope: str  # qualname of the enclosing function, relative to the module ("" at top level)
    line: int
    key: str  # the attribute or dict key written
    receiver: str  # source of what it is written on: "self", "server_args", "overrides", ...
    value: ast.expr
    guards: tuple  # ((test, must_be_true), ...) outermost first
    fn: Optional[ast.AST] = None  # the enclosing function
    decorators: tuple = ()  # the enclosing function's decorator expressions
    locals: list = field(default_factory=list)  # [(name, expr, line)] simple assignments in the function
    # a change in place (``self.ignored_layers.extend([...])``): the method called; ``value`` is the call
    mutates: str = ""


def _receiver(node: ast.expr) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - unparse handles every expression ast.parse makes
        return ""


def _stores(st: ast.stmt, keys) -> Iterator[tuple[str, str, ast.expr]]:
    """(key, receiver, value) for each store of a wanted key in one statement."""
    if isinstance(st, ast.Assign):
        targets, value = st.targets, st.value
    elif isinstance(st, ast.AnnAssign) and st.value is not None:
        targets, value = [st.target], st.value
    else:
        return
    for t in targets:
        for x in (t.elts if isinstance(t, ast.Tuple) else [t]):
            if isinstance(x, ast.Attribute) and (keys is None or x.attr in keys):
                yield x.attr, _receiver(x.value), value
            elif (isinstance(x, ast.Subscript) and isinstance(x.slice, ast.Constant)
                  and isinstance(x.slice.value, str) and (keys is None or x.slice.value in keys)):
                yield x.slice.value, _receiver(x.value), value


def _changes(st: ast.stmt, keys) -> Iterator[tuple[str, str, ast.Call]]:
    """(key, receiver, call) for each change in place of a wanted attribute in one statement:
    ``self.ignored_layers.extend(...)``, ``.append``, ``.add``, ``.update`` and kin."""
    from .interp import IN_PLACE
    if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Subscript) \
            and isinstance(st.targets[0].value, ast.Attribute) and not isinstance(st.targets[0].slice, ast.Slice):
        # self.packed_modules_mapping["fused_qkv_a_proj_with_mqa"] = [...]: an item set in place
        t = st.targets[0]
        if keys is None or t.value.attr in keys:
            call = ast.Call(func=ast.Attribute(value=t.value, attr="__setitem__", ctx=ast.Load()), args=[t.slice, st.value], keywords=[])
            ast.copy_location(call, st)
            yield t.value.attr, _receiver(t.value.value), call
        return
    if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute) \
            and st.value.func.attr in IN_PLACE and isinstance(st.value.func.value, ast.Attribute):
        x = st.value.func.value
        if keys is None or x.attr in keys:
            yield x.attr, _receiver(x.value), st.value


def _dict_keys(value: ast.expr, keys) -> Iterator[tuple[str, ast.expr]]:
    if isinstance(value, ast.Dict):
        for k, v in zip(value.keys, value.values):
            if isinstance(k, ast.Constant) and isinstance(k.value, str) and (keys is None or k.value in keys):
                yield k.value, v


def local_writes(fn: ast.AST) -> list:
    """[(name, expr, line, guards)] for each simple assignment in a function's own body (nested
    functions excluded), with the ``if`` tests it sits under (and early returns before it), so a
    reader can tell which of several assignments to one name holds."""
    out: list = []

    def add(name, value, line, guards):
        out.append((name, value, line, guards))

    def walk(stmts, guards):
        for st in stmts:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) for t in st.targets) \
                    and all(isinstance(t, (ast.Name, ast.Attribute, ast.Subscript)) for t in st.targets):
                for t in st.targets:  # m = self.m = resolve(): every name target holds the value
                    if isinstance(t, ast.Name):
                        add(t.id, st.value, st.lineno, guards)
            elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Tuple):
                # a, b = f(): each name is an element of what f returns
                for i, e in enumerate(st.targets[0].elts):
                    if isinstance(e, ast.Name):
                        sub = ast.Subscript(value=st.value, slice=ast.Constant(value=i), ctx=ast.Load())
                        add(e.id, ast.copy_location(sub, st), st.lineno, guards)
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                add(st.target.id, st.value, st.lineno, guards)
            if isinstance(st, ast.If):
                walk(st.body, guards + ((st.test, True),))
                walk(st.orelse, guards + ((st.test, False),))
                if exits(st.body) and not exits(st.orelse):
                    guards = guards + ((st.test, False),)
                elif exits(st.orelse) and not exits(st.body):
                    guards = guards + ((st.test, True),)
            elif isinstance(st, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
                walk(st.body, guards)  # a loop's assignments count as made (as before guards were kept)
                walk(getattr(st, "orelse", []), guards)
            elif isinstance(st, ast.Try):
                for part in (st.body, st.orelse, st.finalbody):
                    walk(part, guards)
                for h in st.handlers:
                    walk(h.body, guards)

    walk(getattr(fn, "body", []), ())
    out.sort(key=lambda x: x[2])
    return out


def local_imports(fn: ast.AST) -> dict:
    """``{local: [(dotted target, line, guards)]}`` for the names a function binds by importing
    inside its body under ``if`` tests (``if use_jit: from a import f`` / ``else: from b import f``):
    which module ``f`` comes from is then decided by the tests, as for any other assignment. Only
    names imported at two or more places count (a lone import binds its name whatever the tests)."""
    out: dict = {}

    def walk(stmts, guards):
        for st in stmts:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(st, ast.ImportFrom) and st.module and not st.level:
                for a in st.names:
                    if a.name != "*":
                        out.setdefault(a.asname or a.name, []).append((f"{st.module}.{a.name}", st.lineno, guards))
            elif isinstance(st, ast.If):
                walk(st.body, guards + ((st.test, True),))
                walk(st.orelse, guards + ((st.test, False),))
            elif isinstance(st, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
                walk(st.body, guards)
            elif isinstance(st, ast.Try):
                for part in (st.body, st.orelse, st.finalbody):
                    walk(part, guards)

    walk(getattr(fn, "body", []), ())
    return {k: v for k, v in out.items() if len(v) > 1}


# The key a raise is recorded under by ``writes_in_module(..., raises=True)``.
RAISE = "<raise>"
# A test no evaluation decides: what sits under it (a loop body that may run zero times, a ``try``
# body whose exception a handler may catch) never counts as certain.
_NEVER_CERTAIN = ast.Constant(value=None)


def writes_in_module(tree: ast.Module, path: str, module: str, keys=None, dict_literals: bool = False,
                     raises: bool = False, changes: bool = False) -> list[Write]:
    """Every guarded write of a key in ``keys`` (None: any attribute) in a parsed module.

    ``dict_literals`` also counts ``{"key": value}`` literals (a function returning its overrides
    as a dict), guarded like a statement at that place. ``raises`` gives instead each ``raise X``
    and ``assert test, msg`` (key ``RAISE``, value the exception or message; an assert's test is a
    guard that must be false), those in a ``try`` body guarded by a test nothing decides.
    ``changes`` also gives each change of an attribute in place (``self.x.extend(...)``, ``mutates``
    set to the method called)."""
    out: list[Write] = []

    def walk(stmts, guards, scope, fn, decos, local_list):
        for st in stmts:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = f"{scope}.{st.name}" if scope else st.name
                walk(st.body, (), q, st, tuple(st.decorator_list), local_writes(st))
                continue
            if isinstance(st, ast.ClassDef):
                q = f"{scope}.{st.name}" if scope else st.name
                walk(st.body, (), q, None, (), [])
                continue
            if raises:
                if isinstance(st, ast.Raise) and st.exc is not None:
                    out.append(Write(path, module, scope, st.lineno, RAISE, "", st.exc, guards, fn, decos, local_list))
                elif isinstance(st, ast.Assert):
                    msg = st.msg if st.msg is not None else ast.Constant(value=ast.unparse(st.test)[:160])
                    out.append(Write(path, module, scope, st.lineno, RAISE, "", msg, guards + ((st.test, False),), fn, decos, local_list))
            for key, recv, value in ([] if raises else _stores(st, keys)):
                out.append(Write(path, module, scope, st.lineno, key, recv, value, guards, fn, decos, local_list))
            for key, recv, call in (_changes(st, keys) if changes and not raises else ()):
                out.append(Write(path, module, scope, st.lineno, key, recv, call, guards, fn, decos, local_list, call.func.attr))
            if dict_literals and not raises and isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and st.value.args:
                # declare(server_args, "why", field=value): a resolution declared by keyword
                for k in st.value.keywords:
                    if k.arg and (keys is None or k.arg in keys):
                        out.append(Write(path, module, scope, k.value.lineno, k.arg, _receiver(st.value.args[0]), k.value, guards, fn, decos, local_list))
            if dict_literals and not raises and isinstance(st, (ast.Assign, ast.Return, ast.AnnAssign)) and getattr(st, "value", None) is not None:
                for key, value in _dict_keys(st.value, keys):
                    out.append(Write(path, module, scope, value.lineno, key, "<dict>", value, guards, fn, decos, local_list))
            if isinstance(st, ast.If):
                walk(st.body, guards + ((st.test, True),), scope, fn, decos, local_list)
                walk(st.orelse, guards + ((st.test, False),), scope, fn, decos, local_list)
                # an early return: what follows runs only when the test took the other way
                if exits(st.body) and not exits(st.orelse):
                    guards = guards + ((st.test, False),)
                elif exits(st.orelse) and not exits(st.body):
                    guards = guards + ((st.test, True),)
            elif isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
                # a loop body may run zero times: its writes are guarded by "the loop runs"
                walk(st.body, guards + ((_NEVER_CERTAIN, True),), scope, fn, decos, local_list)
                walk(st.orelse, guards, scope, fn, decos, local_list)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                walk(st.body, guards, scope, fn, decos, local_list)
            elif isinstance(st, ast.Try):
                caught = guards + ((_NEVER_CERTAIN, True),) if raises else guards
                walk(st.body, caught, scope, fn, decos, local_list)
                walk(st.orelse, guards, scope, fn, decos, local_list)
                walk(st.finalbody, guards, scope, fn, decos, local_list)
    walk(tree.body, (), "", None, (), [])
    return out


def local_value(assigns: list, name: str, line: int, env: dict, ev, module: str, scope: str, fill,
                given: frozenset = frozenset()) -> object:
    """The value ``name`` holds just before ``line``: its assignments in order, each replacing the
    last where its ``if`` tests hold (an undecided test counts as false: the primary rule).
    ``given`` holds ``(id(test), way)`` for the tests the reader at ``line`` itself sits under:
    where the reader runs they went that way, so an assignment under the same test, undecided,
    still holds there. ``fill(names)`` puts the other locals an expression reads into ``env``
    first. Returns ``MISSING_LOCAL`` when no assignment comes before ``line``."""
    value = MISSING_LOCAL
    for lname, expr, ln, guards in assigns:
        if lname != name or ln >= line:
            continue
        reads = {n for g, _ in guards for n in astwalk.names_in(g)}
        reads |= astwalk.names_in(expr)
        fill(reads - {name})
        if value is not MISSING_LOCAL:
            env[name] = value  # x = f(x), `if x.is_auto(): x = ...`: the value so far
        # every test evaluated (what each reads is noted, an environment variable's default included)
        ways = [way_taken(ev.eval(g, env, module, scope), (id(g), want), given) for g, want in guards]
        if any(way != want for way, (_, want) in zip(ways, guards)):
            continue
        value = ev._eval_raw(expr, env, module, scope)
    env.pop(name, None)
    return value


def way_taken(value, test: tuple, given: frozenset) -> bool:
    """The way a test of an assignment is taken: its value; undecided, false (the primary rule),
    unless the reader sits under the same test (``test`` in ``given``): then the way it went there."""
    if value is not UNKNOWN:
        return bool(value)
    return test[1] if test in given else False


class _MissingLocal:
    def __repr__(self) -> str:
        return "<no local>"


MISSING_LOCAL = _MissingLocal()
