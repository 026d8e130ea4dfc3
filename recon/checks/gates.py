"""arch-gate: architecture gates, normalized to a predicate and evaluated for the target device.

A gate is code that asks which GPU it runs on: a function that reads the compute capability
(``def is_sm120(): return torch.cuda.get_device_capability() == (12, 0)``), a callable made by
assignment (``is_sm120_supported = lru_cache(maxsize=1)(partial(_check_cuda_device_version,
device_capability_majors=[12], cuda_version=(12, 8)))``, also alias chains ``a = b = ...``), a
derived function that calls gates, or a platform property looked up through a name -> probe table
(``get_platform().is_sm120``). Each gate's body is evaluated by a tiny interpreter over stdlib
``ast`` (never importing SGLang) with the device's capability, CUDA version and vendor standing in
for the probes; what it cannot know stays ``None``.

Gated sites are ``if`` statements whose test names a gate, a module variable holding a gate's
value (``_is_sm120_supported = is_sm120_supported()``), a platform property, or an inline
capability probe; each is evaluated for the device and for reference devices, and reported when the
device takes a different branch than a reference does (that is where dispatch diverges).

Other checks import :func:`evaluate_gates` (``{qualname: True/False/None}``, cached in
``ctx.cache["gates"]``) and :func:`gate_sites` / :func:`eval_test`.
"""

from __future__ import annotations

import ast
import copy
import functools
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .. import bounded
from ..findings import Evidence, Finding
from . import check

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


def public(v):
    """A value for code outside the interpreter: unknown is None there."""
    return None if v is UNKNOWN else v
_PROBE_TAILS = ("get_device_capability", "get_device_sm", "has_device_capability", "is_device_capability", "device_capability", "device_sm")
_DEFAULT_GATE_NAME = r"^_?(is|has|supports?|use|can|should|check|enable)_\w+$"


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


@dataclass
class Gate:
    qualname: str
    name: str
    path: str
    line: int
    form: str  # "def" | "assignment" | "derived" | "platform-property"
    predicate: str
    names: tuple = ()  # every name the gate is bound to (aliases, platform keys)
    wraps: Optional[str] = None
    kwargs: dict = field(default_factory=dict)


class _Ref:
    """A callable the interpreter met: an in-tree function (qualname) or an outside dotted name."""

    def __init__(self, dotted: str, qual: Optional[str] = None, bound: Any = None):
        self.dotted, self.qual, self.bound = dotted, qual, bound

    @property
    def tail(self) -> str:
        return self.dotted.rsplit(".", 1)[-1]


_SAFE_BUILTINS = {"tuple": tuple, "map": map, "int": int, "list": list, "len": len, "str": str, "any": any, "all": all,
                  "min": min, "max": max, "bool": bool, "float": float, "set": set, "sorted": sorted}
_STR_METHODS = {"split", "startswith", "endswith", "strip", "lower", "upper", "count", "index", "replace"}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
        ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
        ast.Is: operator.is_, ast.IsNot: operator.is_not}
# bounded: the operands are literals of untrusted code (`"a" * 10 ** 9` must not be built)
_BIN = {ast.Add: bounded.ADD, ast.Sub: bounded.SUB, ast.Mult: bounded.MUL, ast.FloorDiv: bounded.FLOORDIV, ast.Mod: bounded.MOD}
STEP_BUDGET = 100_000  # expressions one top-level evaluation may visit (SGLang 0.5.5-0.5.23: at most 1,411, in the runtime view)


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class _OutOfSteps(Exception):
    """The evaluation visited :data:`STEP_BUDGET` expressions: its value is unknown. Calls that
    branch both ways on unknown tests can otherwise grow exponentially with the call depth."""


