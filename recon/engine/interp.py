"""The gate interpreter: evaluates gate bodies and branch tests of the tree for one device, over
stdlib ``ast`` (never importing SGLang), with the device's capability, CUDA version and vendor
standing in for the probes. Three-valued: True, False, or :data:`UNKNOWN` (what cannot be told
without running the code); :func:`public` maps unknown to None at the boundaries.

Where the gates are (definitions, variables holding their values, platform tables) is
:mod:`recon.engine.gatemodel`.
"""

from __future__ import annotations

import ast
import functools
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from .. import bounded
from ..names import dotted_name
from .asts import tree_memo  # noqa: F401  (read here and by the modules that import it from interp)
from .. import astwalk

if TYPE_CHECKING:
    from .gatemodel import GateModel

class _Unknown:
    """What cannot be told without running the code. Distinct from Python's None, which is a value
    code compares against (``routed_experts_quant_method is None``); falsy so that a test nobody
    decided never counts as taken. Public results (:func:`evaluate_gates`, :func:`eval_test`) map
    it to None."""

    _it = None

    def __new__(cls):
        if cls._it is None:
            cls._it = super().__new__(cls)
        return cls._it

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "unknown"

    def __reduce__(self):
        return (_Unknown, ())


UNKNOWN = _Unknown()  # three-valued logic: True, False, or UNKNOWN




def public(v):
    """A value for code outside the interpreter: unknown is None there."""
    return None if v is UNKNOWN else v
PROBE_TAILS = ("get_device_capability", "get_device_sm", "has_device_capability", "is_device_capability", "device_capability", "device_sm")


class Cap(tuple):
    """A compute capability that compares like a tuple and has ``.major`` / ``.minor``."""

    @property
    def major(self):
        return self[0]

    @property
    def minor(self):
        return self[1]

    def to_int(self):
        return self[0] * 10 + self[1]


@dataclass(frozen=True)
class Dev:
    vendor: str
    cc: tuple
    cuda: Optional[tuple]

    @classmethod
    def of(cls, profile) -> "Dev":
        return cls(profile.vendor, tuple(profile.compute_capability), tuple(profile.cuda_version) if profile.cuda_version else None)



class FuncHandle:
    """A callable the interpreter met: an in-tree function (qualname) or an outside dotted name."""

    def __init__(self, dotted: str, qual: Optional[str] = None, bound: Any = None):
        self.dotted, self.qual, self.bound = dotted, qual, bound

    @property
    def tail(self) -> str:
        return self.dotted.rsplit(".", 1)[-1]


# the builtins that build a value are bounded (recon.bounded): `str(["a" * 65536] * 65536)` is unknown
_SAFE_BUILTINS = {"tuple": bounded.copy(tuple), "map": map, "int": int, "list": bounded.copy(list), "len": len,
                  "str": bounded.str_, "any": any, "all": all, "min": min, "max": max, "bool": bool, "float": float,
                  "set": bounded.copy(set), "sorted": bounded.copy(sorted), "frozenset": bounded.copy(frozenset),
                  "dict": lambda *a, **k: bounded.build_dict(list(dict(*a, **k).items()))}
