"""What runs for a MoE layer: SGLang's quant-method registry, the config class's
``get_quant_method`` evaluated for the MoE layer, and the chain from that method's ``apply`` to the
kernels or library ops that do the work.

1. The checkpoint's quant method (``--quantization`` if resolved, else ``quantization_config``'s
   ``quant_method``) is looked up in the tree's own registry: the module-level dicts (and their
   ``.update({...})`` calls) under ``layers/quantization`` that map strings to config classes.
2. An instance of that class is built the way the loader builds it: its attributes are read from
   the writes its class makes, and from the loader's writes to it (``quant_config.is_fp4_experts =
   model_config.is_fp4_experts`` under ``isinstance(quant_config, Fp8Config)``).
3. ``get_quant_method(layer, prefix)`` is explored with ``layer`` an instance of the MoE layer
   class: every return it can reach, each with the undecided tests that lead there.
4. From the chosen method's ``apply``: calls whose guards hold on the device (or may), followed
   into in-tree functions a few hops deep, through held objects (``self.runner.run``) and through
   decorator registries keyed by the constant the held object was built with
   (``@register_fused_func("none", "flashinfer_mxfp4")``), to Triton kernels, native ops and
   library calls (FlashInfer, DeepGEMM, ``sgl_kernel``, ``triton_kernels``).
"""

from __future__ import annotations

import ast
import copy
import re
import sys
from dataclasses import dataclass, field
from typing import Optional

from ..engine.interp import UNKNOWN
from ..names import dotted_name, last
from ..engine.handoffs import guarded_calls, raising_guards
from ..engine.asts import if_statements, single_assignments, source_line as _src
from ..engine.registries import custom_op_impl, registrations
from ..engine.steptensors import EntryArgs, StepTensor, bundle_args, entry_tensors, premise_note, rebound, truth
from ..engine.values import MISSING, ClassRef, EnumVal, ExtRef, FuncRef, Instance, LayerObj
from .. import astwalk

# packages whose calls are not the work itself (the standard library is never a kernel either)
_NOT_KERNELS = frozenset(sys.stdlib_module_names) | {"torch", "numpy", "triton", "einops", "tvm_ffi", "sailify", "packaging", "psutil"}
_JIT = re.compile(r"(^|/)(jit_kernel|jit)/")
MAX_DEPTH = 10


@dataclass
class Hop:
    what: str
    path: str
    line: int
    node: Optional[str] = None
    when: tuple = ()  # undecided tests this hop needs


@dataclass
class Leaf:
    kind: str  # "triton_kernel" | "native_op" | "library"
    name: str  # qualname or dotted library name
    path: str  # call site
    line: int
    via: list = field(default_factory=list)  # hops from apply to the call site
    when: tuple = ()
    # every other set of undecided tests (each as ``_cond`` text) under which the walk reached this
    # same site: a site reached under a test and under its negation runs either way
    ways: set = field(default_factory=set)

    @property
    def primary(self) -> bool:
        """On the path taken when every undecided test is false (the evaluator's ordering rule: the
        first outcome listed, not a claim that it runs; :attr:`decided` says that)."""
        return all(not holds for _, holds in self.when)

    @property
    def decided(self) -> bool:
        """Reached with every test on the way decided by the engine, or under each outcome of the
        tests it could not decide: it runs whichever way those go."""
        return not self.when or () in merge_ways(self.ways | {way_of(self.when)})


def _undecided(v) -> bool:
    """A test's value the walk cannot take a branch on: unknown, or not a plain constant (an object,
    an enum member: its truth is not what the code compares)."""
    return v is UNKNOWN or not isinstance(v, (bool, int, float, str, type(None))) or isinstance(v, EnumVal)


def cond_text(test: str, holds: bool) -> str:
    """One undecided test in the sense a way takes it: ``t`` or ``not t``."""
    return test if holds else f"not ({test})" if " " in test else f"not {test}"


def way_of(when) -> tuple:
    """A way in: the sorted texts of the undecided tests it takes, in the sense it takes them."""
    return tuple(sorted({cond_text(t, h) for t, h in when}))


def _negation(c: str) -> str:
    if c.startswith("not (") and c.endswith(")"):
        return c[5:-1]
    if c.startswith("not ") and " " not in c[4:]:
        return c[4:]
    return cond_text(c, False)


def merge_ways(ways) -> set:
    """The ways in, closed under resolution: two ways that differ only in the sense of one test
    (``{a, t}`` and ``{a, not t}``) give the way without it (``{a}``): the site is reached whichever
    way ``t`` goes. ``()`` among the result: reached whatever the undecided tests are."""
    got = {tuple(sorted(set(w))) for w in ways}
    for _ in range(8):  # a few tests on a path: a handful of rounds reach the fixed point
        new = set(got)
        for a in got:
            sa = set(a)
            for c in a:
                other = tuple(sorted((sa - {c}) | {_negation(c)}))
                if other in got:
                    new.add(tuple(sorted(sa - {c})))
        if new == got:
            break
        got = new
    return got


def registry(world) -> dict:
    """quant method name -> (config class, path, line) from the tree's own registry dicts."""
    from ..engine.asts import tree_memo
    memo = tree_memo(world.tree)
    if "qreg" in memo:
        return memo["qreg"]
    out: dict = {}
    G, R = world.G, world.R
    mods = sorted((n, d["path"]) for n, d in G.nodes(data=True) if d.get("kind") == "module"
                  and ".layers.quantization" in n and n.count(".") <= 4 and "srt" in n)
    for mod, path in mods:
        tree = world.module_ast(path, keep=False)  # names and lines are kept, not the file
        if tree is None:
            continue
        dicts = []
        for st in tree.body:
            for n in astwalk.walk(st):
                if isinstance(n, ast.Dict):
                    dicts.append(n)
        for d in dicts:
            for k, v in zip(d.keys, d.values):
                if not (isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, (ast.Name, ast.Attribute))):
                    continue
                q = R.resolve(mod, "", ast.unparse(v))
                if q and G.nodes.get(q, {}).get("kind") == "class" and world.method(q, "get_quant_method"):
                    out.setdefault(k.value, (q, path, k.lineno))
    memo["qreg"] = out
    return out