class Interpreter:
    """Evaluates gate bodies and branch tests for one device. Parses only the files it needs."""

    def __init__(self, tree, dev: Dev, model: "GateModel", depth_limit: int = 6):
        self.tree, self.dev, self.model, self.depth_limit = tree, dev, model, depth_limit
        self.flag_memo: dict[tuple[str, str], Any] = {}  # (module, flag) -> value on this device
        self.memo: dict[str, Any] = {}
        self.touched = False  # did the last evaluation read the device's capability / CUDA version
        self.steps = STEP_BUDGET  # left for the current top-level evaluation

    # --- probes --------------------------------------------------------------------------------
    def _probe(self, tail: str, dotted: str, args: list):
        d = self.dev
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
            return self.gate_value(qual, depth) if g else UNKNOWN
        env: dict[str, Any] = {}
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        if params and params[0] in ("self", "cls"):
            params = params[1:]
        defaults = fn.args.defaults
        for p, dflt in zip(params[len(params) - len(defaults):], defaults):
            env[p] = _literal(dflt)
        for p, v in zip(params, args):
            env[p] = v
        env.update(kwargs)
        mod, scope = self.model.module_scope(qual)
        try:
            self.exec_block(fn.body, env, mod, scope, depth)
        except _Return as r:
            return r.value
        return None if not fn.body else UNKNOWN

    def exec_block(self, stmts, env, mod, scope, depth):
        for st in stmts:
            self._step()
            if isinstance(st, ast.Return):
                raise _Return(self.eval(st.value, env, mod, scope, depth) if st.value is not None else None)
            if isinstance(st, ast.If):
                t = self.eval(st.test, env, mod, scope, depth)
                if t is UNKNOWN:
                    # both ways possible: the result is known only when both agree
                    outs = []
                    for body in (st.body, st.orelse):
                        try:
                            self.exec_block(body, dict(env), mod, scope, depth)
                            outs.append(KeyError)
                        except _Return as r:
                            outs.append(r.value)
                    if outs[0] is not KeyError and outs[0] == outs[1]:
                        raise _Return(outs[0])
                    if KeyError not in outs:
                        raise _Return(UNKNOWN)
                    # one side falls through: what follows is reached only on some paths
                    raise _Return(UNKNOWN)
                self.exec_block(st.body if t else st.orelse, env, mod, scope, depth)
            elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                env[st.targets[0].id] = self.eval(st.value, env, mod, scope, depth)
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                env[st.target.id] = self.eval(st.value, env, mod, scope, depth)
            elif isinstance(st, ast.Try):
                self.exec_block(st.body, env, mod, scope, depth)
            elif isinstance(st, ast.Raise):
                raise _Return(UNKNOWN)
            elif isinstance(st, (ast.Expr, ast.Pass, ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom)):
                continue
            else:
                raise _Return(UNKNOWN)  # loops, with, ...: out of this interpreter's depth

    # --- expressions ---------------------------------------------------------------------------
    def eval(self, node, env, mod, scope, depth=0):
        if depth == 0:
            self.steps = STEP_BUDGET
        try:
            return _value(self._eval(node, env, mod, scope, depth))
        except _Return:
            raise
        except Exception:  # unknown names, bad operands, _OutOfSteps, bounded.TooLarge, recursion
            return UNKNOWN

    def _step(self):
        self.steps -= 1
        if self.steps < 0:
            raise _OutOfSteps()

    def _eval(self, node, env, mod, scope, depth):
        self._step()
        ev = lambda n: _value(self._eval(n, env, mod, scope, depth))  # noqa: E731
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            vals = [ev(e) for e in node.elts]
            return UNKNOWN if any(v is UNKNOWN for v in vals) else (tuple(vals) if isinstance(node, ast.Tuple) else list(vals) if isinstance(node, ast.List) else set(vals))
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in _SAFE_BUILTINS:
                return _SAFE_BUILTINS[node.id]
            return self._name(node.id, mod, scope, depth)
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted == "torch.version.cuda":
                self.touched = True
                return ".".join(map(str, self.dev.cuda)) if self.dev.cuda else None
            if dotted == "torch.version.hip":
                return "6.3" if self.dev.vendor == "amd" else None
            prop = self.model.platform_property(dotted)
            if prop:
                return self.gate_value(prop, depth + 1)
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
            return _Ref(dotted, qual)
        flag = self.model.module_flag(mod, dotted)
        if flag is not None:
            fmod, expr = flag
            key = (fmod, dotted)
            if key not in self.flag_memo:
                self.flag_memo[key] = UNKNOWN  # recursion guard: `_a = _b and x`, `_b = _a or y`
                self.flag_memo[key] = self.eval(expr, {}, fmod, "", depth + 1) if depth < self.depth_limit else UNKNOWN
            return self.flag_memo[key]
        return _Ref(dotted, qual)

    def _call(self, node, env, mod, scope, depth):
        func = node.func
        args = [_value(self._eval(a, env, mod, scope, depth)) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs = {k.arg: _value(self._eval(k.value, env, mod, scope, depth)) for k in node.keywords if k.arg}
        # method on a plain value: "12.8".split(".")
        if isinstance(func, ast.Attribute) and func.attr in _STR_METHODS:
            base = self._eval(func.value, env, mod, scope, depth)
            if isinstance(base, str) and func.attr == "replace":
                return bounded.replace(base, *args, **kwargs)
            if isinstance(base, (str, tuple, list)):
                return getattr(base, func.attr)(*args, **kwargs)
        target = self._eval(func, env, mod, scope, depth)
        if callable(target) and not isinstance(target, _Ref):
            if any(a is UNKNOWN for a in args):
                return UNKNOWN
            out = target(*args, **kwargs)
            return tuple(out) if isinstance(out, map) else out
        if isinstance(target, _Ref):
            probe = self._probe(target.tail, target.dotted, args)
            if probe is not KeyError:
                return probe
            if target.qual:
                return self.call_function(target.qual, args, kwargs, depth + 1)
        return UNKNOWN


def _value(x):
    """A function reference is not a truth value: in a test it is unknown."""
    return UNKNOWN if isinstance(x, _Ref) else x


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if isinstance(node, ast.Call):
        inner = _dotted(node.func)
        if inner:
            parts.append(inner + "()")
            return ".".join(reversed(parts))
    return ""


def _literal(node):
    try:
        return ast.literal_eval(node)
    except Exception:
        return UNKNOWN


def _literal_src(src: str):
    try:
        return ast.literal_eval(src)
    except Exception:
        return UNKNOWN


class GateModel:
    """Where the gates are: definitions, variables holding their values, platform property tables."""

    def __init__(self, tree, params: dict):
        self.tree = tree
        self.G = tree.graph
        self.r = tree.resolver
        self.params = params
        self.gates: dict[str, Gate] = {}
        self.by_name: dict[str, list[str]] = {}  # short name (and aliases) -> gate qualnames
        self.vars: dict[tuple[str, str], str] = {}  # (module, variable) -> gate
        self.platform_keys: dict[str, str] = {}  # platform property name -> gate
        self._asts: dict[str, Any] = tree_memo(tree).setdefault("asts", {})  # parsed once per tree, for every device
        self._facts_by_module: dict[str, Any] = {}
        self._alias_map: dict[str, str] = {}  # alias qualname -> the node the chain defines
        self._flags: dict[tuple[str, str], Any] = {}  # (module, name) -> module_flag's answer
        self._flags_by_module: dict[str, dict] = {}
        self._discover()

    # --- plumbing ------------------------------------------------------------------------------
    def module_scope(self, qual: str) -> tuple[str, str]:
        node = self.G.nodes.get(qual, {})
        q = node.get("qualname")
        if q and qual.endswith("." + q):
            return qual[: -len(q) - 1], q
        return qual.rsplit(".", 1)[0], ""

    def resolve(self, mod: str, scope: str, dotted: str) -> Optional[str]:
        try:
            q = self.r.resolve(mod, scope, dotted)
        except Exception:
            q = None
        if q:
            return self._alias(q)
        # alias chain: `a = b = lru_cache(...)` is one node named b with aliases (a,)
        mod_q = f"{mod}.{dotted}"
        return self._alias(mod_q) if mod_q in self._alias_map else None

    def resolve_in(self, qual: str, dotted: str) -> Optional[str]:
        mod, scope = self.module_scope(qual)
        scope = scope.rsplit(".", 1)[0] if "." in scope else ""
        return self.resolve(mod, scope, dotted)

    def _alias(self, q: str) -> str:
        return self._alias_map.get(q, q)

    def _module_ast(self, path: str):
        if path not in self._asts:
            try:
                self._asts[path] = bounded.parse(self.tree.read_text(path))
            except (SyntaxError, ValueError):
                self._asts[path] = None
        return self._asts[path]

    def function_ast(self, qual: str):
        node = self.G.nodes.get(qual)
        if not node or node.get("kind") != "function" or node.get("defined_by") == "assignment":
            return None
        tree = self._module_ast(node["path"])
        if tree is None:
            return None
        line, name = node["line"], node["name"]
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name:
                first = min([n.lineno] + [d.lineno for d in n.decorator_list])
                if first <= line <= n.lineno:
                    return n
        return None

    def gate_var(self, mod: str, dotted: str) -> Optional[str]:
        g = self.vars.get((mod, dotted))
        if g:
            return g
        f = self._facts(mod)
        if f is not None and "." not in dotted:
            for imp in f.imports:
                if imp.local == dotted and imp.name:
                    return self.vars.get((imp.module, imp.name))
        return None

    def module_flag(self, mod: str, name: str):
        """(module, expression) of a flag a module binds once, at top level, to a call or a test
        (`_is_hip = is_hip()`, `_use_aiter = get_bool_env_var("SGLANG_USE_AITER") and _is_hip`,
        `_is_sm100_supported = is_cuda() and is_sm100_supported()`), followed through a
        `from m import name`; None for a name bound more than once, anywhere but at top level, or to
        anything else. The interpreter evaluates the expression where the name is read, so a flag
        whose gates fail on the device is false whatever the environment variable beside them
        says; a call it cannot follow stays unknown."""
        if "." in name:
            return None
        key = (mod, name)
        if key not in self._flags:
            self._flags[key] = None  # recursion guard for import cycles
            found = self._module_flags(mod).get(name)
            f = self._facts(mod) if found is None else None
            for imp in (f.imports if f is not None else ()):
                if imp.local == name and imp.name and imp.module != mod:
                    found = self.module_flag(imp.module, imp.name)
                    break
            self._flags[key] = found
        return self._flags[key]

    def _module_flags(self, mod: str) -> dict:
        """name -> (mod, value) for every name the module binds exactly once, by a plain top-level
        assignment of a call or a test, and never rebinds (found in one walk of the module)."""
        if mod in self._flags_by_module:
            return self._flags_by_module[mod]
        path = self.G.nodes.get(mod, {}).get("path")
        tree = self._module_ast(path) if path else None
        out: dict = {}
        if tree is not None:
            binds: dict[str, int] = {}
            for n in ast.walk(tree):
                names = ()
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    names = (n.id,)
                elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names = (n.name,)
                elif isinstance(n, (ast.Import, ast.ImportFrom)):
                    names = tuple((a.asname or a.name).split(".")[0] for a in n.names)
                elif isinstance(n, ast.Global):
                    names = tuple(n.names) * 2  # rebound from inside a function: never a flag
                for x in names:
                    binds[x] = binds.get(x, 0) + 1
            for st in tree.body:
                if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
                    continue
                v = st.value
                if binds.get(st.targets[0].id) == 1 and (
                        isinstance(v, (ast.BoolOp, ast.Compare, ast.IfExp, ast.Call))
                        or (isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not))):
                    out[st.targets[0].id] = (mod, v)
        self._flags_by_module[mod] = out
        return out

    def platform_property(self, dotted: str) -> Optional[str]:
        if not self.platform_keys or "." not in dotted:
            return None
        recv, attr = dotted.rsplit(".", 1)
        if attr in self.platform_keys and re.search(self.params.get("platform_receiver", r"platform"), recv, re.I):
            return self.platform_keys[attr]
        return None

    def _facts(self, mod: str):
        if mod not in self._facts_by_module:
            path = self.G.nodes.get(mod, {}).get("path")
            self._facts_by_module[mod] = self.tree.index.facts(path) if path else None
        return self._facts_by_module[mod]

    # --- discovery -----------------------------------------------------------------------------
    def _discover(self) -> None:
        name_re = re.compile(self.params.get("gate_name_pattern", _DEFAULT_GATE_NAME))
        exclude = re.compile(self.params.get("exclude_paths", r"(^|/)(tests?|benchmark|bench)(/|_)"))
        alias_map: dict[str, str] = {}
        probe_scopes: set[str] = set()  # functions that call a capability probe themselves
        assigned: list = []  # callable assignments
        module_calls: list = []  # (module, target var, callee dotted, line, path)
        table_files: list = []
        for f in self.tree.index.py_facts():
            if not f.module or exclude.search(f.path):
                continue
            for c in f.calls:
                tail = c.func.replace("()", "").rsplit(".", 1)[-1]
                if tail in _PROBE_TAILS and c.scope:
                    probe_scopes.add(f"{f.module}.{c.scope}")
            for d in f.defs:
                if d.kind == "callable_assign":
                    assigned.append((f, d))
                    for a in d.aliases:
                        alias_map[f"{f.module}.{a}"] = f"{f.module}.{d.qualname}"
            for a in f.assigns:
                if a.scope == "" and a.value_kind == "call":
                    module_calls.append((f.module, a.target, a.value, a.line, f.path))
            if any(re.fullmatch(r"is_sm\d+\w*|is_blackwell\w*|is_hopper\w*", s[1] or "") for s in f.strings):
                table_files.append(f)
        self._alias_map = alias_map

        def add(q, form, predicate="", wraps=None, kwargs=None):
            node = self.G.nodes[q]
            names = (node["name"],) + tuple(node.get("aliases", ()))
            g = Gate(q, node["name"], node["path"], node["line"], form, predicate, names, wraps, kwargs or {})
            self.gates[q] = g
            for n in names:
                self.by_name.setdefault(n, []).append(q)

        # 1. functions that read the capability themselves and take no required arguments
        for q in sorted(probe_scopes):
            node = self.G.nodes.get(q)
            if not node or node.get("kind") != "function" or not name_re.match(node["name"]):
                continue
            fn = self.function_ast(q)
            if fn is None or _required_params(fn):
                continue
            add(q, "def", _predicate_of(fn))
        # 2. callables made by assignment that wrap a probe-reading helper (partial binds its args)
        for f, d in assigned:
            q = f"{f.module}.{d.qualname}"
            scope = d.qualname.rsplit(".", 1)[0] if "." in d.qualname else ""
            target = self.resolve(f.module, scope, d.wraps) if d.wraps else None
            if target and (target in probe_scopes or target in self.gates) and q in self.G:
                kwargs = {k: _literal_src(v) for k, v in d.wrap_kwargs}
                fn = self.function_ast(target)
                pred = _predicate_of(fn, kwargs) if fn is not None else f"{d.wraps}()"
                add(q, "assignment", pred, wraps=d.wraps, kwargs=kwargs)
        # 3. derived gates: gate-named functions without required arguments that call a gate
        for _ in range(2):
            for gq in list(self.gates):
                for src, _dst, ed in self.G.in_edges(gq, data=True):
                    if ed.get("kind") != "calls" or src in self.gates:
                        continue
                    node = self.G.nodes.get(src, {})
                    if node.get("kind") != "function" or not name_re.match(node.get("name", "")) or exclude.search(node.get("path", "")):
                        continue
                    fn = self.function_ast(src)
                    if fn is None or _required_params(fn) or len(fn.body) > 12:
                        continue
                    add(src, "derived", _predicate_of(fn))
        # 4. module variables holding a gate's value: `_is_sm120_supported = is_sm120_supported()`
        for mod, var, value, line, path in module_calls:
            callee = value[:-2] if value.endswith("()") else None
            if callee:
                g = self.resolve(mod, "", callee)
                if g in self.gates:
                    self.vars[(mod, var)] = g
        # 5. platform property tables: {"is_sm120": "is_sm120_supported", ...} read by __getattr__
        for f in table_files:
            self._tables(f)

    def _tables(self, f) -> None:
        try:
            tree = bounded.parse(self.tree.read_text(f.path))
        except (SyntaxError, ValueError):
            return
        for st in tree.body:
            value = getattr(st, "value", None)
            if not isinstance(value, ast.Dict):
                continue
            pairs = [(k.value, v.value) for k, v in zip(value.keys, value.values)
                     if isinstance(k, ast.Constant) and isinstance(v, ast.Constant) and isinstance(k.value, str) and isinstance(v.value, str)]
            hits = {k: self.resolve(f.module, "", v) or self._gate_named(v) for k, v in pairs}
            hits = {k: g for k, g in hits.items() if g in self.gates}
            if len(hits) >= 2:
                for k, g in hits.items():
                    self.platform_keys.setdefault(k, g)
                    if k not in self.by_name:
                        self.by_name.setdefault(k, []).append(g)

    def _gate_named(self, name: str) -> Optional[str]:
        qs = [q for q in self.by_name.get(name, ()) if self.gates[q].form != "platform-property"]
        return sorted(qs)[0] if qs else None