_TRITON_MATH = {"next_power_of_2": lambda n: 1 if n <= 1 else 1 << (n - 1).bit_length(), "cdiv": lambda a, b: -(-a // b) if b else UNKNOWN}
_STR_METHODS = {"split", "rsplit", "startswith", "endswith", "strip", "lstrip", "rstrip", "lower", "upper", "count",
                "index", "replace", "removeprefix", "removesuffix", "isdigit", "partition", "rpartition"}
# in-place changes of a container (``names.append(x)``): applied to a copy the name is bound to again
IN_PLACE = {"append", "extend", "add", "update", "insert", "remove", "discard", "clear", "setdefault"}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
        ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
        ast.Is: operator.is_, ast.IsNot: operator.is_not}
# bounded: the operands are literals of untrusted code (`"a" * 10 ** 9` must not be built)
_BIN = {ast.Add: bounded.ADD, ast.Sub: bounded.SUB, ast.Mult: bounded.MUL, ast.FloorDiv: bounded.FLOORDIV, ast.Mod: bounded.MOD}
STEP_BUDGET = 100_000  # expressions one top-level evaluation may visit (SGLang 0.5.5-0.5.23: at most 1,411, in the runtime view)


class _Found:
    """What ``importlib.util.find_spec`` returns for a package that is installed: not None, truthy."""

    def __repr__(self) -> str:
        return "<module spec>"


FOUND = _Found()


class Returned(Exception):
    def __init__(self, value):
        self.value = value


class Raised(Returned):
    """A ``raise`` (or a failed ``assert``) of the code evaluated: ``exc`` is the exception class's
    name (``ValueError``), or None where it is not known. A caller that does not handle it reads
    it as an unknown result (it is a :class:`Returned` of ``UNKNOWN``); a ``try`` being evaluated
    around it runs the handler that catches it."""

    def __init__(self, exc):
        super().__init__(UNKNOWN)
        self.exc = exc


# builtin exception classes and their bases, for ``except`` clauses (an in-tree class is not here)
_EXC_BASES = {"ValueError": "Exception", "TypeError": "Exception", "KeyError": "LookupError",
              "IndexError": "LookupError", "LookupError": "Exception", "AttributeError": "Exception",
              "AssertionError": "Exception", "RuntimeError": "Exception", "NotImplementedError": "RuntimeError",
              "ImportError": "Exception", "ModuleNotFoundError": "ImportError", "Exception": "BaseException"}


def catches(handler_type, exc) -> object:
    """Whether an ``except`` clause of type ``handler_type`` (an AST, None for a bare ``except``)
    catches a raise of ``exc``: True, False, or UNKNOWN (a class this table does not know)."""
    if handler_type is None:
        return True
    names = handler_type.elts if isinstance(handler_type, ast.Tuple) else [handler_type]
    if not all(isinstance(n, ast.Name) for n in names):
        return UNKNOWN
    wanted = {n.id for n in names}
    if wanted & {"Exception", "BaseException"}:
        return True
    if exc is None or exc not in _EXC_BASES:
        return UNKNOWN
    c = exc
    while c:
        if c in wanted:
            return True
        c = _EXC_BASES.get(c)
    return False if all(n in _EXC_BASES for n in wanted) else UNKNOWN


def raised_name(node) -> Optional[str]:
    """The exception class a ``raise`` statement names (``raise ValueError(...)``), else None."""
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return exc.id if isinstance(exc, ast.Name) else None


class _OutOfSteps(Exception):
    """The evaluation visited :data:`STEP_BUDGET` expressions: its value is unknown. Calls that
    branch both ways on unknown tests can otherwise grow exponentially with the call depth."""


class Interpreter:
    """Evaluates gate bodies and branch tests for one device. Parses only the files it needs."""

    def __init__(self, tree, dev: Dev, model: "GateModel", depth_limit: int = 6):
        self.tree, self.dev, self.model, self.depth_limit = tree, dev, model, depth_limit
        self.flag_memo: dict[tuple[str, str], Any] = {}  # (module, flag) -> value on this device
        self.in_try = 0  # ``try`` blocks being evaluated around the current statement
        self.memo: dict[str, Any] = {}
        self.touched = False  # did the last evaluation read the device's capability / CUDA version
        self.steps = STEP_BUDGET  # left for the current top-level evaluation

    # --- probes --------------------------------------------------------------------------------
    def note(self, key: str, text: str) -> None:
        """Record an assumption the result rests on (the runtime view's evaluator lists them)."""

    def _package(self, module) -> Any:
        """``importlib.util.find_spec(module)``: found where the release requires the package that
        provides it, by name or inside a pinned kernel wheel that ships it
        (:mod:`recon.engine.packages`), else unknown (a user may have installed it)."""
        if not isinstance(module, str):
            return UNKNOWN
        node = self.model.G.nodes.get(module)
        if node is not None and node.get("kind") == "module":  # the tree's own module: it ships with it
            self.note(f"pkg:{module}", f"{module} installed: a module of the analysed tree ({node.get('path')})")
            return FOUND
        from .packages import declared
        decl = declared(self.tree)
        req, unread = decl.lookup(module) if decl is not None else (None, "")
        if req is None:
            where = f"not among the requirements in {decl.where}" if decl is not None else "no declared requirements found"
            if unread:  # a pinned kernel wheel that might ship it could not be read: by names only
                where += f"; assumed by names only, as {unread}"
            self.note(f"pkg:{module}", f"{module} installed or not: unknown ({where})")
            return UNKNOWN
        self.note(f"pkg:{module}", f"{module} installed: {decl.where} requires {req}")
        return FOUND

    def _probe(self, tail: str, dotted: str, args: list):
        d = self.dev
        if tail == "find_spec" and dotted in ("importlib.util.find_spec", "util.find_spec", "find_spec") and args:
            return self._package(args[0])
        if tail in ("get_device_capability", "device_capability"):
            self.touched = True
            return Cap(d.cc)
        if tail in ("get_device_sm", "device_sm"):
            self.touched = True
            return d.cc[0] * 10 + d.cc[1]
        if tail in ("has_device_capability", "is_device_capability"):
            self.touched = True
            if not args or args[0] is UNKNOWN:
                return UNKNOWN
            want = args[0]
            have = Cap(d.cc).to_int() if isinstance(want, int) else tuple(d.cc)
            return have >= want if tail.startswith("has") else have == tuple(want) if not isinstance(want, int) else have == want
        if tail in ("is_cuda", "is_cuda_static", "is_available") and ("cuda" in dotted or tail != "is_available"):
            return d.vendor == "nvidia"
        if tail in ("is_cuda_alike",):
            return d.vendor in ("nvidia", "amd")
        if tail in ("is_hip", "is_rocm"):
            return d.vendor == "amd"
        if tail in ("is_npu", "is_xpu", "is_cpu", "is_musa", "is_mps", "is_hpu"):
            return False
        return KeyError

    # --- functions -----------------------------------------------------------------------------
    def gate_value(self, qual: str, depth: int = 0):
        if qual in self.memo:
            return self.memo[qual]
        if depth == 0:
            self.steps = STEP_BUDGET
        self.memo[qual] = UNKNOWN  # recursion guard
        g = self.model.gates.get(qual)
        try:
            if g is not None and g.form == "platform-property":
                v = self.gate_value(g.wraps, depth + 1) if g.wraps else UNKNOWN
            elif g is not None and g.form == "assignment":
                target = self.model.resolve_in(g.qualname, g.wraps) if g.wraps else None
                v = self.call_function(target, [], dict(g.kwargs), depth + 1) if target else UNKNOWN
            else:
                v = self.call_function(qual, [], {}, depth + 1)
        except (_OutOfSteps, RecursionError):
            v = UNKNOWN
        self.memo[qual] = v
        return v

    def call_function(self, qual: Optional[str], args: list, kwargs: dict, depth: int):
        if qual is None or depth > self.depth_limit:
            return UNKNOWN
        if qual in self.model.gates and not args and not kwargs and qual not in self.memo:
            return self.gate_value(qual, depth)
        fn = self.model.function_ast(qual)
        if fn is None:
            g = self.model.gates.get(qual)
            if g:
                return self.gate_value(qual, depth)
            lam = self._module_lambda(qual)
            return self._call_lambda(lam, qual.rsplit(".", 1)[0], args, kwargs, depth) if lam is not None else UNKNOWN
        env: dict[str, Any] = {}
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        if params and params[0] in ("self", "cls"):
            params = params[1:]
        defaults = fn.args.defaults
        mod, scope = self.model.module_scope(qual)
        for p, dflt in zip(params[len(params) - len(defaults):], defaults):
            env[p] = _literal(dflt)
            if env[p] is UNKNOWN and isinstance(dflt, ast.Call):
                env[p] = self.eval(dflt, {}, mod, "", depth + 1)  # MappingProxyType({}): evaluated where it is defined
        for p, v in zip(params, args):
            env[p] = v
        env.update(kwargs)
        mod, scope = self.model.module_scope(qual)
        try:
            self.exec_block(fn.body, env, mod, scope, depth)
        except Raised:
            if self.in_try:
                raise  # a try around the call being evaluated may catch it
            return UNKNOWN
        except Returned as r:
            return r.value
        return None if not fn.body else UNKNOWN

    def _module_lambda(self, qual: str):
        """``name = lambda ...: expr`` at a module's top level (``is_hopper_with_cuda_12_3 = lambda:
        _check(9)`` in 0.5.5): the index gives such a name no function node, the module binds it."""
        mod, _, name = qual.rpartition(".")
        table = self.__dict__.setdefault("_lambdas", {})
        if mod not in table:
            path = self.model.G.nodes.get(mod, {}).get("path") if mod else None
            tree = self.model._module_ast(path) if path else None
            found: dict = {}
            for st in tree.body if tree is not None else ():
                if isinstance(st, ast.Assign):
                    for t in st.targets:
                        if isinstance(t, ast.Name):  # the last binding counts
                            found[t.id] = st.value if isinstance(st.value, ast.Lambda) else None
            table[mod] = {k: v for k, v in found.items() if v is not None}
        return table[mod].get(name)

    def _lambda_bound(self, mod: str, name: str, hops: int) -> Optional[str]:
        """The qualified name of a module-level ``name = lambda ...`` that ``name`` in ``mod`` is,
        directly or through imports (``from .common import *`` re-exports included)."""
        memo = self.__dict__.setdefault("_lambda_memo", {})
        key = (mod, name, hops)
        if key in memo:
            return memo[key]
        memo[key] = None  # recursion guard: modules that import each other
        if self._module_lambda(f"{mod}.{name}") is not None:
            memo[key] = f"{mod}.{name}"
            return memo[key]
        facts = self.model._facts(mod) if hops > 0 else None
        for imp in facts.imports if facts is not None else ():
            if imp.scope or imp.module == mod:
                continue
            if imp.name == "*" or (imp.local == name and imp.name):
                got = self._lambda_bound(imp.module, name if imp.name == "*" else imp.name, hops - 1)
                if got is not None:
                    memo[key] = got
                    return got
        return None

    def _call_lambda(self, lam, mod: str, args: list, kwargs: dict, depth: int):
        a = lam.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or depth > self.depth_limit:
            return UNKNOWN
        params = [p.arg for p in a.args]
        env: dict[str, Any] = {p: _literal(d) for p, d in zip(params[len(params) - len(a.defaults):], a.defaults)}
        env.update(zip(params, args))
        env.update(kwargs)
        if any(p not in env for p in params):
            return UNKNOWN
        return self.eval(lam.body, env, mod, "", depth + 1)

    def exec_block(self, stmts, env, mod, scope, depth):
        for st in stmts:
            self._step()
            if isinstance(st, ast.Return):
                raise Returned(self.eval(st.value, env, mod, scope, depth) if st.value is not None else None)
            if isinstance(st, ast.If):
                t = self.eval(st.test, env, mod, scope, depth)
                if t is UNKNOWN:
                    # both ways possible: the result is known only when both agree
                    outs = []
                    for body in (st.body, st.orelse):
                        try:
                            self.exec_block(body, dict(env), mod, scope, depth)
                            outs.append(KeyError)
                        except Returned as r:
                            outs.append(r.value)
                    if outs[0] is not KeyError and outs[0] == outs[1]:
                        raise Returned(outs[0])
                    if KeyError not in outs:
                        raise Returned(UNKNOWN)
                    # one side falls through: what follows is reached only on some paths
                    raise Returned(UNKNOWN)
                self.exec_block(st.body if t else st.orelse, env, mod, scope, depth)
            elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                env[st.targets[0].id] = self.eval(st.value, env, mod, scope, depth)
            elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Tuple):
                unpack(st.targets[0], self.eval(st.value, env, mod, scope, depth), env)  # major, minor = cap
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                env[st.target.id] = self.eval(st.value, env, mod, scope, depth)
            elif isinstance(st, ast.Try):
                self.exec_try(st, env, mod, scope, depth)
            elif isinstance(st, ast.Raise):
                raise Raised(raised_name(st) if st.exc is not None else None)
            elif isinstance(st, ast.Assert):
                t = self.eval(st.test, env, mod, scope, depth)
                if t is UNKNOWN:
                    raise Returned(UNKNOWN)
                if not t:
                    raise Raised("AssertionError")
            elif isinstance(st, ast.Expr) and in_place_call(st.value, env):
                self.apply_in_place(st.value, env, mod, scope, depth)
            elif isinstance(st, (ast.Expr, ast.Pass, ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom)):
                continue
            else:
                raise Returned(UNKNOWN)  # loops, with, ...: out of this interpreter's depth

    def exec_try(self, st, env, mod, scope, depth):
        """``try``/``except``: the body run; a raise it makes (:class:`Raised`, also from a function
        it calls) runs the first handler that catches it. A handler whose match is unknown, and a
        ``finally`` block, leave the result unknown."""
        if st.finalbody:
            self.exec_block(st.body, env, mod, scope, depth)  # the body's own result, as before
            return
        self.in_try += 1
        try:
            self.exec_block(st.body, env, mod, scope, depth)
        except Raised as r:
            self.in_try -= 1
            for h in st.handlers:
                c = catches(h.type, r.exc)
                if c is UNKNOWN:
                    raise Returned(UNKNOWN)
                if c:
                    if h.name:
                        env[h.name] = UNKNOWN
                    self.exec_block(h.body, env, mod, scope, depth)
                    return
            raise
        except BaseException:
            self.in_try -= 1
            raise
        else:
            self.in_try -= 1
        self.exec_block(st.orelse, env, mod, scope, depth)

    def apply_in_place(self, call, env, mod, scope, depth) -> None:
        """``names.append(x)`` on a local container: the name is bound to a changed copy (values
        may be shared with a default or a table); unknown where the container or an argument is."""
        name = call.func.value.id
        base = env.get(name)
        args = [truth_value(self._eval(a, env, mod, scope, depth)) for a in call.args]
        env[name] = in_place(base, call.func.attr, args, bool(call.keywords) or any(isinstance(a, ast.Starred) for a in call.args))

    # --- expressions ---------------------------------------------------------------------------
    def eval(self, node, env, mod, scope, depth=0):
        if depth == 0:
            self.steps = STEP_BUDGET
        try:
            return truth_value(self._eval(node, env, mod, scope, depth))
        except Returned:
            raise
        except Exception:  # unknown names, bad operands, _OutOfSteps, bounded.TooLarge, recursion
            return UNKNOWN

    def _comprehension(self, node, env, mod, scope, depth):
        """``any(a in ARCHS for a in archs)``: one ``for`` over a known sequence of at most 256
        items, its ``if`` clauses and element evaluated per item; unknown if any of them is."""
        if len(node.generators) != 1 or node.generators[0].is_async:
            return UNKNOWN
        gen = node.generators[0]
        seq = truth_value(self._eval(gen.iter, env, mod, scope, depth))
        if isinstance(seq, (set, frozenset)):
            seq = sorted(seq, key=repr)
        if not isinstance(seq, (tuple, list, str, dict)) or len(seq) > 256:
            return UNKNOWN
        out = []
        for item in seq:
            inner = dict(env)
            if not _bind(gen.target, item, inner):
                return UNKNOWN
            keep = True
            for cond in gen.ifs:
                c = truth_value(self._eval(cond, inner, mod, scope, depth))
                if c is UNKNOWN:
                    return UNKNOWN
                keep = keep and bool(c)
            if keep:
                v = truth_value(self._eval(node.elt, inner, mod, scope, depth))
                if v is UNKNOWN:
                    return UNKNOWN
                out.append(v)
        return bounded.build(set if isinstance(node, ast.SetComp) else list, out)

    def _step(self):
        self.steps -= 1
        if self.steps < 0:
            raise _OutOfSteps()

    def _eval(self, node, env, mod, scope, depth):
        self._step()
        ev = lambda n: truth_value(self._eval(n, env, mod, scope, depth))  # noqa: E731
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            vals = []
            for e in node.elts:
                if isinstance(e, ast.Starred):  # (*ARCHS, "X"): splat a known sequence
                    seq = ev(e.value)
                    if not isinstance(seq, (tuple, list, set, frozenset, str)):
                        return UNKNOWN
                    vals.extend(sorted(seq, key=repr) if isinstance(seq, (set, frozenset)) else seq)
                else:
                    vals.append(ev(e))
            if any(v is UNKNOWN for v in vals):
                return UNKNOWN
            return bounded.build(tuple if isinstance(node, ast.Tuple) else list if isinstance(node, ast.List) else set, vals)
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            return self._comprehension(node, env, mod, scope, depth)
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in _SAFE_BUILTINS:
                return _SAFE_BUILTINS[node.id]
            return self._name(node.id, mod, scope, depth)
        if isinstance(node, ast.Attribute):
            dotted = dotted_name(node)
            if dotted == "torch.version.cuda":
                self.touched = True
                return ".".join(map(str, self.dev.cuda)) if self.dev.cuda else None
            if dotted == "torch.version.hip":
                return "6.3" if self.dev.vendor == "amd" else None
            prop = self.model.platform_property(dotted)
            if prop:
                probe = self._probe(prop.rsplit(".", 1)[-1], prop, [])  # a device probe (is_cuda): the device answers
                return probe if probe is not KeyError else self.gate_value(prop, depth + 1)
            if node.attr in ("major", "minor"):
                base = ev(node.value)
                if isinstance(base, Cap):
                    return getattr(base, node.attr)
            base = ev(node.value) if not dotted else None
            if isinstance(base, str) and node.attr == "replace":
                return functools.partial(bounded.replace, base)
            if isinstance(base, (str, tuple, list)) and node.attr in _STR_METHODS:
                return getattr(base, node.attr)
            if dotted:
                if isinstance(node.value, ast.Name) and node.value.id in env:
                    return UNKNOWN
                return self._name(dotted, mod, scope, depth, call=False)
            return UNKNOWN
        if isinstance(node, ast.Call):
            return self._call(node, env, mod, scope, depth)
        if isinstance(node, ast.Subscript):
            v, i = ev(node.value), ev(node.slice)
            return UNKNOWN if v is UNKNOWN or i is UNKNOWN else v[i]
        if isinstance(node, ast.Slice):
            parts = [ev(p) if p is not None else None for p in (node.lower, node.upper, node.step)]
            return slice(*parts)
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            result = True
            for op, right_n in zip(node.ops, node.comparators):
                right = ev(right_n)
                if left is UNKNOWN or right is UNKNOWN:
                    return UNKNOWN
                if not _CMP[type(op)](left, right):
                    result = False
                left = right
            return result
        if isinstance(node, ast.BoolOp):
            vals = []
            for v in node.values:
                x = ev(v)
                if x is not UNKNOWN:
                    x = bool(x)
                    if isinstance(node.op, ast.And) and not x:
                        return False
                    if isinstance(node.op, ast.Or) and x:
                        return True
                vals.append(x)
            return UNKNOWN if UNKNOWN in vals else isinstance(node.op, ast.And)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            x = ev(node.operand)
            return UNKNOWN if x is UNKNOWN else not x
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            x = ev(node.operand)  # -1: a number
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                return -x if isinstance(node.op, ast.USub) else x
            return UNKNOWN
        if isinstance(node, ast.JoinedStr):
            # f"model.{base}": each part a known string or number, formatted plainly
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    parts.append(str(v.value))
                    continue
                if not isinstance(v, ast.FormattedValue) or v.format_spec is not None or v.conversion not in (-1, 115):
                    return UNKNOWN
                x = ev(v.value)
                if not isinstance(x, (str, int, float)) or isinstance(x, bool):
                    return UNKNOWN
                parts.append(str(x))
            return bounded.join("", parts)
        if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            # the walrus: the value, bound to the name where the test is read
            x = self._eval(node.value, env, mod, scope, depth)
            env[node.target.id] = truth_value(x)
            return x
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            a, b = ev(node.left), ev(node.right)
            return UNKNOWN if a is UNKNOWN or b is UNKNOWN else _BIN[type(node.op)](a, b)
        if isinstance(node, ast.IfExp):
            t = ev(node.test)
            return UNKNOWN if t is UNKNOWN else ev(node.body if t else node.orelse)
        return UNKNOWN

    def _name(self, dotted: str, mod, scope, depth, call=False):
        """A free name: a gate's value holder (module variable), a module flag made of gates
        (evaluated where it is read), a function reference, or unknown."""
        gate = self.model.gate_var(mod, dotted)
        if gate:
            return self.gate_value(gate, depth + 1)
        qual = self.model.resolve(mod, scope, dotted)
        if self.model.G.nodes.get(qual, {}).get("kind") in ("function", "class"):
            return FuncHandle(dotted, qual)
        if qual is None and "." not in dotted:
            lam = self._lambda_bound(mod, dotted, 3)
            if lam is not None:  # `name = lambda: ...` here or where it is imported from: a function
                return FuncHandle(dotted, lam)
        flag = self.model.module_flag(mod, dotted)
        if flag is not None:
            fmod, expr = flag
            key = (fmod, dotted)
            if key not in self.flag_memo:
                self.flag_memo[key] = UNKNOWN  # recursion guard: `_a = _b and x`, `_b = _a or y`
                self.flag_memo[key] = self.eval(expr, {}, fmod, "", depth + 1) if depth < self.depth_limit else UNKNOWN
            return self.flag_memo[key]
        return FuncHandle(dotted, qual)

    def _call(self, node, env, mod, scope, depth):
        func = node.func
        args = [truth_value(self._eval(a, env, mod, scope, depth)) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs = {k.arg: truth_value(self._eval(k.value, env, mod, scope, depth)) for k in node.keywords if k.arg}
        # method on a plain value: "12.8".split(".")
        if isinstance(func, ast.Attribute) and func.attr in _STR_METHODS:
            base = self._eval(func.value, env, mod, scope, depth)
            if isinstance(base, str) and func.attr == "replace":
                return bounded.replace(base, *args, **kwargs)
            if isinstance(base, (str, tuple, list)):
                return bounded.check(getattr(base, func.attr)(*args, **kwargs))
        target = self._eval(func, env, mod, scope, depth)
        if callable(target) and not isinstance(target, FuncHandle):
            if any(a is UNKNOWN for a in args):
                return UNKNOWN
            out = target(*args, **kwargs)
            return bounded.build(tuple, out) if isinstance(out, map) else bounded.check(out)
        if isinstance(target, FuncHandle):
            if (target.qual or target.dotted) in ("types.MappingProxyType", "MappingProxyType") and len(args) == 1 and not kwargs:
                # a read-only view of a mapping (``fused_mapping=MappingProxyType({})``): its items
                return bounded.build_dict(list(args[0].items())) if isinstance(args[0], dict) else UNKNOWN
            probe = self._probe(target.tail, target.dotted, args)
            if probe is not KeyError:
                return probe
            pure = _TRITON_MATH.get(target.tail) if target.dotted.split(".")[0] == "triton" else None
            if pure is not None:  # triton.next_power_of_2 / triton.cdiv: host arithmetic, no device
                ints = [a for a in args if isinstance(a, int) and not isinstance(a, bool) and 0 <= a.bit_length() <= 62]
                return pure(*args) if len(ints) == len(args) and not kwargs else UNKNOWN
            if target.qual:
                return self.call_function(target.qual, args, kwargs, depth + 1)
        return UNKNOWN


def in_place_call(node, env) -> bool:
    """``name.append(...)`` (a change of a local container in place), as a statement."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in IN_PLACE \
        and isinstance(node.func.value, ast.Name) and node.func.value.id in env


def in_place(base, op: str, args: list, odd: bool):
    """``base`` after ``base.op(*args)``, on a copy; UNKNOWN where either is not known."""
    if odd or base is UNKNOWN or any(a is UNKNOWN for a in args):
        return UNKNOWN
    if isinstance(base, list) and op in ("append", "extend", "insert", "remove", "clear", "__setitem__"):
        new = list(base)
    elif isinstance(base, dict) and op in ("update", "setdefault", "clear", "__setitem__"):
        new = dict(base)
    elif isinstance(base, set) and op in ("add", "update", "discard", "remove", "clear"):
        new = set(base)
    else:
        return UNKNOWN
    try:
        getattr(new, op)(*args)
    except Exception:
        return UNKNOWN
    try:
        return bounded.check(new)
    except Exception:
        return UNKNOWN


def unpack(target: ast.Tuple, value, env: dict) -> None:
    """``a, b = value``: each name its element where the value is a sequence of that length,
    else unknown (so no name keeps a stale value)."""
    if not _bind(target, value, env):
        for n in astwalk.walk(target):
            if isinstance(n, ast.Name):
                env[n.id] = UNKNOWN


def _bind(target, item, env) -> bool:
    """Bind a ``for`` target (a name, or a tuple of names) to ``item``; False where it cannot."""
    if isinstance(target, ast.Name):
        env[target.id] = item
        return True
    if isinstance(target, ast.Tuple) and isinstance(item, (tuple, list)) and len(item) == len(target.elts):
        return all(_bind(t, i, env) for t, i in zip(target.elts, item))
    return False


def truth_value(x):
    """A function reference is not a truth value: in a test it is unknown."""
    return UNKNOWN if isinstance(x, FuncHandle) else x


def _literal(node):
    try:
        return ast.literal_eval(node)
    except Exception:
        return UNKNOWN


def literal_src(src: str):
    try:
        return ast.literal_eval(src)
    except Exception:
        return UNKNOWN
