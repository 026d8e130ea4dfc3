"""Where a method hands its work to code the graph does not follow, and under which conditions.

Used where a method is reached but its kernels are not (older SGLang releases pick MoE kernels at
run time: a library call in one branch, a runner object built from server arguments in another).
Two kinds of call leave the analysed code:

* a library call: the callee's first name is imported from a package that is not part of the tree
  and not one of the ``ignore`` packages (torch, numpy, ... do not pick kernels by themselves);
* a delegation: ``self.<attr>.<method>(...)`` that the graph resolves to a method of another class
  (the object the method holds does the work, and picks how).

Each comes with the branch tests that guard it, read from the method's syntax tree: the tests of
the enclosing ``if``/``else`` branches, and the negated test of an earlier ``if`` whose body always
returns or raises (``if self.use_flashinfer: ... return out`` guards everything after it). The
tests are evaluated for the device like arch gates (recon.engine.gatemodel): a hand-off behind a test
that fails there is left out, and a test that holds there is not repeated.
"""

from __future__ import annotations

import ast
from typing import Optional

from .gatemodel import gate_model, interpreter
from ..names import dotted_name
from .interp import UNKNOWN
from .. import astwalk


def _test_text(test: ast.expr, limit: int = 80) -> str:
    s = ast.unparse(test)
    return s if len(s) <= limit else s[: limit - 3] + "..."


_FLIP = {" == ": " != ", " != ": " == ", " is not ": " is ", " is ": " is not ", " not in ": " in ", " in ": " not in "}


def _negate(text: str) -> str:
    """The test's negation, written the way a reader would: `a != b` for `a == b`, `not x` for `x`."""
    if text.startswith("not ") and " and " not in text and " or " not in text:
        return text[4:]
    if " and " not in text and " or " not in text:
        for op, flipped in _FLIP.items():  # longer operators first: " is not " before " is "
            if text.count(op) == 1 and (op != " in " or " not in " not in text) and (op != " is " or " is not " not in text):
                return text.replace(op, flipped)
    return f"not {text}" if " " not in text else f"not ({text})"


def exits(body: list) -> bool:
    """Every path through ``body`` ends in return/raise (checked on the last statement, and on both
    branches of a trailing if/else)."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return exits(last.body) and exits(last.orelse)
    return False


def only_raises(body: list) -> bool:
    """``body`` ends in ``raise``, or is an ``elif`` chain every branch of which does
    (``elif bypassed: raise NotImplementedError(...)`` ``else: raise ValueError(...)``)."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, ast.Raise):
        return True
    return len(body) == 1 and isinstance(last, ast.If) and only_raises(last.body) and only_raises(last.orelse)


def raising_guards(fn: ast.AST) -> set:
    """The tests of ``fn`` one of whose branches only raises (``if score_mod is not None and ...:
    raise RuntimeError(...)``), as (id of the test node, the sense the code that goes on needs):
    preconditions. A step that runs at all has met them; the other outcome is an error, not
    another kernel."""
    out: set = set()
    blocks = [list(getattr(fn, "body", []))]
    while blocks:
        block = blocks.pop()
        for i, st in enumerate(block):
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(st, ast.If):
                body_raises = only_raises(st.body)
                else_raises = only_raises(st.orelse)
                if body_raises != else_raises:
                    out.add((id(st.test), not body_raises))
                elif not st.orelse and exits(st.body) and not body_raises and i + 1 < len(block) \
                        and isinstance(block[i + 1], ast.Raise):
                    # ``if ok: ...; return x`` then ``raise``: falling through is the error
                    out.add((id(st.test), True))
            for field in ("body", "orelse", "finalbody"):
                sub = getattr(st, field, None)
                if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                    blocks.append(sub)
            blocks += [h.body for h in getattr(st, "handlers", [])]
    return out


def _fallen_through(st: ast.If) -> list:
    """The tests an ``if``/``elif`` chain has failed when the code after it runs: each link's test,
    as long as its body leaves the function, down the chain."""
    out, cur = [], st
    while exits(cur.body):
        out.append((cur.test, False))
        if len(cur.orelse) == 1 and isinstance(cur.orelse[0], ast.If):
            cur = cur.orelse[0]
            continue
        break
    return out


