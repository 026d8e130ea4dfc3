"""Dispatchers: functions that choose which function runs, evaluated for one configuration.

SGLang picks many kernels by calling a function that returns a function
(``self.w8a8_block_fp8_linear = dispatch_w8a8_block_fp8_linear()``), which reads module state a
start-up function set from the server arguments (``global FP8_GEMM_RUNNER_BACKEND`` in
``initialize_fp8_gemm_config``). The addition to the runtime view's evaluator that follows that:
a module global that a function declares ``global`` and assigns is evaluated by exploring that
function with the resolved server arguments, and read back where the global is read.

A dispatch resolved lazily, on an op's first call (``method = self._forward_method``, filled by
``self._resolve_forward_method()`` when still None), reads the class machinery: module tables of
method names by backend or platform, ``type(self).__mro__``, ``klass.__dict__``, ``getattr(self,
name)`` and loops that ``continue`` or ``return``. The evaluator answers those for in-tree classes
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

from .. import bounded
from ..runtime.interp import UNKNOWN, _dotted, _Ref, _Return
from ..runtime.evaluator import Evaluator
from ..runtime.values import MISSING, ClassRef, FuncRef, Instance, ServerArgsObj

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


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class StepEvaluator(Evaluator):
    """The runtime view's evaluator, also reading start-up globals, configuration bags and the class
    machinery a lazily resolved dispatch reads."""

    def __init__(self, world, dev, gate_model):
        super().__init__(world, dev, gate_model)
        self._globals: dict = {}
        self.global_sites: dict = {}  # (module, name) -> (value, path, line, function, assumptions)
        self._tables: dict = {}  # module -> {name: display expression bound once at top level}

    # --- loops and the class machinery of a lazy dispatch ------------------------------------------
    def exec_block(self, stmts, env, mod, scope, depth):
        for st in stmts:
            if isinstance(st, ast.Break):
                raise _Break()
            if isinstance(st, ast.Continue):
                raise _Continue()
            if isinstance(st, ast.For) and isinstance(st.target, ast.Name) and not st.orelse and _jumps(st.body):
                seq = self.eval(st.iter, env, mod, scope, depth)
                if not isinstance(seq, (list, tuple, dict, str)) or len(seq) > 64:
                    raise _Return(UNKNOWN)
                for item in seq:
                    env[st.target.id] = item
                    try:
                        self.exec_block(st.body, env, mod, scope, depth)
                    except _Continue:
                        continue
                    except _Break:
                        break
                continue
            if isinstance(st, ast.If) and _jumps([st]):
                # a test guarding a break/continue: taken only where it is decided
                t = self.eval(st.test, env, mod, scope, depth)
                if t is UNKNOWN:
                    raise _Return(UNKNOWN)
                self.exec_block(st.body if t else st.orelse, env, mod, scope, depth)
                continue
            super().exec_block([st], env, mod, scope, depth)

    def _eval(self, node, env, mod, scope, depth):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            # `klass is BaseFusedOp`: in-tree classes are the same object when they are the same class
            a = self._class_of_ref(self._eval(node.left, env, mod, scope, depth))
            b = self._class_of_ref(self._eval(node.comparators[0], env, mod, scope, depth))
            if a and b:
                return (a == b) == isinstance(node.ops[0], ast.Is)
        if isinstance(node, ast.Dict) and node.keys and all(k is not None for k in node.keys):
            # a table of callables (`return {"flash_attn_with_kvcache": flash_attn_with_kvcache}`):
            # the values stay callables, as in a tuple, so `table()["name"](...)` reaches the op
            got = super()._eval(node, env, mod, scope, depth)
            if isinstance(got, dict) and any(v is UNKNOWN for v in got.values()):
                return bounded.build_dict((k, self._eval_raw(v, env, mod, scope, depth)) for k, v in zip(got, node.values))
            return got
        return super()._eval(node, env, mod, scope, depth)

    def _attribute_raw(self, node, env, mod, scope, depth):
        if node.attr in ("__mro__", "__dict__"):
            cls = self._class_of_ref(self._eval(node.value, env, mod, scope, depth))
            if cls:
                if node.attr == "__mro__":
                    return tuple(ClassRef(c) for c in self.world.mro(cls))
                return _defined_names(self.world._class_ast(cls))
        got = super()._attribute_raw(node, env, mod, scope, depth)
        if got is MISSING and isinstance(node.value, ast.Name) and isinstance(env.get(node.value.id), Instance):
            # a class attribute bound to a module name (`priority = DEFAULT_PRIORITY`): evaluated there
            got = self._class_body_value(env[node.value.id].cls, node.attr, depth)
        return got

    def _class_body_value(self, cls: str, name: str, depth: int):
        for c in self.world.mro(cls):
            for st in getattr(self.world._class_ast(c), "body", ()):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) else []
                if st.__dict__.get("value") is not None and any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    return self._eval_raw(st.value, {}, self.world._module_of(c), "", depth + 1)
        return MISSING

    def _table(self, mod: str, name: str, hops: int = 3):
        """A module-level table (a dict, tuple, list or set display bound once at top level, as
        ``_PLATFORM_METHODS = {"cuda": ("forward_cuda",), ...}``), evaluated in its module; also
        through ``from m import name``. NotImplemented when the name is no such table."""
        if mod not in self._tables:
            path = self.world.G.nodes.get(mod, {}).get("path")
            tree = self.world.module_ast(path) if path else None
            found, count = {}, {}
            for st in tree.body if tree is not None else ():
                targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) else []
                for t in targets:
                    if isinstance(t, ast.Name):
                        count[t.id] = count.get(t.id, 0) + 1
                        if isinstance(st.value, (ast.Dict, ast.Tuple, ast.List, ast.Set)):
                            found[t.id] = st.value
            self._tables[mod] = {k: v for k, v in found.items() if count.get(k) == 1}
        expr = self._tables[mod].get(name)
        if expr is not None:
            key = ("table", mod, name)
            if key not in self._globals:
                self._globals[key] = UNKNOWN  # recursion guard
                self._globals[key] = self._eval_raw(expr, {}, mod, "", 1)
            return self._globals[key]
        facts = self.model._facts(mod) if hops > 0 else None
        for imp in facts.imports if facts is not None else ():
            if imp.local == name and imp.name and imp.module != mod:
                return self._table(imp.module, imp.name, hops - 1)
        return NotImplemented

    # --- globals set at start-up -----------------------------------------------------------------
    def _name(self, dotted, mod, scope, depth, call=False):
        if "." not in dotted:
            got = self.startup_global(mod, dotted, depth)
            if got is not NotImplemented:
                return got
            got = self._table(mod, dotted)
            if got is not NotImplemented:
                return got
        elif dotted.count(".") == 1 and not call:
            # `deep_gemm_wrapper.ENABLE_JIT_DEEPGEMM`: a flag another module binds once at import
            head, name = dotted.split(".")
            target = self.model.resolve(mod, scope, head)
            if target and self.model.G.nodes.get(target, {}).get("kind") == "module":
                flag = self._flag_through(target, name, 3)
                if flag is not None:
                    fmod, expr = flag
                    key = (fmod, name)
                    if key not in self.flag_memo:
                        self.flag_memo[key] = UNKNOWN  # recursion guard
                        self.flag_memo[key] = self.eval(expr, {}, fmod, "", depth + 1) if depth < self.depth_limit else UNKNOWN
                    return self.flag_memo[key]
        return super()._name(dotted, mod, scope, depth, call)

    def _flag_through(self, module: str, name: str, hops: int):
        """A module flag of ``module``, also through its ``from .x import *`` re-exports."""
        flag = self.model.module_flag(module, name)
        if flag is not None or hops <= 0:
            return flag
        facts = self.model._facts(module)
        for imp in facts.imports if facts is not None else ():
            if imp.name == "*" and imp.module != module:
                got = self._flag_through(imp.module, name, hops - 1)
                if got is not None:
                    return got
        return None

    def startup_global(self, mod: str, name: str, depth: int = 0):
        key = (mod, name)
        if key in self._globals:
            return self._globals[key]
        self._globals[key] = NotImplemented  # recursion guard
        path = self.world.G.nodes.get(mod, {}).get("path")
        tree = self.world.module_ast(path) if path else None
        found, scoped = NotImplemented, False
        for fn in tree.body if tree is not None else ():
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if not any(isinstance(n, ast.Global) and name in n.names for n in ast.walk(fn)):
                continue
            if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(fn)):
                scoped = True  # a context manager sets the global for its with-block only, not at start-up
                continue
            stores = [n for n in ast.walk(fn) if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
            if not stores:
                continue
            # the getter (`if X is None: X = DEFAULT; return X`) is not where X is settled
            if isinstance(fn.body[-1], ast.Return) and isinstance(fn.body[-1].value, ast.Name) and fn.body[-1].value.id == name:
                continue
            env = {}
            for a in fn.args.posonlyargs + fn.args.args:
                if self.world.state is not None and "args" in a.arg:
                    env[a.arg] = ServerArgsObj(self.world.state)
            body = list(fn.body) + [ast.Return(value=ast.Name(id=name, ctx=ast.Load()), lineno=stores[-1].lineno, col_offset=0)]
            outs = [o for o in self.explore(body, env, mod, fn.name, path, depth + 1) if not o.raises]
            outs.sort(key=lambda o: sum(1 for a in o.assumptions if a[1]))
            if outs and outs[0].value is not UNKNOWN and not isinstance(outs[0].value, _Ref):
                found = outs[0].value
                self.global_sites[key] = (found, path, stores[-1].lineno, fn.name, outs[0].assumptions)
                break
        if found is NotImplemented and scoped:
            # set only inside with-blocks: outside them it keeps the value the module binds at import
            binds = [st.value for st in tree.body if isinstance(st, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == name for t in st.targets)]
            if len(binds) == 1 and self.world.literal(binds[0]) is not UNKNOWN:
                found = self.world.literal(binds[0])
        self._globals[key] = found
        return found

    # --- ServerArgs methods ----------------------------------------------------------------------
    def _call_known(self, node, env, mod, scope, depth):
        f = node.func
        if isinstance(f, ast.Name) and f.id not in env and f.id in ("type", "getattr") and node.args:
            obj = self._eval(node.args[0], env, mod, scope, depth)
            if f.id == "type" and len(node.args) == 1 and isinstance(obj, Instance):
                return ClassRef(obj.cls)
            if f.id == "getattr" and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant) and isinstance(obj, Instance):
                # getattr(self, name) with a name the code computed (a table's entry)
                name = self.eval(node.args[1], env, mod, scope, depth)
                if isinstance(name, str) and name.isidentifier():
                    const = ast.Call(func=f, args=[node.args[0], ast.Constant(value=name)] + node.args[2:], keywords=[])
                    return super()._call_known(const, env, mod, scope, depth)
                return UNKNOWN
        if isinstance(f, ast.Attribute) and f.attr == "get" and isinstance(f.value, ast.Name) and f.value.id not in env:
            table = self._table(mod, f.value.id)
            if isinstance(table, dict) and node.args:
                key = self.eval(node.args[0], env, mod, scope, depth)
                if key is UNKNOWN:
                    return UNKNOWN
                return table[key] if key in table else (self._eval_raw(node.args[1], env, mod, scope, depth) if len(node.args) > 1 else None)
        got = super()._call_known(node, env, mod, scope, depth)
        if got is NotImplemented and len(node.args) == 1 and _dotted(f):
            wrapped = self._wrapped(node, f, env, mod, scope, depth)
            if wrapped is not None:
                return wrapped
        if got is NotImplemented and isinstance(f, ast.Attribute) and self.world.schema is not None:
            recv = self._receiver(f.value, env, mod, scope, depth)
            if isinstance(recv, ServerArgsObj):
                # `self.is_attention_backend_not_set()`: ServerArgs's own method, on the resolved state
                sch = self.world.schema
                cls = sch.class_qual if "." in sch.class_qual and sch.class_qual.startswith(sch.module) else f"{sch.module}.{sch.class_qual}"
                meth = self.world.method(cls, f.attr)
                if meth:
                    args = [_plainval(self._eval(a, env, mod, scope, depth)) for a in node.args if not isinstance(a, ast.Starred)]
                    kwargs = {k.arg: _plainval(self._eval(k.value, env, mod, scope, depth)) for k in node.keywords if k.arg}
                    return self.call_method(meth, recv, args, kwargs, depth + 1)
        return got

    def _wrapped(self, node, f, env, mod, scope, depth) -> Optional[FuncRef]:
        """``torch.compiler.disable(decode_attention_fwd)``: a callable from outside the tree handed
        one in-tree function gives back a callable that runs it."""
        callee = self._eval(f, env, mod, scope, depth)
        if not isinstance(callee, _Ref) or (callee.qual and callee.qual in self.model.G):
            return None
        arg = self._eval(node.args[0], env, mod, scope, depth)
        q = arg.qual if isinstance(arg, _Ref) else arg.qual if isinstance(arg, FuncRef) else None
        if not q or self.model.G.nodes.get(q, {}).get("kind") not in ("function", "triton_kernel"):
            return None
        full = self.world.imported_as(mod, scope, _dotted(f)) or _dotted(f)
        return FuncRef(q, (f"wrapped by {full}",), (self.world.G.nodes.get(mod, {}).get("path", ""), node.lineno))


def _jumps(stmts) -> bool:
    """A break or continue of this loop level in ``stmts`` (not of a loop nested inside)."""
    todo = list(stmts)
    while todo:
        st = todo.pop()
        if isinstance(st, (ast.Break, ast.Continue)):
            return True
        if isinstance(st, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        todo += [c for c in ast.iter_child_nodes(st) if isinstance(c, ast.stmt)]
    return False


def _defined_names(cls_node) -> frozenset:
    """The names a class body defines itself (its ``__dict__``): methods and class attributes."""
    out = set()
    for st in cls_node.body if cls_node is not None else ():
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(st.name)
        for t in st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) else []:
            if isinstance(t, ast.Name):
                out.add(t.id)
    return frozenset(out)


def _plainval(v):
    return UNKNOWN if isinstance(v, _Ref) else v


def _fn_path(ev, qual):
    return ev.world.path_of(qual) or ""


def choices(ev: StepEvaluator, qual: str, args: Optional[dict] = None, assumed: tuple = (), depth: int = 0,
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
    rets = {n.lineno: n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None}
    out: list[Choice] = []
    for o in ev.explore(_marked(fn.body), env, mod, scope, path, depth, assumed):
        if o.raises or o.line not in rets:
            continue
        expr = rets[o.line].value
        if isinstance(expr, ast.Call) and _dotted(expr.func).endswith("partial") and expr.args:
            expr = expr.args[0]  # partial(f, ...) runs f
        here = (hops or []) + [(f"{qual.rsplit('.', 1)[-1]} returns {ast.unparse(expr)[:60]}", path, o.line)]
        selfval = (args or {}).get(names[0]) if names else None
        if (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and names and expr.value.id == names[0]
                and isinstance(selfval, Instance) and ev.world.method(selfval.cls, expr.attr)):
            # `return self.forward_cuda`: the object's own method
            out.append(Choice(ev.world.method(selfval.cls, expr.attr), expr.attr, o.assumptions, here))
        elif isinstance(expr, (ast.Name, ast.Attribute)) and not isinstance(o.value, Instance) and not (
                isinstance(expr, ast.Name) and expr.id in o.env):
            d = _dotted(expr)
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
            for n in ast.walk(fn):
                if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                        and n.targets[0].id == expr.id and n.lineno < o.line and (ran is None or n.lineno == ran):
                    last = n.value
            if isinstance(last, ast.Call):
                expr = last
        if isinstance(expr, ast.Call) and not isinstance(o.value, Instance):
            d = _dotted(expr.func)
            target = ev.model.resolve(mod, scope, d) if d else None
            if target and ev.model.G.nodes.get(target, {}).get("kind") == "function":
                inner = ev.model.function_ast(target)
                bound = {}
                if inner is not None:
                    pn = [a.arg for a in inner.args.posonlyargs + inner.args.args]
                    for p, a in zip(pn, expr.args):
                        v = ev._eval_raw(a, o.env, mod, scope)
                        if v is not UNKNOWN:
                            bound[p] = v
                    for k in expr.keywords:
                        if k.arg:
                            v = ev._eval_raw(k.value, o.env, mod, scope)
                            if v is not UNKNOWN:
                                bound[k.arg] = v
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
        if isinstance(v, ast.Call) and _dotted(v.func):
            d = _dotted(v.func)
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
            if _dotted(call.func).startswith("self."):
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


__all__ = ["StepEvaluator", "Choice", "choices", "held_dispatcher", "resolve_held", "ClassRef", "FuncRef"]