def _required_params(fn) -> list[str]:
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    required = params[: len(params) - len(fn.args.defaults)]
    return [p for p in required if p not in ("device", "device_id")]


class _Subst(ast.NodeTransformer):
    def __init__(self, values: dict):
        self.values = values

    def visit_Name(self, node):
        if node.id in self.values and self.values[node.id] is not UNKNOWN:
            return ast.parse(repr(self.values[node.id]), mode="eval").body
        return node


def _predicate_of(fn, kwargs: Optional[dict] = None) -> str:
    """The gate's condition as one expression: its early returns folded into the final return
    (`if t: return False` -> `not t and ...`, `if t: return True` -> `t or ...`, `if t: return v`
    -> `v if t else ...`)."""
    expr = _returns_folded(fn.body)
    if expr is None:
        return f"{fn.name}()"
    if kwargs:
        expr = _Subst(kwargs).visit(copy.deepcopy(expr))  # never edit the cached tree the interpreter runs
    return re.sub(r"\s+", " ", ast.unparse(expr))


def _returns_folded(stmts):
    for i, st in enumerate(stmts):
        if (isinstance(st, ast.If) and len(st.body) == 1 and isinstance(st.body[0], ast.Return)
                and st.body[0].value is not None and not st.orelse):
            rest = _returns_folded(stmts[i + 1:])
            if rest is None:
                return None
            rv = st.body[0].value
            if isinstance(rv, ast.Constant) and isinstance(rv.value, bool):
                if rv.value:
                    op, head = ast.Or(), st.test
                elif isinstance(st.test, ast.UnaryOp) and isinstance(st.test.op, ast.Not):
                    op, head = ast.And(), st.test.operand
                else:
                    op, head = ast.And(), ast.UnaryOp(ast.Not(), st.test)
                # guards fold into one chain; the final return stays one operand, as written
                tail = rest.values if getattr(rest, "folded", False) and type(rest.op) is type(op) else [rest]
                out = ast.BoolOp(op, [head, *tail])
                out.folded = True
                return out
            return ast.IfExp(st.test, rv, rest)
        if isinstance(st, ast.Return) and st.value is not None:
            return st.value
    return None