def moe_layer(world) -> Optional[LayerObj]:
    G = world.G
    cands = sorted(n for n, d in G.nodes(data=True) if d.get("kind") == "class" and d.get("name") == "FusedMoE"
                   and "/layers/moe/" in d.get("path", ""))
    if not cands:
        return None
    cls = sorted(cands, key=lambda c: ("fused_moe_triton" not in c, c))[0]
    return LayerObj(cls, frozenset(world.mro(cls)))


def quant_method_name(world, state) -> tuple[Optional[str], str]:
    q = state.get("quantization") if state is not None else None
    if isinstance(q, str) and q and not q.startswith("<"):
        return q, "--quantization" if "quantization" in state.values else "server_args.quantization"
    qc = world.hf.attr("quantization_config")
    if isinstance(qc, dict) and qc.get("quant_method"):
        return str(qc["quant_method"]), "config.json quantization_config.quant_method"
    return None, "config.json has no quantization_config"


def quant_methods(world, ev, prefix: Optional[str] = None) -> dict:
    """Config class and every MoE method ``get_quant_method`` can return, primary first.
    ``prefix``: the named layer asked for (``model.layers.3.mlp.experts``), so that a config that
    chooses per layer name (ignored layers, per-layer schemes) is followed; None: any MoE layer."""
    name, source = quant_method_name(world, world.state)
    out = {"quant_method": name, "source": source, "config_class": None, "registry_site": None, "outcomes": [], "note": ""}
    layer = moe_layer(world)
    if name is None:
        out["outcomes"] = unquantized_outcomes(world, ev, layer) if layer is not None else []
        if not out["outcomes"]:
            out["note"] = "the checkpoint is not quantized, and the MoE layer's own choice of method could not be read"
        return out
    reg = registry(world).get(name)
    if reg is None:
        out["note"] = f"quant method {name!r} is not in this tree's quantization registry"
        return out
    cls, path, line = reg
    out.update(config_class=cls, registry_site={"path": path, "line": line})
    gqm = world.method(cls, "get_quant_method")
    fn = ev.model.function_ast(gqm) if gqm else None
    if fn is None or layer is None:
        out["note"] = "get_quant_method could not be read"
        return out
    inst = from_config(world, ev, cls) or Instance(cls)
    params = [a.arg for a in fn.args.args]
    env = {params[0]: inst}
    if len(params) > 1:
        env[params[1]] = layer
    if len(params) > 2 and prefix is not None:
        env[params[2]] = prefix
    mod, scope = ev.model.module_scope(gqm)
    gpath = world.path_of(gqm)
    before = world.guesses
    outcomes = ev.explore(fn.body, env, mod, scope, gpath)
    # values inside that the primary rule chose (a test's other way gives another): not decided
    out["guesses"] = world.guesses - before
    rets = {n.lineno: n.value for n in astwalk.walk(fn) if isinstance(n, ast.Return) and n.value is not None}
    for o in sorted(outcomes, key=lambda o: sum(1 for a in o.assumptions if a[1])):
        v = o.value
        method = v.cls if isinstance(v, Instance) else v.qual if isinstance(v, ClassRef) else None
        if method is None and not o.raises and isinstance(rets.get(o.line), ast.Call):
            # `return Helper.pick(self, layer, prefix)`: the methods the helper builds, each with
            # the tests on its way (a quant config that delegates the choice to another function)
            followed = _returned_call(ev, rets[o.line], o, mod, scope)
            if followed:
                out["outcomes"] += followed
                continue
        out["outcomes"].append({
            "method": method, "value": None if method else repr(v), "raises": o.raises,
            "path": gpath, "line": o.line,
            "assumptions": [{"test": a[0], "holds": a[1], "path": a[2], "line": a[3]} for a in o.assumptions],
            "instance": v if isinstance(v, Instance) else None,
        })
    out["outcomes"].sort(key=lambda o: sum(1 for a in o["assumptions"] if a["holds"]))
    return out


def _returned_call(ev, call, o, mod: str, scope: str) -> list:
    """Outcomes of ``get_quant_method`` for a returned call to an in-tree function: the classes
    that function constructs (``runtime.dispatch.choices``), the arguments it is called with bound."""
    from ..engine.dispatch import bind_args, choices

    target = ev.model.resolve(mod, scope, dotted_name(call.func)) if dotted_name(call.func) else None
    inner = ev.model.function_ast(target) if target and ev.model.G.nodes.get(target, {}).get("kind") == "function" else None
    if inner is None:
        return []
    bound = bind_args(ev, inner, call, o.env, mod, scope)
    out = []
    for c in choices(ev, target, bound, tuple(o.assumptions), 1):
        if not c.constructs:
            continue
        where = c.hops[-1] if c.hops else ("", None, None)
        out.append({"method": c.qual, "value": None, "raises": False, "path": where[1], "line": where[2],
                    "assumptions": [{"test": a[0], "holds": a[1], "path": a[2], "line": a[3]} for a in c.assumptions],
                    "instance": c.made})
    return out


def unquantized_outcomes(world, ev, layer) -> list:
    """Without a quant config the MoE layer picks its method itself: each ``self.quant_method =
    Cls(...)`` write of the layer class, its tests evaluated with ``quant_config`` None. Writes a
    test rules out are dropped; the rest are ranked by how many undecided tests they need true."""
    ranked = []
    for w in world.class_writes(layer.cls, "quant_method"):
        if w.receiver != "self" or not isinstance(w.value, ast.Call):
            continue
        env = world.write_env(w, layer, ev, {"quant_config": None})
        # `self.quant_method` read in the write's own tests is what the function set before it
        # (`self.quant_method = quant_method`, the constructor's argument), not the write's result
        guards = w.guards
        before = _attr_before(world, ev, layer, w, "quant_method")
        if before is not MISSING:
            env["__before__"] = before
            guards = tuple((_read_as(t, "self", "quant_method", "__before__"), want) for t, want in w.guards)
        cls = ev._class_of_ref(ev._eval_raw(w.value.func, env, w.module, w.scope))
        if not cls or world.method(cls, "apply") is None:
            continue  # not a quant method (apply is what the layer calls)
        needs, out_ = [], False
        for t, want in guards:
            v = ev.eval(t, env, w.module, w.scope)
            if v is UNKNOWN:
                needs.append((_src(t), want, w.path, w.line))
            elif bool(v) != want:
                out_ = True
                break
        if out_:
            continue
        inst = Instance(cls)
        world.bind_init(inst, w.value, ev, env, w.module, w.scope, 0)
        ranked.append((sum(1 for a in needs if a[1]), -w.line, cls, w, needs, inst))
    ranked.sort(key=lambda r: (r[0], r[1]))
    return [{"method": cls, "value": None, "raises": False, "path": w.path, "line": w.line,
             "assumptions": [{"test": a[0], "holds": a[1], "path": a[2], "line": a[3]} for a in needs],
             "instance": inst} for _, _, cls, w, needs, inst in ranked]


