"""Where the gates are, and the evaluation services checks, the runtime view, ``spec`` and
``apply`` share: gate definitions (functions that read the capability, callables made by
assignment, derived gates), module variables holding their values, platform property tables;
:func:`evaluate_gates`, :func:`eval_test`, :func:`gate_sites` for a device.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .. import bounded
from .asts import functions_named, module_ast
from .interp import PROBE_TAILS, UNKNOWN, Dev, Interpreter, literal_src, public, tree_memo
from .. import astwalk

@dataclass(frozen=True)
class GateDiscovery:
    """What counts as a gate: the names a gate function may have, the paths never searched, and
    the receiver a platform property is read on. One gate model per tree and setting; every
    service here uses the defaults unless a caller (the arch-gate rule) passes its own."""

    gate_name_pattern: str = r"^_?(is|has|supports?|use|can|should|check|enable)_\w+$"
    exclude_paths: str = r"(^|/)(tests?|benchmark|bench)(/|_)"
    platform_receiver: str = r"platform"


DEFAULT_DISCOVERY = GateDiscovery()


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



_MUTATORS = frozenset({"append", "extend", "add", "update", "insert", "remove", "discard", "pop", "clear", "setdefault"})


class GateModel:
    """Where the gates are: definitions, variables holding their values, platform property tables."""

    def __init__(self, tree, discovery: GateDiscovery = DEFAULT_DISCOVERY):
        self.tree = tree
        self.G = tree.graph
        self.r = tree.resolver
        self.discovery = discovery
        self.gates: dict[str, Gate] = {}
        self.by_name: dict[str, list[str]] = {}  # short name (and aliases) -> gate qualnames
        self.vars: dict[tuple[str, str], str] = {}  # (module, variable) -> gate
        self.platform_keys: dict[str, str] = {}  # platform property name -> gate
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
        return module_ast(self.tree, path)

    def function_ast(self, qual: str):
        node = self.G.nodes.get(qual)
        if not node or node.get("kind") != "function" or node.get("defined_by") == "assignment":
            return None
        tree = self._module_ast(node["path"])
        if tree is None:
            return None
        line = node["line"]
        for n in functions_named(tree, node["name"]):
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
            mutated: set = set()  # NAME.append(...), NAME[k] = v: a container filled at import time
            for n in astwalk.walk(tree):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.attr in _MUTATORS:
                    mutated.add(n.value.id)
                elif isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                    mutated.add(n.value.id)
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
            for st in _top_level_binds(tree.body):
                v = st.value
                if binds.get(st.targets[0].id) == 1 and (
                        isinstance(v, (ast.BoolOp, ast.Compare, ast.IfExp, ast.Call, ast.Tuple, ast.Constant))
                        or (isinstance(v, (ast.List, ast.Set)) and st.targets[0].id not in mutated)
                        or (isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not))):
                    out[st.targets[0].id] = (mod, v)
        self._flags_by_module[mod] = out
        return out

    def platform_property(self, dotted: str) -> Optional[str]:
        if not self.platform_keys or "." not in dotted:
            return None
        recv, attr = dotted.rsplit(".", 1)
        if attr in self.platform_keys and re.search(self.discovery.platform_receiver, recv, re.I):
            return self.platform_keys[attr]
        return None

    def _facts(self, mod: str):
        if mod not in self._facts_by_module:
            path = self.G.nodes.get(mod, {}).get("path")
            self._facts_by_module[mod] = self.tree.index.facts(path) if path else None
        return self._facts_by_module[mod]

    # --- discovery -----------------------------------------------------------------------------
    def _discover(self) -> None:
        name_re = re.compile(self.discovery.gate_name_pattern)
        exclude = re.compile(self.discovery.exclude_paths)
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
                if tail in PROBE_TAILS and c.scope:
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
                kwargs = {k: literal_src(v) for k, v in d.wrap_kwargs}
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
            found = {k: self.resolve(f.module, "", v) or self._gate_named(v) for k, v in pairs}
            hits = {k: g for k, g in found.items() if g in self.gates}
            if len(hits) >= 2:
                for k, g in hits.items():
                    self.platform_keys.setdefault(k, g)
                    if k not in self.by_name:
                        self.by_name.setdefault(k, []).append(g)
                # the table's other probes name in-tree functions that are no arch gate
                # (``has_flashinfer`` -> ``is_flashinfer_available``), looked up where the table's
                # gates live (its reader does ``getattr(common, probe)()``)
                homes = {g.rsplit(".", 1)[0] for g in hits.values()}
                for k, v in pairs:
                    q = found.get(k) or (f"{next(iter(homes))}.{v}" if len(homes) == 1 else None)
                    if q and k not in hits and self.G.nodes.get(q, {}).get("kind") == "function":
                        self.platform_keys.setdefault(k, q)

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


def gate_model(ctx, discovery: Optional[GateDiscovery] = None) -> GateModel:
    """The gate model for ``discovery`` (default: :data:`DEFAULT_DISCOVERY`): device-independent,
    so one per tree and setting for the life of the process. Keyed by the setting, so what a rule
    sees never depends on which rule happened to ask first."""
    discovery = discovery or DEFAULT_DISCOVERY
    key = ("gate_model", discovery)
    m = ctx.cache.get(key)
    if m is None:
        models = tree_memo(ctx.tree).setdefault("gate_models", {})
        m = models.get(discovery)
        if m is None:
            m = models[discovery] = GateModel(ctx.tree, discovery)
        ctx.cache[key] = m
    return m


def interpreter(ctx, device=None, discovery: Optional[GateDiscovery] = None) -> Interpreter:
    """The interpreter for ``device`` (default: the context's), cached per device and gate model."""
    device = device or ctx.device
    discovery = discovery or DEFAULT_DISCOVERY
    key = ("gate_interp", device.name, discovery)
    it = ctx.cache.get(key)
    if it is None:
        it = ctx.cache[key] = Interpreter(ctx.tree, Dev.of(device), gate_model(ctx, discovery))
    return it


def evaluate_gates(ctx, discovery: Optional[GateDiscovery] = None) -> dict:
    """``{gate qualname: True/False/None}`` for ``ctx.device``; cached in ``ctx.cache``."""
    discovery = discovery or DEFAULT_DISCOVERY
    key = ("gates", discovery)
    if key in ctx.cache:
        return ctx.cache[key]
    model = gate_model(ctx, discovery)
    it = interpreter(ctx, None, discovery)
    out = {q: public(it.gate_value(q)) for q in sorted(model.gates)}
    ctx.cache[key] = out
    return out


def eval_test(ctx, path: str, module: str, scope: str, test_src: str, device=None, discovery: Optional[GateDiscovery] = None):
    """Evaluate an ``if`` test's source in its module/scope for a device: True/False/None."""
    try:
        node = bounded.parse(test_src.strip(), mode="eval").body
    except SyntaxError:
        return UNKNOWN
    it = interpreter(ctx, device, discovery)
    return public(it.eval(node, {}, module, scope))


def branch_gates(ctx, module: str, scope: str, names, discovery: Optional[GateDiscovery] = None) -> list[str]:
    """The gates an ``if`` test refers to (by the names its facts recorded), or 'inline' probes."""
    model = gate_model(ctx, discovery)
    out = []
    for n in names:
        bare = n[:-2] if n.endswith("()") else n
        g = model.gate_var(module, bare) or model.platform_property(bare)
        if g not in model.gates:  # a table entry that is no arch gate (has_flashinfer)
            g = None
        if not g:
            q = model.resolve(module, scope, bare)
            g = q if q in model.gates else None
        if not g and bare.rsplit(".", 1)[-1] in model.by_name and re.search(r"platform", bare, re.I):
            g = sorted(model.by_name[bare.rsplit(".", 1)[-1]])[0]
        if not g and bare.rsplit(".", 1)[-1] in PROBE_TAILS:
            g = "<inline>." + bare.rsplit(".", 1)[-1]
        if g and g not in out:
            out.append(g)
    return out


def gate_sites(ctx, path_pattern: str, discovery: Optional[GateDiscovery] = None) -> list[dict]:
    """Every ``if`` under ``path_pattern`` that refers to a gate, with its value on the device."""
    key = ("gate_sites", path_pattern, discovery or DEFAULT_DISCOVERY)
    if key in ctx.cache:
        return ctx.cache[key]
    rx = re.compile(path_pattern)
    out = []
    for path in sorted(p for p in ctx.tree.index.files if p.endswith(".py") and rx.search(p)):
        f = ctx.tree.index.facts(path)
        if f is None or f.error or not f.module:
            continue
        for b in f.branches:
            gs = branch_gates(ctx, f.module, b.scope, b.names, discovery)
            if gs:
                out.append({"path": path, "module": f.module, "scope": b.scope, "branch": b, "gates": gs,
                            "value": eval_test(ctx, path, f.module, b.scope, b.test, None, discovery), "facts": f})
    ctx.cache[key] = out
    return out


def _top_level_binds(body):
    """The module's top-level single-name assignments, and those of a top-level ``if`` with no else
    (``if _is_cuda: CUDA_CAPABILITY = torch.cuda.get_device_capability()``) as the conditional
    value ``value if test else <unbound>``: read where the test is false, the name is unknown."""
    for st in body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            yield st
        elif isinstance(st, ast.If) and not st.orelse:
            for sub in st.body:
                if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name):
                    cond = ast.IfExp(test=st.test, body=sub.value, orelse=ast.Name(id="__recon_unbound__", ctx=ast.Load()))
                    yield ast.Assign(targets=sub.targets, value=ast.copy_location(cond, sub.value), lineno=sub.lineno)