# --- the shared evaluation ----------------------------------------------------------------------


def _model(ctx, params: Optional[dict] = None) -> GateModel:
    m = ctx.cache.get("gate_model")
    if m is None:
        # device-independent: one per tree (and params) for the life of the process
        models = tree_memo(ctx.tree).setdefault("gate_models", {})
        key = repr(sorted((params or {}).items()))
        m = models.get(key)
        if m is None:
            m = models[key] = GateModel(ctx.tree, params or {})
        ctx.cache["gate_model"] = m
    return m


def interpreter(ctx, device=None) -> Interpreter:
    """The interpreter for ``device`` (default: the context's), cached per device."""
    device = device or ctx.device
    key = ("gate_interp", device.name)
    it = ctx.cache.get(key)
    if it is None:
        it = ctx.cache[key] = Interpreter(ctx.tree, Dev.of(device), _model(ctx))
    return it


def evaluate_gates(ctx, params: Optional[dict] = None) -> dict:
    """``{gate qualname: True/False/None}`` for ``ctx.device``; cached in ``ctx.cache["gates"]``."""
    if "gates" in ctx.cache:
        return ctx.cache["gates"]
    model = _model(ctx, params)
    it = interpreter(ctx)
    out = {q: public(it.gate_value(q)) for q in sorted(model.gates)}
    ctx.cache["gates"] = out
    return out


