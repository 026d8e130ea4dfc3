"""Dispatchers: functions that choose which function runs, evaluated for one configuration.

SGLang picks many kernels by calling a function that returns a function
(``self.w8a8_block_fp8_linear = dispatch_w8a8_block_fp8_linear()``), which reads module state a
start-up function set from the server arguments (``global FP8_GEMM_RUNNER_BACKEND`` in
``initialize_fp8_gemm_config``). The runtime's one evaluator (:mod:`recon.engine.evaluator`)
follows that: a module global that a function declares ``global`` and assigns is evaluated by
exploring that function with the resolved server arguments, and read back where it is read.

A dispatch resolved lazily, on an op's first call (``method = self._forward_method``, filled by
``self._resolve_forward_method()`` when still None), reads the class machinery: module tables of
method names by backend or platform, ``type(self).__mro__``, ``klass.__dict__``, ``getattr(self,
name)`` and loops that ``continue`` or ``return``. The same evaluator answers those for in-tree classes
(the classes are the tree's, the names their bodies define), so such a resolver is run like any
other in-tree method.

:func:`choices` explores a dispatcher and returns every function it can hand back, each with the
undecided tests that lead there, following returned calls into further dispatchers.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Optional

from ..names import dotted_name
from .interp import UNKNOWN
from .evaluator import Evaluator
from .values import ClassRef, FuncRef, Instance
from .. import astwalk

MAX_CHOICES = 12


@dataclass
class Choice:
    """One function a dispatcher can return."""

    qual: Optional[str]  # the in-tree function, or None (an outside callable: ``name``)
    name: str
    assumptions: tuple = ()  # ((test, holds, path, line), ...)
    hops: list = field(default_factory=list)  # [(what, path, line)] dispatcher returns on the way
    constructs: bool = False  # qual is a class the function builds and returns (a factory)
    made: Optional[Instance] = None  # the object a factory builds (its constructor's arguments bound)

    @property
    def primary(self) -> bool:
        return all(not a[1] for a in self.assumptions)


def _fn_path(ev, qual):
    return ev.world.path_of(qual) or ""


def bind_args(ev, fn: ast.AST, call: ast.Call, env: dict, mod: str, scope: str) -> dict:
    """The parameters of ``fn`` a ``call`` to it binds to values the evaluator knows (positional and
    keyword; an unknown argument leaves its parameter unbound)."""
    bound = {}
    for p, a in zip([a.arg for a in fn.args.posonlyargs + fn.args.args], call.args):
        v = ev._eval_raw(a, env, mod, scope)
        if v is not UNKNOWN:
            bound[p] = v
    for k in call.keywords:
        if k.arg:
            v = ev._eval_raw(k.value, env, mod, scope)
            if v is not UNKNOWN:
                bound[k.arg] = v
    return bound


def choices(ev: Evaluator, qual: str, args: Optional[dict] = None, assumed: tuple = (), depth: int = 0,
            hops: Optional[list] = None) -> list[Choice]:
    """Every function the dispatcher ``qual`` returns, with the undecided tests on the way."""
    fn = ev.model.function_ast(qual)
    if fn is None or depth > 4:
        return []
    mod, scope = ev.model.module_scope(qual)
    path = _fn_path(ev, qual)
    env = {}
    names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    for p, d in zip(names[len(names) - len(fn.args.defaults):], fn.args.defaults):
        env[p] = ev.world.literal(d)
    env.update(args or {})
    rets = {n.lineno: n for n in astwalk.walk(fn) if isinstance(n, ast.Return) and n.value is not None}
    out: list[Choice] = []
    for o in ev.explore(_marked(fn.body), env, mod, scope, path, depth, assumed):
        if o.raises or o.line not in rets:
            continue
        expr = rets[o.line].value
        if isinstance(expr, ast.Call) and dotted_name(expr.func).endswith("partial") and expr.args:
            expr = expr.args[0]  # partial(f, ...) runs f
        here = (hops or []) + [(f"{qual.rsplit('.', 1)[-1]} returns {ast.unparse(expr)[:60]}", path, o.line)]
        selfval = (args or {}).get(names[0]) if names else None
        if (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and names and expr.value.id == names[0]
                and isinstance(selfval, Instance) and ev.world.method(selfval.cls, expr.attr)):
            # `return self.forward_cuda`: the object's own method
            out.append(Choice(ev.world.method(selfval.cls, expr.attr), expr.attr, o.assumptions, here))
        elif isinstance(expr, (ast.Name, ast.Attribute)) and not isinstance(o.value, Instance) and not (
                isinstance(expr, ast.Name) and expr.id in o.env):
            d = dotted_name(expr)
            target = ev.model.resolve(mod, scope, d) if d else None
            if target and ev.model.G.nodes.get(target, {}).get("kind") in ("function", "triton_kernel"):
                out.append(Choice(target, target, o.assumptions, here))
            else:
                full = ev.world.imported_as(mod, scope, d) if d else None
                out.append(Choice(None, full or d or ast.unparse(expr), o.assumptions, here))
        elif isinstance(o.value, Instance):
            out.append(Choice(o.value.cls, o.value.cls, o.assumptions, here, constructs=True, made=o.value))
            continue
        if isinstance(expr, ast.Name) and expr.id in o.env and not isinstance(o.value, Instance):
            # `backend = make_backend(runner); return backend`: what the local was made by
            last = None
            ran = o.env.get(_SITE + expr.id)  # the assignment this outcome's path ran
            for n in astwalk.walk(fn):
                if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                        and n.targets[0].id == expr.id and n.lineno < o.line and (ran is None or n.lineno == ran):
                    last = n.value
            if isinstance(last, ast.Call):
                expr = last
        if isinstance(expr, ast.Call) and not isinstance(o.value, Instance):
            d = dotted_name(expr.func)
            target = ev.model.resolve(mod, scope, d) if d else None
            if target and ev.model.G.nodes.get(target, {}).get("kind") == "function":
                inner = ev.model.function_ast(target)
                bound = {}
                if inner is not None:
                    bound.update(bind_args(ev, inner, expr, o.env, mod, scope))
                out += choices(ev, target, bound, o.assumptions, depth + 1, here)
        if len(out) >= MAX_CHOICES:
            break
    out.sort(key=lambda c: sum(1 for a in c.assumptions if a[1]))
    if len({c.qual or c.name for c in out}) == 1 and len(out) > 1:
        out = [Choice(out[0].qual, out[0].name, (), out[0].hops, out[0].constructs)]  # every way gives the same function
    return out


_SITE = "__assigned_at__"


def _marked(stmts: list) -> list:
    """A copy of a body where each ``name = ...`` is followed by ``__assigned_at__name = <line>``, so
    an explored outcome says which of several assignments to a local its path ran."""
    out = []
    for st in stmts:
        if isinstance(st, ast.If):
            st = ast.If(test=st.test, body=_marked(st.body), orelse=_marked(st.orelse), lineno=st.lineno, col_offset=0)
        elif isinstance(st, (ast.With, ast.Try)):
            st = copy.copy(st)
            st.body = _marked(st.body)
        out.append(st)
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            out.append(ast.Assign(targets=[ast.Name(id=_SITE + st.targets[0].id, ctx=ast.Store())],
                                  value=ast.Constant(value=st.lineno), lineno=st.lineno, col_offset=0))
    return out


def held_dispatcher(world, ev, cls: str, attr: str):
    """(dispatcher qual, call node, write) when ``self.attr`` is first assigned the result of an
    in-tree function call (or of one of the object's methods) in ``cls`` or its bases; else None."""
    for w in world.class_writes(cls, attr):
        v = w.value
        if w.receiver != "self" or not w.scope.endswith("__init__"):
            continue
        if isinstance(v, ast.Call) and dotted_name(v.func):
            d = dotted_name(v.func)
            if d.startswith("self.") and d.count(".") == 1:
                q = world.method(cls, d.split(".", 1)[1])
            else:
                q = ev.model.resolve(w.module, w.scope, d)
            if q and world.G.nodes.get(q, {}).get("kind") == "function":
                return q, v, w
    return None


def resolve_held(world, ev, inst: Instance, attrs) -> dict:
    """For each attribute in ``attrs`` that a dispatcher fills: its choices, and the primary one
    stored on ``inst`` (a FuncRef) so that a walk through ``self.attr(...)`` follows it."""
    out = {}
    for attr in attrs:
        got = held_dispatcher(world, ev, inst.cls, attr)
        if got is None:
            continue
        q, call, w = got
        env = world.write_env(w, inst, ev)
        fn = ev.model.function_ast(q)
        bound = {}
        if fn is not None:
            pn = [a.arg for a in fn.args.posonlyargs + fn.args.args]
            if dotted_name(call.func).startswith("self."):
                bound[pn[0]] = inst
                pn = pn[1:]
            for p, a in zip(pn, call.args):
                v = ev._eval_raw(a, env, w.module, w.scope)
                if v is not UNKNOWN:
                    bound[p] = v
            for k in call.keywords:
                if k.arg:
                    v = ev._eval_raw(k.value, env, w.module, w.scope)
                    if v is not UNKNOWN:
                        bound[k.arg] = v
        cs = choices(ev, q, bound)
        out[attr] = {"dispatcher": q, "path": w.path, "line": w.line, "choices": cs}
        prim = next((c for c in cs if c.primary and c.qual), None)
        if prim is not None:
            inst.attrs[attr] = FuncRef(prim.qual, (f"returned by {q.rsplit('.', 1)[-1]}",), (w.path, w.line))
    return out


__all__ = ["Choice", "choices", "held_dispatcher", "resolve_held", "ClassRef", "FuncRef"]