def _read_as(test, recv: str, attr: str, name: str):
    """``test`` with every read of ``recv.attr`` replaced by the name ``name``."""
    class _Swap(ast.NodeTransformer):
        def visit_Attribute(self, node):
            if node.attr == attr and isinstance(node.value, ast.Name) and node.value.id == recv:
                return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)
            return self.generic_visit(node)
    return _Swap().visit(copy.deepcopy(test))


def _attr_before(world, ev, obj, w, attr: str):
    """The value ``self.<attr>`` holds just before write ``w``: the writes to it earlier in the
    same function, in order, each where its tests hold (an undecided test counts as false)."""
    val = MISSING
    for x in sorted((x for x in world.class_writes(obj.cls, attr) if x.fn is w.fn and x.line < w.line and x.receiver == "self"),
                    key=lambda x: x.line):
        env = world.write_env(x, obj, ev, {"quant_config": None})
        tests = [ev.eval(t, env, x.module, x.scope) for t, _ in x.guards]
        if all((False if t is UNKNOWN else bool(t)) == want for t, (_, want) in zip(tests, x.guards)):
            val = ev._eval_raw(x.value, env, x.module, x.scope)
    return val


def from_config(world, ev, cls: str) -> Optional[Instance]:
    """The config instance as the loader makes it: ``Cls.from_config(quantization_config)``."""
    meth = world.method(cls, "from_config")
    fn = ev.model.function_ast(meth) if meth else None
    qc = world.hf.attr("quantization_config")
    if fn is None or not isinstance(qc, dict):
        return None
    names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    env = {}
    if names and names[0] == "cls":
        env["cls"] = ClassRef(cls)
        names = names[1:]
    if names:
        env[names[0]] = dict(qc)
    mod, scope = ev.model.module_scope(meth)
    for o in sorted(ev.explore(fn.body, env, mod, scope, world.path_of(meth)), key=lambda o: sum(1 for a in o.assumptions if a[1])):
        if isinstance(o.value, Instance) and o.value.cls in world.mro(cls) + [cls] or isinstance(o.value, Instance):
            return o.value
    return None


# --- from apply to the kernels ------------------------------------------------------------------


def _bound_names(world, path: str, scope: str) -> dict:
    facts = world.tree.index.facts(path)
    bound: dict[str, str] = {}
    if facts is None:
        return bound
    for imp in sorted(facts.imports, key=lambda i: len(i.scope)):
        if imp.scope == "" or scope == imp.scope or scope.startswith(imp.scope + "."):
            bound[imp.local] = f"{imp.module}.{imp.name}" if imp.name else imp.module
    return bound