def eval_test(ctx, path: str, module: str, scope: str, test_src: str, device=None):
    """Evaluate an ``if`` test's source in its module/scope for a device: True/False/None."""
    try:
        node = bounded.parse(test_src.strip(), mode="eval").body
    except SyntaxError:
        return UNKNOWN
    it = interpreter(ctx, device)
    return public(it.eval(node, {}, module, scope))


def branch_gates(ctx, module: str, scope: str, names) -> list[str]:
    """The gates an ``if`` test refers to (by the names its facts recorded), or 'inline' probes."""
    model = _model(ctx)
    out = []
    for n in names:
        bare = n[:-2] if n.endswith("()") else n
        g = model.gate_var(module, bare) or model.platform_property(bare)
        if not g:
            q = model.resolve(module, scope, bare)
            g = q if q in model.gates else None
        if not g and bare.rsplit(".", 1)[-1] in model.by_name and re.search(r"platform", bare, re.I):
            g = sorted(model.by_name[bare.rsplit(".", 1)[-1]])[0]
        if not g and bare.rsplit(".", 1)[-1] in _PROBE_TAILS:
            g = "<inline>." + bare.rsplit(".", 1)[-1]
        if g and g not in out:
            out.append(g)
    return out


def gate_sites(ctx, path_pattern: str) -> list[dict]:
    """Every ``if`` under ``path_pattern`` that refers to a gate, with its value on the device."""
    key = ("gate_sites", path_pattern)
    if key in ctx.cache:
        return ctx.cache[key]
    rx = re.compile(path_pattern)
    out = []
    for path in sorted(p for p in ctx.tree.index.files if p.endswith(".py") and rx.search(p)):
        f = ctx.tree.index.facts(path)
        if f is None or f.error or not f.module:
            continue
        for b in f.branches:
            gs = branch_gates(ctx, f.module, b.scope, b.names)
            if gs:
                out.append({"path": path, "module": f.module, "scope": b.scope, "branch": b, "gates": gs,
                            "value": eval_test(ctx, path, f.module, b.scope, b.test), "facts": f})
    ctx.cache[key] = out
    return out