def guarded_calls(fn: ast.AST) -> list[tuple[ast.Call, tuple]]:
    """Every call in ``fn``'s body with the guards under which it runs: (test, holds) pairs, holds
    False on the else side and after an ``if`` whose body returns."""
    out: list[tuple[ast.Call, tuple]] = []

    def calls_in(node, guards):
        for n in astwalk.walk(node):
            if isinstance(n, ast.Call):
                out.append((n, guards))

    def walk(stmts, guards: tuple):
        for st in stmts:
            if isinstance(st, ast.If):
                calls_in(st.test, guards)
                walk(st.body, guards + ((st.test, True),))
                walk(st.orelse, guards + ((st.test, False),))
                if exits(st.body) and not exits(st.orelse):
                    # what follows runs only when the test failed, and each ``elif`` after it whose
                    # body returns too (``if amx: return ...`` ``elif aiter: return ...``
                    # ``elif optimized: return ...`` then ``return F.linear(...)``)
                    guards = guards + tuple(_fallen_through(st))
                elif exits(st.orelse) and not exits(st.body):
                    guards = guards + ((st.test, True),)
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue  # nested definitions run when called, not here
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                for item in st.items:
                    calls_in(item.context_expr, guards)
                walk(st.body, guards)
            elif isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
                calls_in(st.test if isinstance(st, ast.While) else st.iter, guards)
                walk(st.body, guards)
                walk(st.orelse, guards)
            elif isinstance(st, ast.Try):
                for block in (st.body, st.orelse, st.finalbody):
                    walk(block, guards)
                for h in st.handlers:
                    # a handler runs only when the try body raised: a test nothing decides statically
                    what = ast.unparse(h.type) if h.type is not None else "an exception"
                    walk(h.body, guards + ((ast.Name(id=f"raised({what} in the try at line {st.lineno})"), True),))
            else:
                calls_in(st, guards)

    walk(fn.body, ())
    return out


def _on_device(guards: tuple, evaluate) -> Optional[list[str]]:
    """The guards left to say once those the device decides are settled: None when one of them
    fails on this device (the call does not run here), else the texts of the undecided ones."""
    left = []
    for test, holds in guards:
        v = evaluate(test)
        if v is UNKNOWN or not isinstance(v, bool):
            t = _test_text(test)
            left.append(t if holds else _negate(t))
        elif v != holds:
            return None
    return left


# packages whose calls do not pick kernels by themselves (the rule's `handoff_ignore` overrides)
IGNORE = ("torch", "numpy", "triton", "logging", "typing", "functools", "math", "os")


def handoffs(ctx, qual: str, ignore=IGNORE) -> list[dict]:
    """The calls in function ``qual`` that leave the analysed code (library calls, delegations to a
    held object), each with its line, target and guards; in source order."""
    model = gate_model(ctx)
    fn = model.function_ast(qual)
    node = ctx.tree.graph.nodes.get(qual, {})
    if fn is None or not node.get("path"):
        return []
    path = node["path"]
    facts = ctx.tree.index.facts(path)
    if facts is None or facts.error:
        return []
    scope = qual[len(facts.module) + 1:] if facts.module and qual.startswith(facts.module + ".") else qual
    # names bound by imports in the function or any scope enclosing it (innermost wins)
    bound: dict[str, str] = {}
    for imp in sorted(facts.imports, key=lambda i: len(i.scope)):
        if imp.scope == "" or scope == imp.scope or scope.startswith(imp.scope + "."):
            bound[imp.local] = f"{imp.module}.{imp.name}" if imp.name else imp.module
    tops = {m.module.split(".", 1)[0] for m in ctx.tree.index.files.values() if m.module}
    edges = {}
    for _, v, d in ctx.tree.graph.out_edges(qual, data=True):
        if d.get("kind") in ("calls", "calls_dynamic"):
            edges.setdefault(d.get("line", 0), []).append(v)
    it = interpreter(ctx)
    mod, mscope = model.module_scope(qual)
    evaluate = lambda test: it.eval(test, {}, mod, mscope)  # noqa: E731
    out, seen = [], set()
    for call, guards in guarded_calls(fn):
        name = dotted_name(call.func)
        if not name:
            continue
        head = name.split(".", 1)[0]
        target, kind = None, None
        if head in bound:
            full = bound[head] + name[len(head):]
            pkg = full.split(".", 1)[0]
            if pkg not in tops and pkg not in ignore:
                target, kind = full, "library"
        elif name.startswith("self.") and name.count(".") >= 2:
            meth = name.rsplit(".", 1)[1]
            cls_of_self = qual.rsplit(".", 1)[0]
            hits = [v for v in edges.get(call.lineno, []) if v.endswith("." + meth) and not v.startswith(cls_of_self + ".")]
            if hits:
                target, kind = sorted(hits)[0], "delegation"
        when = _on_device(guards, evaluate) if target else None
        if when is not None and (name, call.lineno) not in seen:  # runs on this device, or may
            seen.add((name, call.lineno))
            out.append({"call": name, "target": target, "kind": kind, "line": call.lineno, "path": path,
                        "when": when})
    return sorted(out, key=lambda h: h["line"])


def describe(h: dict) -> str:
    """'flashinfer's trtllm_fp4_block_scale_moe (when self.use_flashinfer)'."""
    if h["kind"] == "library":
        what = f"{h['target'].split('.', 1)[0]}'s {h['target'].rsplit('.', 1)[1]}"
    else:
        what = f"{'.'.join(h['target'].rsplit('.', 2)[-2:])} through {h['call'].rsplit('.', 1)[0]}"
    return f"{what} (when {' and '.join(h['when'])})" if h["when"] else what