class PathWalker:
    def __init__(self, world, ev, instance: Instance):
        self.world, self.ev, self.inst = world, ev, instance
        self.G = world.G
        self.leaves: list[Leaf] = []
        self.seen: set = set()
        self.switches: list[dict] = []  # instance flags the apply path reads, with their values
        # the tree's own top-level packages, by module name (a checkout's files sit under python/)
        self.tops = {m.module.split(".", 1)[0] for m in world.tree.index.files.values() if m.module}
        self._local_cache: dict = {}
        self.primary_seen: set = set()  # functions walked on the primary path (undecided tests false)
        self.fewest: dict = {}  # function -> the fewest undecided tests a way into it took
        # each undecided test (its text) -> (path, line) where the walk met it
        self.test_sites: dict = {}
        # each test the scenario's premise decided (a step tensor is not empty) -> (path, line)
        self.premise_sites: dict = {}
        # every function entered, with the undecided tests taken as true on the way in (an empty
        # tuple: entered on the primary path): the engine-decided reach, function by function
        self.walked: dict = {}
        # every call site met in a walked body: the tests taken as true where it runs, or (in
        # ``dead``) that the engine decided the branch holding it does not run
        self.call_lines: dict = {}
        self.dead: set = set()
        # memoized callees met on the way (a build cache, an lru_cache'd loader): their bodies run
        # once per key at warm-up, not at each step, so they are not walked; qual -> how and where
        self.built: dict = {}
        self._lazy_memo: dict = {}
        self._quals: dict = {}  # id of an entered def -> its qualname

    def _locals_at(self, fn, line: int, env: dict, mod: str, scope: str, wanted: set, seen: Optional[set] = None,
                   given: frozenset = frozenset()) -> None:
        """Fill ``env`` with the simple local assignments before ``line`` that ``wanted`` reads;
        ``given``: the tests the statement at ``line`` sits under (``local_value``)."""
        from ..engine.writes import MISSING_LOCAL, local_writes, local_value
        key = id(fn)
        if key not in self._local_cache:
            self._local_cache[key] = local_writes(fn)
        assigns = self._local_cache[key]
        seen = set() if seen is None else seen  # shared with the recursion: x = f(x) must not loop
        todo = [n for n in wanted if n not in env]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)

            def fill(names, _seen=seen):
                self._locals_at(fn, line, env, mod, scope, {n for n in names if n not in env and n not in _seen}, _seen, given)

            v = local_value(assigns, name, line, env, self.ev, mod, scope, fill, given)
            if v is not MISSING_LOCAL:
                env[name] = v
            elif name in self._imports_of(fn):
                v = self._imported(self._imports_of(fn)[name], line, env, mod, scope, fill)
                if v is not None:
                    env[name] = v
        self._lazy_locals(fn, line, env, mod, scope, wanted)

    def _lazy_locals(self, fn, line: int, env: dict, mod: str, scope: str, wanted: set) -> None:
        """A dispatch resolved on the first call: ``m = self.attr; if m is None: m = self.attr =
        self.resolve()`` (``BaseFusedOp.forward``'s ``self._forward_method``): ``m`` is the attribute
        as construction leaves it (later writes are mode switches other code enters, as
        torch.compile's), else what the resolver returns for this object."""
        selfval = env.get("self")
        if not isinstance(selfval, Instance):
            return
        for name, (attr, resolver, at) in self._lazy(fn).items():
            if name not in wanted or at >= line:
                continue
            built = self.world.constructed_attr(selfval, attr, self.ev)
            got = self.ev._eval_raw(resolver, env, mod, scope) if built is None else built
            if isinstance(got, FuncRef):
                env[name] = got
                if not any(s["attr"] == attr for s in self.switches):
                    how = f" (None at construction; {ast.unparse(resolver)} on the first call)" if built is None else ""
                    self.switches.append({"attr": attr, "value": f"{last(got.qual.rsplit('.', 1)[0])}.{last(got.qual)}{how}",
                                          "path": self.world.path_of(fn_qual) if (fn_qual := self._qual_of(fn)) else "", "line": at})

    def _qual_of(self, fn) -> Optional[str]:
        """The qualname of a def the walk entered."""
        return self._quals.get(id(fn))

    def _lazy(self, fn) -> dict:
        """``{local: (attr, resolver call, line)}`` for each local a function loads from
        ``self.attr`` and, when that is None, fills from a call (``self.attr = self.resolve()``)."""
        if id(fn) in self._lazy_memo:
            return self._lazy_memo[id(fn)]
        loads = {}
        for n in single_assignments(fn):
            if isinstance(n.targets[0], ast.Name) \
                    and isinstance(n.value, ast.Attribute) and isinstance(n.value.value, ast.Name) and n.value.value.id == "self":
                loads[n.targets[0].id] = n.value.attr
        out = {}
        for n in if_statements(fn) if loads else ():
            if not (isinstance(n.test, ast.Compare) and isinstance(n.test.left, ast.Name)
                    and n.test.left.id in loads and isinstance(n.test.ops[0], ast.Is)
                    and isinstance(n.test.comparators[0], ast.Constant) and n.test.comparators[0].value is None):
                continue
            for st in n.body:
                if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call) \
                        and any(isinstance(t, ast.Name) and t.id == n.test.left.id for t in st.targets):
                    out[n.test.left.id] = (loads[n.test.left.id], st.value, st.lineno)
        self._lazy_memo[id(fn)] = out
        return out

    def _imports_of(self, fn) -> dict:
        key = ("imports", id(fn))
        if key not in self._local_cache:
            from ..engine.writes import local_imports
            self._local_cache[key] = local_imports(fn)
        return self._local_cache[key]

    def _imported(self, binds: list, line: int, env: dict, mod: str, scope: str, fill):
        """What a name imported in two branches is bound to at ``line``: the last import before it
        whose tests hold (an undecided test counts as false, the primary rule), as a callable value:
        an in-tree function, or a library's (ExtRef)."""
        from ..engine.writes import way_taken
        got = None
        for full, ln, guards in binds:
            if ln >= line:
                continue
            fill({n for g, _ in guards for n in astwalk.names_in(g)})
            ways = [way_taken(self.ev.eval(g, env, mod, scope), (id(g), want), frozenset()) for g, want in guards]
            if any(way != want for way, (_, want) in zip(ways, guards)):
                continue
            got = full
        if got is None:
            return None
        if got.split(".", 1)[0] not in self.tops:
            return ExtRef(got)
        q = got if self.G.nodes.get(got, {}).get("kind") == "function" else None
        if q is None:  # re-exported by a package's __init__: the module it names the function from
            head, _, tail = got.rpartition(".")
            q = self.ev.model.resolve(head, "", tail) if head else None
        return FuncRef(q) if q and self.G.nodes.get(q, {}).get("kind") == "function" else None

    def _bind(self, callee: str, call: ast.Call, env: dict, mod: str, scope: str, method: bool) -> dict:
        fn = self.ev.model.function_ast(callee)
        if fn is None:
            return {}
        names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        if method and names:
            names = names[1:]
        out = {}
        # a method reached without its object (``x.run(a)`` with ``x`` unknown): the call's first
        # argument is not its ``self``, and which parameter it fills is not known
        unbound = not method and bool(names) and names[0] in ("self", "cls")
        for p, a in zip(names if not unbound else (), call.args):
            if not isinstance(a, ast.Starred):
                v = self.ev._eval_raw(a, env, mod, scope)
                if v is not UNKNOWN:
                    out[p] = v
        for k in call.keywords:
            if k.arg:
                v = self.ev._eval_raw(k.value, env, mod, scope)
                if v is not UNKNOWN:
                    out[k.arg] = v
        if any(isinstance(a, ast.Starred) and isinstance(a.value, ast.Name) and isinstance(env.get(a.value.id), EntryArgs)
               for a in call.args):
            # the entry's own arguments handed on whole: the callee's tensors are the step's
            for k, v in entry_tensors(fn, callee.rsplit(".", 1)[-1]).items():
                out.setdefault(k, v)
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords) \
                or not method and names and names[0] in ("self", "cls"):
            return out  # *args / **kwargs, or a method reached unbound: which parameters the call fills is not known
        # a parameter the call leaves out holds its default (``score_mod=None``), as Python binds it
        given = set(names[:len(call.args)]) | {k.arg for k in call.keywords}
        pos = fn.args.posonlyargs + fn.args.args
        pairs = list(zip(pos[len(pos) - len(fn.args.defaults):], fn.args.defaults))
        pairs += [(a, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None]
        for a, d in pairs:
            if a.arg not in given and a.arg not in out:
                v = self.world.literal(d)
                if v is not UNKNOWN:
                    out[a.arg] = v
        return out

    def walk(self, qual: str, selfval, via: list, when: tuple, depth: int, args: Optional[dict] = None) -> None:
        primary = all(not holds for _, holds in when)
        key = (qual, depth > 0 and id(selfval))
        # walked again on a way with fewer undecided tests (a later unconditional call of a function
        # first met in a branch): its sites are then reached on that way too
        fewer = len(when) < self.fewest.get(qual, 1 << 30)
        if depth > MAX_DEPTH or key in self.seen and not (primary and qual not in self.primary_seen) and not fewer:
            return
        self.seen.add(key)
        self.fewest[qual] = min(len(when), self.fewest.get(qual, 1 << 30))
        if primary:
            self.primary_seen.add(qual)
        fn = self.ev.model.function_ast(qual)
        node = self.G.nodes.get(qual, {})
        if fn is None or not node.get("path"):
            return
        self._quals[id(fn)] = qual
        # the way in: every undecided test in the sense it was taken (a test taken as false is as
        # undecided as one taken as true)
        taken = way_of(when)
        if taken not in self.walked.setdefault(qual, []):
            self.walked[qual].append(taken)
        path = node["path"]
        mod, scope = self.ev.model.module_scope(qual)
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        env = {params[0]: selfval} if params and params[0] in ("self", "cls") and selfval is not None else {}
        if isinstance(selfval, Instance) and len(params) > 1 and params[1] == "layer":
            # the layer the method set attributes on in process_weights_after_loading & co.
            env["layer"] = self.world.layer_of(selfval)
        env.update(args or {})
        # a step tensor (not empty) the body assigns again may hold something else after that line
        handed = {k: v for k, v in env.items() if isinstance(v, StepTensor)}
        stale = rebound(fn, set(handed))
        pre = raising_guards(fn)
        bound = _bound_names(self.world, path, scope)
        edges: dict = {}
        for _, v, d in self.G.out_edges(qual, data=True):
            if d.get("kind") in ("calls", "launches", "calls_dynamic"):
                edges.setdefault(d.get("line", 0), []).append((v, d))
        for call, guards in guarded_calls(fn):
            left, runs = [], True
            for name, ln in stale.items():
                if ln <= call.lineno and env.get(name) is handed[name]:
                    env.pop(name)  # its own assignments (``_locals_at``) say what it holds from here
            names = {n for t, _ in guards for n in astwalk.names_in(t)}
            names |= astwalk.names_in(call)
            self._locals_at(fn, call.lineno, env, mod, scope, names, given=frozenset((id(t), h) for t, h in guards))
            for test, holds in guards:
                reads = self.ev.step_reads
                # a test read before the body assigned a handed tensor again still reads that tensor
                back = {n: handed[n] for n, ln in stale.items() if getattr(test, "lineno", 0) < ln}
                tenv = {**env, **back} if back else env
                v = self._guard_value(test, truth(self.ev.eval(test, tenv, mod, scope)), selfval)
                if v is UNKNOWN and (id(test), holds) in pre:
                    # a precondition (its other branch only raises): the step that runs met it, as
                    # the evaluator assumes of the gates it reads; said, and counted as changing no choice
                    text = f"assumed the precondition holds: {'' if holds else 'not '}({_src(test)[:100]})"
                    self.world.notes.setdefault(f"pre:{_src(test)}", text)
                    self.world.notes.idle.add(text)
                    continue
                if v is not UNKNOWN and self.ev.step_reads != reads:
                    # decided by the scenario's premise (the step's tensors are not empty): said once
                    self.world.notes.setdefault("premise:step-tensors", premise_note())
                    self.premise_sites.setdefault(_src(test), (path, getattr(test, "lineno", call.lineno)))
                if _undecided(v):
                    left.append((_src(test), holds))
                    self.test_sites.setdefault(_src(test), (path, getattr(test, "lineno", call.lineno)))
                elif bool(v) != holds:
                    runs = False
                    break
                else:
                    self._switch(test, v, path, mod, scope, env)
            if not runs:
                self.dead.add((path, call.lineno))
                continue
            cwhen = when + tuple(left)
            taken_here = way_of(cwhen)
            if taken_here not in self.call_lines.setdefault((path, call.lineno), []):
                self.call_lines[(path, call.lineno)].append(taken_here)
            name = dotted_name(call.func)
            hop = Hop(f"{node.get('qualname', qual)} calls {name or ast.unparse(call.func)[:60]}", path, call.lineno, qual, tuple(left))
            head = name.split(".", 1)[0] if name else ""
            # a local bound to a callable value: fn = helper()[0], then fn(...)
            if isinstance(call.func, ast.Name) and call.func.id in env:
                bound_v = env[call.func.id]
                if isinstance(bound_v, ExtRef):
                    pkg = bound_v.name.split(".", 1)[0]
                    if pkg not in self.tops and pkg not in _NOT_KERNELS:
                        self._leaf("library", bound_v.name, path, call.lineno, via + [hop], cwhen)
                    continue
                if isinstance(bound_v, FuncRef):
                    if self._built_once(bound_v.qual, path, call.lineno, cwhen):
                        continue
                    # a bound method (m = self.forward_cuda; m(...)) runs on its object
                    self.walk(bound_v.qual, bound_v.bound, via + [hop], cwhen, depth + 1,
                              self._bind(bound_v.qual, call, env, mod, scope, bound_v.bound is not None))
                    continue
            # a library call
            if head in bound and self._outside(bound[head] + name[len(head):], path, call.lineno, via + [hop], cwhen):
                continue
            # a registered function held in an attribute: self.fused_func(...)
            if name.startswith("self.") and name.count(".") == 1 and isinstance(selfval, Instance):
                held = self.world.instance_attr(selfval, name.split(".")[1], self.ev, 0)
                if isinstance(held, FuncRef) and held.bound is not None:
                    # a method the object picked for itself at construction (self._forward_method =
                    # self.dispatch_forward() -> self.forward_cuda on this device)
                    reg = Hop(f"{name} is {held.qual.rsplit('.', 1)[-1]}, chosen for this device", self.world.path_of(held.qual) or path,
                              self.G.nodes.get(held.qual, {}).get("line", 0), held.qual)
                    self.walk(held.qual, held.bound, via + [hop, reg], cwhen, depth + 1, self._bind(held.qual, call, env, mod, scope, True))
                    continue
                if isinstance(held, FuncRef):
                    reg = Hop(f"{name} is {held.qual.rsplit('.', 1)[-1]}, registered for {held.keys!r}", held.site[0], held.site[1], held.qual)
                    own = held.qual.rsplit(".", 1)[0] in self.world.mro(selfval.cls)  # the object's own method
                    self.walk(held.qual, selfval if own else None, via + [hop, reg], cwhen, depth + 1, self._bind(held.qual, call, env, mod, scope, own))
                    continue
            # a held object's method: self.runner.run(...)
            if name.startswith("self.") and name.count(".") >= 2 and isinstance(selfval, Instance):
                held_attr, meth = name.split(".")[1], name.rsplit(".", 1)[1]
                held = self.world.instance_attr(selfval, held_attr, self.ev, 0)
                if isinstance(held, Instance):
                    target = self.world.method(held.cls, meth)
                    if target:
                        self.walk(target, held, via + [hop], cwhen, depth + 1, self._bind(target, call, env, mod, scope, True))
                        self._registry(held, via + [hop], cwhen, depth)
                        continue
                elif name.count(".") == 2 and (held is UNKNOWN or held is MISSING or held is None):
                    alts = self._held_alternatives(selfval, held_attr, meth)
                    if alts:
                        # which object the attribute holds is not decided (None where every test
                        # the engine cannot decide is taken as false): each class its writes
                        # construct is one outcome, under the tests that lead to that write, and
                        # its method runs on that object, not on an unknown one
                        for target, obj, extra, w in alts:
                            reg = Hop(f"self.{held_attr} = {obj.cls.rsplit('.', 1)[-1]}(...) in {w.scope}",
                                      w.path, w.line, target, extra)
                            self.walk(target, obj, via + [hop, reg], cwhen + extra, depth + 1, self._bind(target, call, env, mod, scope, True))
                        continue
            if self._product_call(fn, call, env, mod, scope, via + [hop], cwhen, depth):
                continue
            if self._held_call(name, call, env, mod, scope, selfval, via + [hop], cwhen, depth):
                continue
            for v, d in edges.get(call.lineno, []):
                k = self.G.nodes.get(v, {}).get("kind")
                if k == "function" and self._built_once(v, path, call.lineno, cwhen):
                    continue  # built once per key: the op it returns is taken where it is called
                if k == "triton_kernel":
                    self._leaf("triton_kernel", v, path, call.lineno, via + [hop], cwhen)
                elif k == "native_op":
                    impl = custom_op_impl(self.world, v)
                    if impl is None:
                        self._leaf("native_op", v, path, call.lineno, via + [hop], cwhen)
                    else:  # a custom op whose implementation is in the tree: follow it
                        reg = Hop(f"{v} is {impl[0].rsplit('.', 1)[-1]}, registered as a custom op", impl[1], impl[2], impl[0])
                        self.walk(impl[0], None, via + [hop, reg], cwhen, depth + 1, {})
                elif k == "function" and d.get("kind") == "calls" and _JIT.search(self.G.nodes[v].get("path", "")) \
                        and "/utils" not in self.G.nodes[v].get("path", ""):
                    self._leaf("jit_kernel", v, path, call.lineno, via + [hop], cwhen)  # compiled at run time
                elif k == "function" and d.get("kind") == "calls":
                    target_self = selfval if name.startswith("self.") and name.count(".") == 1 else None
                    self.walk(v, target_self, via + [hop], cwhen, depth + 1, self._bind(v, call, env, mod, scope, target_self is not None))

    def _built_once(self, qual: str, path: str, line: int, when: tuple = ()) -> bool:
        """``qual`` keeps its results between calls (:meth:`World.memoized`): recorded, its body
        not walked. It is still entered on this way (its result is what the step uses: a config
        lookup, the module it builds), so it counts among the functions the walk reached; what
        it calls does not."""
        how = self.world.memoized(qual, self.ev.model)
        if how is None:
            return False
        taken = way_of(when)
        if taken not in self.walked.setdefault(qual, []):
            self.walked[qual].append(taken)
        rec = self.built.setdefault(qual, {**how, "sites": []})
        if [path, line] not in rec["sites"]:
            rec["sites"].append([path, line])
        return True

    def _builder_of(self, fn, node, mod: str, scope: str) -> Optional[tuple]:
        """(memoized function, its call) when ``node`` is the result of one: the call itself
        (``build(x).op(...)``), or a local the function assigns once from it (``m = build(x)``)."""
        if isinstance(node, ast.Name):
            got = [a.value for a in single_assignments(fn) if isinstance(a.targets[0], ast.Name) and a.targets[0].id == node.id]
            node = got[0] if len(got) == 1 else None
        if not isinstance(node, ast.Call):
            return None
        dotted = dotted_name(node.func)
        q = self.ev.model.resolve(mod, scope, dotted) if dotted else None
        if q and self.G.nodes.get(q, {}).get("kind") == "function" and self.world.memoized(q, self.ev.model):
            return q, node
        return None

    def _product_call(self, fn, call, env: dict, mod: str, scope: str, via: list, when: tuple, depth: int) -> bool:
        """A call of what a memoized builder returned (``module = build(dtype); module.op(x)``,
        ``build(dtype)(x)``): the op that runs at each step is the product, not the build. A module
        the tree's JIT loader compiles is a ``jit_kernel`` leaf; an in-tree function is walked; a
        library's callable is a library leaf. True when the call was taken here."""
        target = call.func.value if isinstance(call.func, ast.Attribute) else call.func
        got = self._builder_of(fn, target, mod, scope)
        if got is None:
            return False
        builder, bcall = got
        self._built_once(builder, via[-1].path, bcall.lineno, when)
        bargs = self._bind(builder, bcall, env, mod, scope, False)
        how = self.world.memoized(builder, self.ev.model)["how"]
        for kind, name, at in memo_products(self.world, self.ev, builder, bargs, attr=getattr(call.func, "attr", "")):
            hop = Hop(f"{last(builder)} returns it, built once per key ({how})", at[0], at[1], builder)
            if kind == "function" and isinstance(call.func, ast.Name):
                self.walk(name, None, via + [hop], when, depth + 1, self._bind(name, call, env, mod, scope, False))
            elif kind in ("jit_kernel", "library"):
                self._leaf(kind, name, via[-1].path, via[-1].line, via + [hop], when)
        return True

    def _guard_value(self, test, value, selfval):
        """The value a call's test takes on this walk (the evaluator's, unless a walker knows better)."""
        return value

    def _held_call(self, name: str, call, env: dict, mod: str, scope: str, selfval, via: list, when: tuple, depth: int) -> bool:
        """A call this walker follows beyond the ones above (True when it did); none here."""
        return False

    def _outside(self, full: str, path: str, line: int, via: list, when: tuple) -> bool:
        """A call into a package outside the tree: a library op (True), or not one (False)."""
        pkg = full.split(".", 1)[0]
        if pkg in self.tops or pkg in _NOT_KERNELS:
            return False
        self._leaf("library", full, path, line, via, when)
        return True

    def _held_alternatives(self, selfval: Instance, attr: str, meth: str) -> list:
        """(method, object, undecided tests, write) for each write of ``self.<attr>`` in the
        object's class that constructs an in-tree class with ``meth``: an if-chain that picks one
        core among several (``if backend.is_triton(): self.core = TritonCore(config) elif ...``).
        A write whose tests the engine decides against is not an outcome; the tests it cannot
        decide are the ones between the outcomes."""
        out = []
        ev = self.ev
        for w in self.world.class_writes(selfval.cls, attr):
            if w.mutates or not isinstance(w.value, ast.Call):
                continue
            env = self.world.write_env(w, selfval, ev, dict(selfval.attrs.get("__args__", {})) if w.scope.endswith(".__init__") else None)
            obj = ev._eval_raw(w.value, env, w.module, w.scope)
            if not isinstance(obj, Instance):
                continue
            target = self.world.method(obj.cls, meth)
            if not target:
                continue
            extra, runs = [], True
            for test, want in w.guards:
                v = truth(ev.eval(test, env, w.module, w.scope))
                if _undecided(v):
                    extra.append((_src(test), want))
                    self.test_sites.setdefault(_src(test), (w.path, getattr(test, "lineno", w.line)))
                elif bool(v) != want:
                    runs = False
                    break
            if runs:
                out.append((target, obj, tuple(extra), w))
        return out

    def _registry(self, held: Instance, via, when, depth) -> None:
        """The functions a registry keyed by the held object's constructor constants dispatches to."""
        keys = {a.value if isinstance(a, EnumVal) else a for a in held.attrs.get("__args__", {}).values()
                if isinstance(a, (EnumVal, str))}
        if not keys:
            return
        state = self.world.state
        state_values = {repr(v) for v in (state.values.values() if state else ())}
        hits = []
        # only registries the held object's module knows of (it imports the decorator's module)
        hmod = self.world._module_of(held.cls)
        hfacts = self.world.tree.index.facts(self.world.path_of(held.cls) or "")
        known = {hmod} | {i.module for i in (hfacts.imports if hfacts is not None else ())}
        for rkeys, deco, fq, path, line, dmod in registrations(self.world):
            if keys & set(rkeys) and dmod in known:
                others = [k for k in rkeys if k not in keys]
                # the other keys must agree with a resolved server argument (an a2a backend "none")
                score = sum(1 for k in others if repr(k) in state_values or (state and any(state.get(f) == k for f in ("moe_a2a_backend",))))
                hits.append((score == len(others), score, fq, path, line, deco, rkeys))
        best = [h for h in hits if h[0]] or hits
        for ok, _, fq, path, line, deco, rkeys in sorted(best, key=lambda h: (not h[0], -h[1], h[2]))[:3]:
            hop = Hop(f"registry {deco}{rkeys!r} -> {fq.rsplit('.', 1)[-1]}", path, line, fq, ())
            self.walk(fq, None, via + [hop], when, depth + 1)

    def _leaf(self, kind, name, path, line, via, when) -> None:
        key = (kind, name, path, line)
        new = Leaf(kind, name, path, line, via, when)
        if key in self.seen:
            # keep one record a site (the one with the fewest undecided tests, else the primary
            # one), with every way the walk reached it
            for i, old in enumerate(self.leaves):
                if (old.kind, old.name, old.path, old.line) == key:
                    ways = old.ways | {way_of(old.when), way_of(when)}
                    if len(when) < len(old.when) or (len(when) == len(old.when) and new.primary and not old.primary):
                        self.leaves[i] = new
                    self.leaves[i].ways = ways
            return
        self.seen.add(key)
        self.leaves.append(new)

    def _switch(self, test, value, path, mod, scope, env) -> None:
        """Record an instance flag a decided test read (``self._use_mxfp8_act_scaling``)."""
        for n in astwalk.walk(test):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
                v = self.ev.eval(n, env, mod, scope)
                if v is not UNKNOWN and not any(s["attr"] == n.attr for s in self.switches):
                    self.switches.append({"attr": n.attr, "value": v, "path": path, "line": test.lineno})


def jit_module(world, ev, qual: str, ret: ast.Call, env: dict) -> Optional[tuple]:
    """(name, cuda files) of the module ``return loader(name, ..., cuda_files=[...])`` compiles, where
    the loader is a function of the tree's JIT package (``sglang/kernels/jit/``, ``jit_kernel/``);
    the name is the loader's first argument evaluated with the builder's arguments (None: unknown)."""
    mod, scope = ev.model.module_scope(qual)
    dotted = dotted_name(ret.func)
    loader = ev.model.resolve(mod, scope, dotted) if dotted else None
    if not loader or not _JIT.search(world.path_of(loader) or "") or world.G.nodes.get(loader, {}).get("kind") != "function":
        return None
    name = ev._eval_raw(ret.args[0], dict(env), mod, scope) if ret.args else UNKNOWN
    files = []
    for k in ret.keywords:
        if k.arg == "cuda_files" and isinstance(k.value, (ast.List, ast.Tuple)):
            files = [e.value for e in k.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return (name if isinstance(name, str) else None), files


def memo_products(world, ev, qual: str, env: dict, attr: str = "") -> list[tuple]:
    """What a memoized builder returns, as the op a call of it runs: ``("jit_kernel", "name (files)",
    (path, line))`` for a module the tree's JIT loader compiles, ``("function", qual, ...)`` for an
    in-tree function, ``("library", dotted, ...)`` for a library's callable. One per ``return`` the
    engine can name; a ``return`` of the builder itself (another key) adds nothing."""
    fn = ev.model.function_ast(qual)
    path = world.path_of(qual) or ""
    mod, scope = ev.model.module_scope(qual)
    out = []
    for r in astwalk.walk(fn) if fn is not None else ():
        if not isinstance(r, ast.Return) or r.value is None:
            continue
        if isinstance(r.value, ast.Call):
            dotted = dotted_name(r.value.func)
            if dotted and ev.model.resolve(mod, scope, dotted) == qual:
                continue  # the builder again, for another key
            jit = jit_module(world, ev, qual, r.value, env)
            if jit is not None:
                name = jit[0] or attr or last(qual)
                out.append(("jit_kernel", f"{name} ({', '.join(jit[1])})" if jit[1] else name, (path, r.lineno)))
                continue
        v = ev._eval_raw(r.value, dict(env), mod, scope)
        if v is UNKNOWN and isinstance(r.value, (ast.Name, ast.Attribute)) and dotted_name(r.value):
            q = ev.model.resolve(mod, scope, dotted_name(r.value))  # an in-tree function named as a value
            if q and world.G.nodes.get(q, {}).get("kind") == "function":
                v = FuncRef(q)
        if isinstance(v, FuncRef) and v.qual:
            out.append(("function", v.qual, (path, r.lineno)))
        elif isinstance(v, ExtRef):
            out.append(("library", v.name, (path, r.lineno)))
    seen, uniq = set(), []
    for o in out:
        if o[:2] not in seen:
            seen.add(o[:2])
            uniq.append(o)
    return uniq


def construction(world, ev, inst: Instance) -> list[dict]:
    """The method's own flags its constructor settles for this device and flags
    (``self._use_mxfp8_act_scaling = get_platform().is_sm120``): each with its value and line."""
    out = []
    cls = inst.cls
    d = world.G.nodes.get(cls, {})
    if not d.get("path"):
        return out
    cq = d.get("qualname", "")
    seen = set()
    for w in sorted((w for ws in world._writes_by_path.get(d["path"], {}).values() for w in ws), key=lambda w: w.line) \
            if d["path"] in world._writes_by_path else []:
        if w.receiver != "self" or w.scope != f"{cq}.__init__" or w.key in seen:
            continue
        seen.add(w.key)
        v = world.instance_attr(inst, w.key, ev, 0)
        if isinstance(v, (bool, str, int, EnumVal)) and not isinstance(v, type(None)):
            out.append({"attr": w.key, "value": v, "path": w.path, "line": w.line})
    return out


def apply_path(world, ev, inst: Instance) -> dict:
    apply = world.method(inst.cls, "apply")
    if apply is None:
        return {"apply": None, "leaves": [], "switches": [], "construction": []}
    w = PathWalker(world, ev, inst)
    mod, scope = ev.model.module_scope(apply)
    w.walk(apply, inst, [], (), 0, bundle_args(world, ev.model.function_ast(apply), mod, scope))
    world.writes_of(world.path_of(inst.cls) or "", world._module_of(inst.cls), "__init__")  # index the class's file
    return {"apply": apply, "leaves": w.leaves, "switches": w.switches, "construction": construction(world, ev, inst),
            "walked": walked_list(w.walked), "calls": calls_list(w), "test_sites": w.test_sites,
            "built_once": built_list(w.built),
            "premise_decided": [{"test": t[:200], "path": at[0], "line": at[1]} for t, at in sorted(w.premise_sites.items())]}


def leaf_tests(lf: Leaf, sites: dict) -> list[dict]:
    """The undecided tests on a leaf's way, each with the sense the way takes and where it is read
    (``file:line``): what picks between this leaf and the other outcome."""
    out, seen = [], set()
    for t, h in lf.when:
        if (t, h) in seen:
            continue
        seen.add((t, h))
        p, ln = sites.get(t, (None, None))
        out.append({"test": t[:200], "holds": bool(h), "path": p, "line": ln})
    return out


def forks(leaves: list[dict]) -> list[dict]:
    """The undecided tests of a layer's path, outcome by outcome: for each test some leaf's way
    depends on, the ops reached when it holds and when it does not (leaves as dicts with
    ``tests``, ``decided``). What the map and the view show instead of picking one outcome."""
    by: dict = {}
    for lf in leaves:
        if lf.get("decided"):
            continue
        for t in lf.get("tests", []):
            k = t["test"]
            f = by.setdefault(k, {"test": k, "path": t.get("path"), "line": t.get("line"), "if_true": [], "if_false": []})
            side = f["if_true" if t["holds"] else "if_false"]
            name = lf["name"]
            if name not in side:
                side.append(name)
    return [by[k] for k in sorted(by, key=lambda k: (by[k]["path"] or "", by[k]["line"] or 0, k))]


def calls_list(w) -> dict:
    """A walker's call sites as data: ``live`` [path, line, [taken tests per way]], ``dead`` [path, line]
    (decided not to run, and never met live)."""
    return {"live": [[p, ln, [list(t) for t in sorted(ws)]] for (p, ln), ws in sorted(w.call_lines.items())],
            "dead": [[p, ln] for p, ln in sorted(w.dead - set(w.call_lines))]}


def built_list(built: dict) -> list[dict]:
    """A walker's memoized callees (not walked: built once per key) as data."""
    return [{"node": q, **{k: v for k, v in d.items()}} for q, d in sorted(built.items())]


def walked_list(walked: dict) -> list[dict]:
    """A walker's functions as data: each with the undecided tests each way in took as true
    (``[[]]``: entered on the primary path)."""
    return [{"node": q, "when": [list(t) for t in sorted(ws)]} for q, ws in sorted(walked.items())]
