"""The statements that pick a tuned config's fallback, walked for the case "no file matches":
:class:`ConfigEval` evaluates them with the lookup functions returning None and follows in-module
``*default*`` helpers; what it cannot tell is :data:`recon.engine.interp.UNKNOWN`.

Its semantics differ from the gate interpreter's on purpose: it needs no device, a call to a
lookup is *known* (None: the case being evaluated), and an ``if`` whose test is unknown takes its
``else`` and records the test as an assumption instead of leaving the result unknown.
"""

from __future__ import annotations

import ast
from typing import Any, Optional

from .. import bounded
from .interp import UNKNOWN


class ConfigEval:
    """A tiny evaluator of the statements that pick a default config.

    ``env`` binds names to values; calls to the lookup functions evaluate to None (no file); a call
    to an in-tree ``*default*`` function is evaluated with its parameters bound. Anything else is
    unknown, and an ``if`` whose test is unknown takes its ``else`` (the tests that matter here,
    "found a file?", are known).
    """

    def __init__(self, ctx, lookups: set, env: dict, module_funcs: dict):
        self.ctx, self.lookups, self.env, self.funcs = ctx, lookups, dict(env), module_funcs
        self.result: Optional[tuple[ast.Dict, dict]] = None
        self.assumed: list[str] = []

    def expr(self, n) -> Any:
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return self.env.get(n.id, UNKNOWN)
        if isinstance(n, (ast.List, ast.Tuple)):
            try:
                return bounded.build(list, [self.expr(e) for e in n.elts])
            except bounded.TooLarge:
                return UNKNOWN
        if isinstance(n, ast.Subscript):
            v, i = self.expr(n.value), self.expr(n.slice)
            try:
                return v[i] if v is not UNKNOWN and i is not UNKNOWN else UNKNOWN
            except (TypeError, IndexError, KeyError):
                return UNKNOWN
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            v = self.expr(n.operand)
            return UNKNOWN if v is UNKNOWN else (not v)
        if isinstance(n, ast.BoolOp):
            vals = [self.expr(v) for v in n.values]
            if isinstance(n.op, ast.And):
                if any(v is not UNKNOWN and not v for v in vals):
                    return False
                return UNKNOWN if any(v is UNKNOWN for v in vals) else vals[-1]
            if any(v is not UNKNOWN and v for v in vals):
                return True
            return UNKNOWN if any(v is UNKNOWN for v in vals) else vals[-1]
        if isinstance(n, ast.Compare) and len(n.ops) == 1:
            a, b = self.expr(n.left), self.expr(n.comparators[0])
            if a is UNKNOWN or b is UNKNOWN:
                return UNKNOWN
            op = type(n.ops[0])
            try:
                return {ast.Eq: a == b, ast.NotEq: a != b, ast.Is: a is b, ast.IsNot: a is not b}.get(op) if op in (ast.Eq, ast.NotEq, ast.Is, ast.IsNot) else {
                    ast.Lt: lambda: a < b, ast.LtE: lambda: a <= b, ast.Gt: lambda: a > b, ast.GtE: lambda: a >= b,
                    ast.In: lambda: a in b, ast.NotIn: lambda: a not in b}[op]()
            except (TypeError, KeyError):
                return UNKNOWN
        if isinstance(n, ast.IfExp):
            t = self.expr(n.test)
            if t is UNKNOWN:
                return UNKNOWN
            return self.expr(n.body if t else n.orelse)
        if isinstance(n, ast.Call):
            name = n.func.id if isinstance(n.func, ast.Name) else (n.func.attr if isinstance(n.func, ast.Attribute) else "")
            if name in self.lookups:
                return None  # the lookup found no file: this is the case we are evaluating
            if "default" in name and name in self.funcs:
                return self._call(self.funcs[name], n)
            return UNKNOWN
        if isinstance(n, ast.Dict):
            return n  # evaluated lazily, so the cited line is the literal's
        return UNKNOWN

    def _call(self, fn: ast.FunctionDef, call: ast.Call):
        params = [a.arg for a in fn.args.args]
        defaults = fn.args.defaults
        env = {p: self.expr(d) for p, d in zip(params[len(params) - len(defaults) :], defaults)}
        for p, a in zip(params, call.args):
            env[p] = self.expr(a)
        for kw in call.keywords:
            if kw.arg:
                env[kw.arg] = self.expr(kw.value)
        sub = ConfigEval(self.ctx, self.lookups, {**self.env, **env}, self.funcs)
        ret = sub.block(fn.body)
        self.assumed += sub.assumed
        return ret

    def block(self, body) -> Any:
        """Run statements; the value of a ``return`` when one is reached, else UNKNOWN."""
        for s in body:
            if isinstance(s, ast.Return):
                return self.expr(s.value) if s.value is not None else None
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
                self.env[s.targets[0].id] = self.expr(s.value)
            elif isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is not None:
                self.env[s.target.id] = self.expr(s.value)
            elif isinstance(s, ast.If):
                t = self.expr(s.test)
                if t is UNKNOWN:
                    self.assumed.append(ast.unparse(s.test)[:80])
                    t = False
                r = self.block(s.body if t else s.orelse)
                if r is not UNKNOWN:
                    return r
            elif isinstance(s, ast.Try):
                r = self.block(s.body)
                if r is not UNKNOWN:
                    return r
        return UNKNOWN


def dict_values(ev: ConfigEval, d: ast.Dict) -> tuple[dict, dict]:
    """(values, sources): each key's evaluated value, and the source of values that were expressions."""
    vals, srcs = {}, {}
    for k, v in zip(d.keys, d.values):
        if not isinstance(k, ast.Constant):
            continue
        x = ev.expr(v)
        if not isinstance(v, ast.Constant):
            srcs[k.value] = ast.unparse(v)
        vals[k.value] = x if x is not UNKNOWN and not isinstance(x, ast.AST) else ast.unparse(v)
    return vals, srcs