def _cite_line(ctx, path: str, start: int, end: int, words) -> int:
    """The first line in [start, end] that holds one of ``words`` (a test may span lines)."""
    lines = ctx.tree.lines(path)
    for ln in range(start, min(end, len(lines)) + 1):
        if any(w and w in lines[ln - 1] for w in words):
            return ln
    return start


# --- the check ----------------------------------------------------------------------------------


@check("arch_gate")
def arch_gate(ctx, rule) -> list[Finding]:
    from ..profiles import load_device

    params = rule.params or {}
    model = _model(ctx, params)
    values = evaluate_gates(ctx, params)
    devices = []
    for spec in params.get("truth_table_devices", []):
        try:
            devices.append(load_device(spec))
        except Exception:
            continue
    findings: list[Finding] = []
    dev = ctx.device
    seen: dict[tuple, list] = {}
    for q, g in sorted(model.gates.items()):  # an alias chain is one statement: report it once
        seen.setdefault((g.path, g.line), []).append(q)
    for key, qs in sorted(seen.items()):
        q = qs[0]
        g = model.gates[q]
        v = values.get(q)
        known = [d for d in devices if public(interpreter(ctx, d).gate_value(q)) is not None]
        if v is None and not known and not params.get("report_unknown_gates", False):
            continue  # depends on things other than the device (server args, imports): not an arch gate here
        true_on = sorted(d.short for d in devices if interpreter(ctx, d).gate_value(q))
        vs = {True: "true", False: "false", None: "unknown"}[v]
        names = sorted({n for x in qs for n in model.gates[x].names} - {g.name})
        alias = f" (also {', '.join(names)})" if names else ""
        how = {"assignment": f"defined by assignment wrapping {g.wraps}", "def": "defined by def", "derived": "derived from other gates"}.get(g.form, g.form)
        msg = f"{g.name}{alias} is {vs} on {dev.name} ({dev.sm}): {how}; predicate: {g.predicate}"
        findings.append(Finding(rule.id, msg, rule.severity, [Evidence(g.path, g.line, None, f"gate {g.name} defined here", ctx.snippet(g.path, g.line))],
                                {"gate": g.name, "qualname": q, "value": v, "predicate": g.predicate, "form": g.form,
                                 "aliases": names, "true_on": true_on, "wraps": g.wraps, "kwargs": g.kwargs}))
    # gated sites where this device's branch differs from a reference device's
    refs = []
    for spec in params.get("reference_devices", ["h200"]):
        try:
            d = load_device(spec)
        except Exception:
            continue
        if d.name != dev.name:
            refs.append(d)
    limit = int(params.get("max_sites", 150))
    sites = gate_sites(ctx, params.get("site_paths", r"sglang/srt/(layers|model_executor|models)/"))
    n = 0
    for s in sites:
        b, v = s["branch"], s["value"]
        if v is None:
            continue
        ref_vals = {d.short: eval_test(ctx, s["path"], s["module"], s["scope"], b.test, d) for d in refs}
        differs = [k for k, rv in ref_vals.items() if rv is not None and rv != v]
        if not differs:
            continue
        n += 1
        if n > limit:
            break
        names = [q.rsplit(".", 1)[-1] for q in s["gates"]]
        taken = (b.line + 1, b.body_end) if v else ((b.else_line, b.end_line) if b.else_line else None)
        calls = []
        if taken:
            for c in s["facts"].calls:
                if c.scope == b.scope and taken[0] <= c.line <= taken[1]:
                    calls.append(c)
        where = f"{s['module']}.{b.scope}" if b.scope else s["module"]
        taken_txt = "the if-body" if v else ("the else-branch" if b.else_line else "neither body (the if-body is skipped)")
        called = sorted({c.func for c in calls})[:6]
        patches = [c for c in calls if re.search(params.get("patch_pattern", r"patch|tun(e|ing)|override"), c.func, re.I)]
        msg = (f"in {where}: `if {b.test}` is {str(v).lower()} on {dev.short} ({', '.join(f'{k}: {str(ref_vals[k]).lower()}' for k in differs)}), "
               f"so it takes {taken_txt}" + (f", which calls {', '.join(called)}" if called else ""))
        if patches:
            msg += f"; applies tuning patch {', '.join(sorted({p.func for p in patches}))} on this device"
        cite = _cite_line(ctx, s["path"], b.line, max(b.line, b.body_end), [n.split(".")[-1] for n in b.names] + names)
        ev = [Evidence(s["path"], cite, None, f"gated by {', '.join(names)}", ctx.snippet(s["path"], cite))]
        for c in (patches or calls)[:3]:
            ev.append(Evidence(s["path"], c.line, c.end_line, f"runs on {dev.short}: {c.func}", ctx.snippet(s["path"], c.line)))
        findings.append(Finding(rule.id, msg, rule.severity, ev, {
            "site": where, "gates": names, "test": b.test, "value": v, "reference": ref_vals,
            "taken": list(taken) if taken else None, "calls": called, "patches": sorted({p.func for p in patches})}))
    return findings
