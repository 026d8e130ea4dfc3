"""The kernel map of one step: for each layer kind of the model, what runs, why, and how often.

Each layer kind is reached through SGLang's own mechanism, evaluated for the device, the model's
config.json, the resolved server arguments and the environment (declared defaults unless ``--env``):

- **attention**: the backend named by the runtime view's resolved ``decode_attention_backend`` or
  ``attention_backend`` (with the decision the view recorded), looked up in the tree's
  ``@register_attention_backend`` registry; its factory explored to the class it builds; that
  class's decode (or extend) forward walked with a ``ForwardBatch`` whose ``forward_mode`` is
  ``DECODE`` (``EXTEND`` for prefill);
- **dense GEMMs**: the checkpoint's quant config class (the quant-method registry) asked
  ``get_quant_method`` for a ``LinearBase`` layer; the method's ``apply`` walked, with the
  functions it holds from dispatchers (``dispatch_w8a8_block_fp8_linear()``) evaluated;
- **MoE**: the runtime view's chain (quant method, ``apply``, kernels);
- **embedding, norms, logits, sampling**: the layer classes the model's module constructs (and the
  sampler), each ``forward`` walked, through the platform dispatch (``dispatch_forward`` returning
  ``self.forward_cuda``) where the class has one;
- **communication**: the all-reduces tensor parallelism adds, when the resolved ``tp_size`` > 1.

What cannot be decided statically stays undecided: the primary path takes such a test as false,
and the kernels reached only when it holds are listed with the condition.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from ..engine.asts import tree_memo
from ..engine.interp import UNKNOWN
from ..names import last, plain_dotted
from ..runtime.moe import PathWalker, from_config, calls_list, jit_module, forks, leaf_tests, registrations, registry, walked_list
from ..engine.values import EnumVal, Instance, LayerObj, plain
from ..engine.dispatch import choices, resolve_held
from ..engine.steptensors import annotation_of, entry_tensors
from .. import astwalk

# where SGLang keeps the layer classes a model builds, by layer kind (its own module layout)
_LAYER_MODULES = (
    ("embedding", "layers/vocab_parallel_embedding.py"),
    ("norm", "layers/layernorm.py"),
    ("rotary", "layers/rotary_embedding"),
    ("logits", "layers/logits_processor.py"),
)


def _assume(a) -> dict:
    return {"test": a[0][:200], "holds": bool(a[1]), "path": a[2], "line": a[3]}


def _classes_by_name(tree) -> dict:
    """class name -> [(qualname, path)] over the tree's graph, made once per loaded tree (a step
    asks for classes by name a dozen times per scenario; each scan of every node of the graph)."""
    memo = tree_memo(tree)
    got = memo.get("classes_by_name")
    if got is None or got[0] is not tree.graph:
        by_name: dict = {}
        for n, d in tree.graph.nodes(data=True):
            if d.get("kind") == "class":
                by_name.setdefault(d.get("name"), []).append((n, d.get("path", "")))
        got = memo["classes_by_name"] = (tree.graph, by_name)
    return got[1]


class Step:
    """Everything the layer kinds share: the tree and the scenario's engine (one World, one evaluator)."""

    def __init__(self, ctx, engine):
        self.ctx, self.tree, self.G = ctx, ctx.tree, ctx.tree.graph
        self.flags, self.env = engine.flags, engine.env
        # the scenario's engine: the World and evaluator the runtime view's MoE walk used, with the
        # server arguments it resolved (no second resolution, no second evaluator)
        self.world, self.ev = engine.world, engine.ev
        # the attention backend the registry builds, once the attention layer found it: the model
        # runner hands it to the model (ForwardBatch.attn_backend, the published forward context)
        self.backend: Optional[Instance] = None
        self.backend_entries: set = set()  # its methods the attention layer walks itself

    def publish_backend(self, inst: Instance, entries: set) -> list:
        """Make ``inst`` the backend the model sees during a forward, as the model runner does:
        ``forward_batch.attn_backend`` (ForwardBatch's field), and the context it publishes around
        the forward (``with forward_context(ForwardContext(attn_backend=self.attn_backend))``: a
        context manager that sets its module's one global, read back by ``get_attn_backend()``).
        Returns where the context was found (file:line), empty when the tree publishes none."""
        self.backend, self.backend_entries = inst, set(entries)
        mr = self.classes("ModelRunner", "model_executor/")
        node = self.world._class_ast(mr[0]) if mr else None
        if node is None:
            return []
        mod = self.world._module_of(mr[0])
        runner = Instance(mr[0], {"attn_backend": inst})
        for n in astwalk.walk(node):
            if not (isinstance(n, ast.withitem) and isinstance(n.context_expr, ast.Call) and len(n.context_expr.args) == 1
                    and isinstance(n.context_expr.args[0], ast.Call)):
                continue
            cm, made = n.context_expr, n.context_expr.args[0]
            fq = self.ev.model.resolve(mod, "", plain_dotted(cm.func)) if plain_dotted(cm.func) else None
            cq = self.ev.model.resolve(mod, "", plain_dotted(made.func)) if plain_dotted(made.func) else None
            if not fq or not cq or self.G.nodes.get(cq, {}).get("kind") != "class" or self.G.nodes.get(fq, {}).get("kind") != "function":
                continue
            fmod = self.world._module_of(fq)
            tree = self.world.module_ast(self.G.nodes[fq]["path"])
            globs = {g for f in (tree.body if tree is not None else ()) if isinstance(f, ast.FunctionDef)
                     for x in astwalk.walk(f) if isinstance(x, ast.Global) for g in x.names}
            if len(globs) != 1:
                continue
            ctxobj = Instance(cq)
            for k in made.keywords:
                if k.arg:
                    v = self.ev._eval_raw(k.value, {"self": runner}, mod, "")
                    ctxobj.attrs[k.arg] = v
            if not any(v is inst for v in ctxobj.attrs.values()):
                continue
            self.ev._globals[(fmod, globs.pop())] = ctxobj
            return [f"{self.world.path_of(mr[0])}:{made.lineno}"]
        return []

    def runner(self) -> Optional[Instance]:
        """The model runner an attention backend is built with: the server's one ModelConfig for the
        checkpoint and the resolved server arguments (its other fields unknown)."""
        mr = self.classes("ModelRunner", "model_executor/")
        if not mr:
            return None
        from ..engine.values import ServerArgsObj
        return Instance(mr[0], {"model_config": self.world.model_config(), "server_args": ServerArgsObj(self.world.state),
                                "__only__": True})

    def classes(self, name: str, path_part: str = "") -> list[str]:
        return sorted(n for n, path in _classes_by_name(self.tree).get(name, ())
                      if "/srt/" in path and path_part in path)

    # --- walking ---------------------------------------------------------------------------------
    def walk(self, inst: Instance, method: str, args: Optional[dict] = None, skip: Optional[set] = None,
             follow_modules: bool = True) -> dict:
        """Kernels and library ops reached from ``inst.method``, with the dispatchers it holds."""
        qual = self.world.method(inst.cls, method)
        held = resolve_held(self.world, self.ev, inst, self._held_calls(inst.cls))
        w = StepWalker(self.world, self.ev, inst)
        w.skip = set(skip if skip is not None else self.backend_entries)
        w.follow_modules = follow_modules
        if qual:
            # the entry's tensors hold the step's tokens (the scenario's premise: not empty)
            steps = entry_tensors(self.ev.model.function_ast(qual), last(qual), varargs=True)
            w.walk(qual, inst, [], (), 0, {**steps, **self.mode_args(qual), **(args or {})})
            w.launched_locals()
        leaves = [_leaf(self, lf, w.extra_tests, w.test_sites) for lf in w.leaves if _is_op(lf)]
        return {"entry": qual, "leaves": leaves, "forks": forks(leaves),
                "test_sites": {t: list(at) for t, at in sorted(w.test_sites.items())},
                # tests the scenario's premise decided (the step's tensors are not empty)
                "premise_decided": _premise_list(w.premise_sites),
                "switches": [{**s, "value": plain(s["value"])} for s in w.switches],
                "dispatchers": {a: _dispatch_dict(d) for a, d in held.items()},
                "walked": walked_list(w.walked), "calls": calls_list(w),
                **({"handed_on": w.handed} if w.handed else {})}

    def _held_calls(self, cls: str) -> set:
        """Attributes the class's methods call as ``self.attr(...)``."""
        out = set()
        for c in self.world.mro(cls):
            d = self.G.nodes.get(c, {})
            fnode = self.world._class_ast(c) if d.get("path") else None
            for n in astwalk.walk(fnode) if fnode is not None else ():
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                        and n.func.value.id == "self" and not self.world.method(cls, n.func.attr):
                    out.add(n.func.attr)
        return out

    def mode_args(self, qual: str, mode: str = "DECODE") -> dict:
        """The entry's parameters annotated with an in-tree class that declares a ``forward_mode``
        field (``ForwardBatch``, ``LogitsMetadata``): an object of that class in the step's mode,
        its other fields at their declared defaults."""
        fn = self.ev.model.function_ast(qual)
        fm = self.classes("ForwardMode", "model_executor/")
        members = self.world._members(fm[0]) if fm else {}
        if fn is None or mode not in members:
            return {}
        mod, scope = self.ev.model.module_scope(qual)
        out = {}
        for a in fn.args.args[1:] + fn.args.kwonlyargs:
            ann = annotation_of(a.annotation)
            # `Union[LogitsMetadata, ForwardBatch]`: the first named class that has the field
            for n in astwalk.walk(ann) if ann is not None else ():
                if not isinstance(n, (ast.Name, ast.Attribute)) or not plain_dotted(n):
                    continue
                cls = self.ev.model.resolve(mod, scope, plain_dotted(n))
                node = self.world._class_ast(cls) if cls and self.G.nodes.get(cls, {}).get("kind") == "class" else None
                if node is not None and any(isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                                            and st.target.id == "forward_mode" for st in node.body):
                    out[a.arg] = Instance(cls, {"forward_mode": EnumVal(fm[0], mode, members[mode]), **self._backend_field(node)})
                    break
        return out

    def forward_batch(self, mode: str) -> Optional[Instance]:
        fb = self.classes("ForwardBatch", "model_executor/")
        fm = self.classes("ForwardMode", "model_executor/")
        if not fb or not fm:
            return None
        members = self.world._members(fm[0])
        if mode not in members:
            return None
        return Instance(fb[0], {"forward_mode": EnumVal(fm[0], mode, members[mode]), **self._backend_field(self.world._class_ast(fb[0]))})

    def _backend_field(self, node) -> dict:
        """``attn_backend`` of a class that declares that field (ForwardBatch: the runner's backend)."""
        if self.backend is None or node is None:
            return {}
        if any(isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id == "attn_backend" for st in node.body):
            return {"attn_backend": self.backend}
        return {}


class StepWalker(PathWalker):
    """The runtime view's walker, also following a kernel chosen at run time and launched through
    a local (``kernel = select_kernel(M, N, config); kernel[grid](...)``): the selecting function
    is explored as a dispatcher, each kernel it can return kept with its condition."""

    def __init__(self, world, ev, instance):
        super().__init__(world, ev, instance)
        self.entered: dict = {}
        self.extra_tests: set = set()  # tests of an `if` with no else that adds work to the path
        # methods another layer kind of the map walks (the attention backend's forward, reached from
        # the model's attention module): the call is recorded, not walked twice
        self.skip: set = set()
        self.handed: list = []
        # follow a held submodule's call (``self.indexer(...)`` runs its ``forward``, as
        # ``nn.Module.__call__`` does); off for a layer whose submodules are other layer kinds
        self.follow_modules = True

    def _outside(self, full, path, line, via, when) -> bool:
        """Library calls, plus the PyTorch calls that are the work itself (a GEMM on cuBLAS, a
        collective on NCCL); management libraries that launch nothing on the GPU are no op."""
        if full.split(".", 1)[0] in _HOST_LIBS or full.startswith(_KERNEL_LANGUAGES):
            return True
        if _TORCH_OPS.match(full):
            self._leaf("torch_op", full, path, line, via, when)
            return True
        return super()._outside(full, path, line, via, when)

    def _held_call(self, name, call, env, mod, scope, selfval, via, when, depth) -> bool:
        """Calls the step reaches through an object the engine knows, by PyTorch's and SGLang's own
        mechanisms: a method of an object held in a local (``attn_backend = get_attn_backend();
        attn_backend.forward(...)``: the backend the model runner publishes for the forward), a
        submodule called as a function (``self.indexer(...)`` runs ``C4Indexer.forward``), and a
        dataclass built on the path (``PagedIndexerMetadata(...)`` runs its ``__post_init__``)."""
        if not name:
            return False
        parts = name.split(".")
        target, obj = None, None
        if len(parts) == 2 and parts[0] != "self" and isinstance(env.get(parts[0]), Instance):
            obj = env[parts[0]]
            target = self.world.method(obj.cls, parts[1])
        elif len(parts) == 2 and parts[0] == "self" and self.follow_modules and isinstance(selfval, Instance) \
                and not self.world.method(selfval.cls, parts[1]):
            held = self.world.instance_attr(selfval, parts[1], self.ev, 0)
            if not isinstance(held, Instance):
                # built under a test the layer's construction does not decide (``if
                # self.compress_ratio == 4: self.indexer = C4Indexer(...)``, per layer): the module
                # its constructor stores there; the call's own tests stay on the path's conditions
                held = self._stored_module(selfval.cls, parts[1])
            if isinstance(held, Instance):
                obj, target = held, self.world.method(held.cls, "forward")
        elif len(parts) == 1 and parts[0] not in env:
            cls = self.ev.model.resolve(mod, scope, name)
            if cls and self.G.nodes.get(cls, {}).get("kind") == "class":
                post = self.world.method(cls, "__post_init__")
                if post:
                    obj = Instance(cls)
                    for k in call.keywords:
                        if k.arg:
                            v = self.ev._eval_raw(k.value, env, mod, scope)
                            if v is not UNKNOWN:
                                obj.attrs[k.arg] = v
                    target = post
        if not target or obj is None:
            return False
        if target in self.skip:
            self.handed.append({"call": name, "method": target, "path": via[-1].path, "line": via[-1].line})
            return True
        self.walk(target, obj, via, when, depth + 1, self._bind(target, call, env, mod, scope, True))
        return True

    def _guard_value(self, test, value, selfval):
        """An optional submodule (``self.indexer = None``, then ``self.indexer = C4Indexer(...)``
        under a test the construction cannot decide, per layer) makes ``self.indexer is not None``
        undecided: both outcomes, not the primary rule's None."""
        if value is UNKNOWN or not isinstance(selfval, Instance):
            return value
        for n in astwalk.walk(test):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self" \
                    and self._optional_module(selfval, n.attr):
                return UNKNOWN
        return value

    def _optional_module(self, inst: Instance, attr: str) -> bool:
        key = ("optional", inst.cls, attr)
        if key not in self._lazy_memo:
            got = False
            writes = [w for w in self.world.class_writes(inst.cls, attr) if w.receiver == "self" and w.scope.endswith(".__init__")]
            if len(writes) > 1 and any(isinstance(w.value, ast.Constant) and w.value.value is None for w in writes) \
                    and self._stored_module(inst.cls, attr) is not None:
                for w in writes:
                    if not w.guards or isinstance(w.value, ast.Constant):
                        continue
                    env = self.world.write_env(w, inst, self.ev, dict(inst.attrs.get("__args__", {})))
                    if any(self.ev.eval(t, env, w.module, w.scope) is UNKNOWN for t, _ in w.guards):
                        got = True
                        break
            self._lazy_memo[key] = got
        return self._lazy_memo[key]

    def _stored_module(self, cls: str, attr: str) -> Optional[Instance]:
        """The one in-tree class with a ``forward`` that ``__init__`` constructs into ``self.attr``."""
        init = self.world.method(cls, "__init__")
        fn = self.ev.model.function_ast(init) if init else None
        if fn is None:
            return None
        mod, scope = self.ev.model.module_scope(init)
        found = set()
        for n in astwalk.walk(fn):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and any(
                    isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" and t.attr == attr
                    for t in n.targets):
                q = self.ev.model.resolve(mod, scope, plain_dotted(n.value.func)) if plain_dotted(n.value.func) else None
                if q and self.G.nodes.get(q, {}).get("kind") == "class" and self.world.method(q, "forward"):
                    found.add(q)
        return Instance(found.pop()) if len(found) == 1 else None

    def walk(self, qual, selfval, via, when, depth, args=None):
        primary = all(not h for _, h in when)
        if qual not in self.entered:
            self.extra_tests |= _extra_work_tests(self.ev.model.function_ast(qual))
        if qual not in self.entered or (primary and not all(not h for _, h in self.entered[qual][1])):
            self.entered[qual] = (list(via), tuple(when))
        return super().walk(qual, selfval, via, when, depth, args)

    def launched_locals(self) -> None:
        from ..runtime.moe import Hop
        for qual, (via, when) in list(self.entered.items()):
            fn = self.ev.model.function_ast(qual)
            path = self.world.path_of(qual)
            if fn is None or not path:
                continue
            mod, scope = self.ev.model.module_scope(qual)
            assigns = {}
            for n in astwalk.walk(fn):
                if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Call):
                    assigns[n.targets[0].id] = n.value
            for n in astwalk.walk(fn):
                jit = self._jit_call(n, assigns, mod, scope)
                if jit is not None:
                    name, files, target = jit
                    hop = Hop(f"{last(qual)} calls {ast.unparse(n.func)[:60]}, a module {last(target)} compiles with the JIT loader",
                              path, n.lineno, qual, ())
                    self._leaf("jit_kernel", f"{name} ({', '.join(files)})" if files else name, path, n.lineno, via + [hop], when)
                    continue
                if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) and isinstance(n.func.value, ast.Name)
                        and n.func.value.id in assigns):
                    continue
                sel = assigns[n.func.value.id]
                target = self.ev.model.resolve(mod, scope, ast.unparse(sel.func))
                if not target or self.G.nodes.get(target, {}).get("kind") != "function":
                    continue
                for c in choices(self.ev, target, {}):
                    if c.qual and self.G.nodes.get(c.qual, {}).get("kind") == "triton_kernel":
                        hop = Hop(f"{last(qual)} launches {n.func.value.id}[...], the kernel {last(target)} returns",
                                  path, n.lineno, qual, ())
                        pick = Hop(c.hops[-1][0], c.hops[-1][1], c.hops[-1][2], target, ())
                        for a in c.assumptions:
                            self.test_sites.setdefault(a[0], (a[2], a[3]))
                        self._leaf("triton_kernel", c.qual, path, n.lineno, via + [hop, pick], when + tuple((a[0], a[1]) for a in c.assumptions))


    def _jit_call(self, n, assigns, mod, scope):
        """``module = _jit_module(); module.op(...)`` where ``_jit_module`` returns ``load_jit(name,
        cuda_files=[...])``: (name, cuda files, the function) of the module compiled at run time."""
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                and n.func.value.id in assigns):
            return None
        sel = assigns[n.func.value.id]
        target = self.ev.model.resolve(mod, scope, ast.unparse(sel.func))
        if target and self.world.memoized(target, self.ev.model):
            return None  # a memoized builder: the walk took its product where it is called, under that call's tests
        fn = self.ev.model.function_ast(target) if target else None
        for r in astwalk.walk(fn) if fn is not None else ():
            # the loader is recognised where it resolves (a function of the tree's JIT package), not by its name
            jit = jit_module(self.world, self.ev, target, r.value, {}) if isinstance(r, ast.Return) and isinstance(r.value, ast.Call) else None
            if jit is not None:
                return str(jit[0] or n.func.attr), jit[1], target
        return None


# PyTorch calls that are a step's work: dense GEMMs (cuBLAS), the embedding gather and collectives (NCCL)
_TORCH_OPS = re.compile(r"torch\.(matmul|mm|bmm|addmm|baddbmm|_scaled_mm|nn\.functional\.(linear|embedding)|embedding|"
                        r"distributed\.(all_reduce|all_gather\w*|reduce_scatter\w*|all_to_all\w*))$")
# a kernel language's primitives (the body of a TileLang kernel being built): part of the kernel
# its builder returns, not ops of their own
_KERNEL_LANGUAGES = ("tilelang.language.",)
# host-side management libraries (device queries): they launch nothing on the GPU
_HOST_LIBS = frozenset({"pynvml"})
# the machinery that compiles or tunes a kernel at first use is not the kernel
_NOT_OPS = ("/utils/compile/", "compile_utils.py", "/autotuner")


def _is_op(lf) -> bool:
    if any(x in lf.path for x in _NOT_OPS):
        return False
    if lf.kind == "library" and (any(x in lf.name for x in ("compile_mode", "autotune", "json.")) or "." not in lf.name):
        return False  # compile machinery, or a value recon could not tie to a library
    return True


def _extra_work_tests(fn) -> set:
    """Tests of the ``if`` statements in ``fn`` that have no else and do not leave the function:
    work added to the path when the test holds, with nothing instead when it does not."""
    from ..engine.asts import source_line as _src
    from ..engine.handoffs import exits
    return {_src(n.test) for n in astwalk.walk(fn) if isinstance(n, ast.If) and not n.orelse and not exits(n.body)} if fn is not None else set()


def _premise_list(sites: dict) -> list[dict]:
    return [{"test": t[:200], "path": at[0], "line": at[1]} for t, at in sorted(sites.items())]


def _leaf(step: Step, lf, extra_tests: frozenset = frozenset(), sites: Optional[dict] = None) -> dict:
    d = step.G.nodes.get(lf.name, {})
    return {"kind": lf.kind, "name": lf.name, "path": lf.path, "line": lf.line, "primary": lf.primary,
            # runs whatever recon could not decide; else `tests` (file:line each) picks it or another
            "decided": lf.decided, "tests": leaf_tests(lf, sites or {}),
            # reached only when a test adding optional work holds (`if grammars: all_reduce(...)`)
            "extra_if": [t for t, h in lf.when if h and t in extra_tests],
            "defined_at": f"{d['path']}:{d.get('line')}" if d.get("path") else None,
            "when": [t if h else (f"not ({t})" if " " in t else f"not {t}") for t, h in lf.when],
            "via": [{"what": h.what.replace(", registered for ('returned by ", ", returned by ").replace("',)", ""),
                     "path": h.path, "line": h.line, "node": h.node} for h in lf.via]}


def _dispatch_dict(d: dict) -> dict:
    return {"dispatcher": d["dispatcher"], "path": d["path"], "line": d["line"],
            "choices": [{"function": c.qual or c.name, "primary": c.primary,
                         "assumptions": [_assume(a) for a in c.assumptions],
                         "returned_at": [{"what": h[0], "path": h[1], "line": h[2]} for h in c.hops]} for c in d["choices"]]}


# --- attention -------------------------------------------------------------------------------------
def attention_backend(step: Step, mode: str = "DECODE") -> dict:
    """The attention backend's name as the runtime view resolved the server arguments: the
    mode's own field (``decode_attention_backend``) when it is set, else ``attention_backend``;
    with the decision the view recorded (the write that settled it, its test, or the flag)."""
    w, state = step.world, step.world.state
    order = ("decode_attention_backend", "attention_backend") if mode == "DECODE" else ("prefill_attention_backend", "attention_backend")
    if w.schema is None:
        return {"value": None, "field": "attention_backend", "source": "no ServerArgs", "path": None, "line": None, "test": "", "assumed": []}
    for f in order:
        v = state.get(f)
        if not isinstance(v, str) and f != order[-1]:
            continue
        d = state.decisions.get(f)
        if d is not None:
            return {"value": v if isinstance(v, str) else None, "field": f, "source": d.source, "path": d.path,
                    "line": int(d.line) if str(d.line).isdigit() else d.line, "test": d.test or "", "assumed": []}
        decl = w.schema.fields.get(f)
        return {"value": v if isinstance(v, str) else None, "field": f, "source": "default",
                "path": decl.path if decl else None, "line": decl.line if decl else None, "test": "", "assumed": []}
    return {"value": None, "field": "attention_backend", "source": "not decided", "path": None, "line": None, "test": "", "assumed": []}


def attention(step: Step, mode: str = "DECODE") -> dict:
    out, prim = attention_class(step, mode)
    if prim is None:
        return out
    inst = prim.made or Instance(prim.qual)
    meth = None
    want = "forward_decode" if mode == "DECODE" else "forward_extend"
    for c in step.world.mro(prim.qual):
        if step.G.nodes.get(f"{c}.{want}", {}).get("kind") == "function":
            meth = want
            break
        if step.G.nodes.get(f"{c}.forward", {}).get("kind") == "function":
            meth = "forward"
            break
    entry = step.world.method(prim.qual, meth or want)
    out["forward_context"] = step.publish_backend(inst, {q for q in (entry, step.world.method(prim.qual, "forward")) if q})
    fb = step.forward_batch(mode)
    got = step.walk(inst, meth or want, {"forward_batch": fb} if fb is not None else None, skip=set())
    out.update(got)
    # the model runner builds the step's attention metadata before the model's forward
    # (``self.attn_backend.init_forward_metadata(forward_batch)``): its ops run once a step
    if step.world.method(prim.qual, "init_forward_metadata"):
        meta = step.walk(inst, "init_forward_metadata", {"forward_batch": fb} if fb is not None else None, skip=set())
        have = {(lf["name"], lf["path"], lf["line"]) for lf in out.get("leaves", [])}
        added = [lf for lf in meta["leaves"] if (lf["name"], lf["path"], lf["line"]) not in have]
        for lf in added:
            lf["metadata"] = True  # built once a step, not once a layer
        out["leaves"] = out.get("leaves", []) + added
        out["metadata_entry"] = meta["entry"]
    return out


def attention_class(step: Step, mode: str = "DECODE") -> tuple:
    """The backend class the registry's factory for the mode's backend builds (``backend_class``),
    with the choice it was made from; nothing walked. (out, the primary choice or None)."""
    name = attention_backend(step, mode)
    out = {"kind": "attention", "backend_name": name, "gates": list(name.get("assumed", []))}
    if not name.get("value"):
        out["note"] = "the attention backend is not settled statically (no write fires for this configuration)"
        return out, None
    regs = [r for r in registrations(step.world) if r[0] == (name["value"],) and "attention" in r[1]]
    if not regs:
        out["note"] = f"no attention backend registered as {name['value']!r} in this tree"
        return out, None
    keys, deco, factory, path, line, _ = regs[0]
    out["registry"] = {"decorator": deco, "factory": factory, "path": path, "line": line}
    fn = step.ev.model.function_ast(factory)
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args] if fn is not None else []
    cs = [c for c in choices(step.ev, factory, {params[0]: step.runner()} if params else {}) if c.constructs]
    if not cs:
        out["note"] = f"the factory {last(factory)} builds no class recon can follow"
        return out, None
    prim = cs[0]
    out["backend_class"] = prim.qual
    out["gates"] += [_assume(a) for a in prim.assumptions]
    out["class_returned_at"] = [{"what": h[0], "path": h[1], "line": h[2]} for h in prim.hops]
    out["other_classes"] = [{"class": c.qual, "assumptions": [_assume(a) for a in c.assumptions]} for c in cs[1:4]]
    return out, prim


# --- dense GEMMs -----------------------------------------------------------------------------------
def dense(step: Step) -> dict:
    out, inst = dense_method(step)
    if inst is not None:
        out.update(step.walk(inst, "apply"))
    return out


def dense_method(step: Step, prefix: Optional[str] = None) -> tuple:
    """The linear method a dense layer gets (``method``; ``none_from`` when the quant config's
    ``get_quant_method`` returns None for it, so the layer stays unquantized); nothing walked.
    (out, the method object to walk, or None)."""
    w = step.world
    from ..runtime.moe import quant_method_name
    name, source = quant_method_name(w, w.state)
    out = {"kind": "dense_gemm", "quant_method": name, "quant_source": source, "gates": []}
    lin = step.classes("LinearBase", "layers/linear.py")
    if not lin:
        out["note"] = "no LinearBase class in this tree"
        return out, None
    if name is None:
        # without a quant config LinearBase picks its method itself (`if quant_config is None:
        # self.quant_method = UnquantizedLinearMethod()`): that write, its tests evaluated
        from ..runtime.moe import unquantized_outcomes
        got = unquantized_outcomes(w, step.ev, LayerObj(lin[0], frozenset(w.mro(lin[0]))))
        if not got:
            out["note"] = "the checkpoint is not quantized and LinearBase's own choice of method could not be read"
            return out, None
        inst = got[0]["instance"]
        out["method"] = got[0]["method"]
        out["gates"] = [{"test": a["test"], "holds": a["holds"], "path": a["path"], "line": a["line"]} for a in got[0]["assumptions"]]
        out["method_returned_at"] = {"path": got[0]["path"], "line": got[0]["line"], "how": "LinearBase sets it when quant_config is None"}
    else:
        reg = registry(w).get(name)
        if reg is None:
            out["note"] = f"quant method {name!r} is not in this tree's quantization registry"
            return out, None
        ccls = reg[0]
        out["config_class"] = ccls
        gqm = w.method(ccls, "get_quant_method")
        fn = step.ev.model.function_ast(gqm) if gqm else None
        if fn is None:
            out["note"] = "get_quant_method could not be read"
            return out, None
        cfg = from_config(w, step.ev, ccls) or Instance(ccls)
        params = [a.arg for a in fn.args.args]
        env = {params[0]: cfg}
        if len(params) > 1:
            env[params[1]] = LayerObj(lin[0], frozenset(w.mro(lin[0])))
        if len(params) > 2 and prefix is not None:
            env[params[2]] = prefix  # the named layer (``model.layers.3.self_attn.o_proj``)
        mod, scope = step.ev.model.module_scope(gqm)
        before = w.guesses
        outs = step.ev.explore(fn.body, env, mod, scope, w.path_of(gqm))
        out["guesses"] = w.guesses - before  # values inside that the primary rule chose: not decided
        ranked = sorted((o for o in outs if not o.raises), key=lambda o: sum(1 for a in o.assumptions if a[1]))
        if ranked and ranked[0].value is None:
            # no method for a linear layer of this checkpoint: SGLang builds LinearBase with none only
            # for layers the checkpoint leaves unquantized (its ignored layers): said, not hidden
            out["note"] = (f"{last(gqm)} returns None for a LinearBase layer of this checkpoint "
                           f"[{w.path_of(gqm)}:{ranked[0].line}]: its dense layers are the ones it leaves unquantized")
            out["none_from"] = {"path": w.path_of(gqm), "line": ranked[0].line}
            un = step.classes("UnquantizedLinearMethod")
            if un:
                out["method"] = un[0]
                return out, Instance(un[0])
            return out, None
        outs = [o for o in ranked if isinstance(o.value, Instance)]
        # ways it ends with no method recon can name (an unknown value, a None after another): other answers
        out["unknown_outcomes"] = [{"line": o.line, "assumptions": [_assume(a) for a in o.assumptions]}
                                   for o in ranked if not isinstance(o.value, Instance)]
        if not outs:
            out["note"] = f"{last(gqm)} returns no linear method recon can follow for a LinearBase layer"
            return out, None
        inst = outs[0].value
        out["method"] = inst.cls
        out["gates"] = [_assume(a) for a in outs[0].assumptions]
        out["method_returned_at"] = {"path": w.path_of(gqm), "line": outs[0].line}
        out["other_methods"] = [{"method": o.value.cls, "assumptions": [_assume(a) for a in o.assumptions]} for o in outs[1:3]]
    return out, inst


# --- MoE (the runtime view) ------------------------------------------------------------------------
def moe(view) -> dict:
    m = view.moe
    if not m:
        return {}
    return {"kind": "moe", "quant_method": m.get("quant_method"), "config_class": m.get("config_class"),
            "method": m.get("method"), "entry": m.get("apply"),
            "gates": m.get("assumed", []),
            "leaves": [{k: v for k, v in lf.items()} for lf in m.get("leaves", [])],
            "switches": m.get("switches", []), "construction": m.get("construction", []),
            "walked": m.get("walked", []), "calls": m.get("calls", {}), "forks": m.get("forks", []),
            "test_sites": m.get("test_sites", {}),
            "premise_decided": m.get("premise_decided", []),
            "backend": view.server_args.get("moe_runner_backend"),
            "alternatives": view.alternatives}


# --- the other layer kinds -------------------------------------------------------------------------
def model_class(step: Step) -> Optional[str]:
    """The model class SGLang's registry serves for the first architecture: a class of that name in
    a module under ``models/`` that names it in its ``EntryClass``."""
    for arch in step.ctx.model.architectures:
        for q in step.classes(arch, "/models/"):
            path = step.G.nodes[q]["path"]
            tree = step.world.module_ast(path)
            for st in tree.body if tree is not None else ():
                if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in st.targets) \
                        and arch in {n.id for n in astwalk.walk(st.value) if isinstance(n, ast.Name)}:
                    return q
    return None


def constructed_classes(step: Step, cls: str) -> dict:
    """In-tree classes the model's module constructs (``RMSNorm(...)``, ``VocabParallelEmbedding(...)``),
    each with its first construction call."""
    d = step.G.nodes.get(cls, {})
    if not d.get("path"):
        return {}
    module = step.world._module_of(cls)
    tree = step.world.module_ast(d["path"])
    found = {}
    for n in astwalk.walk(tree) if tree is not None else ():
        if isinstance(n, ast.Call):
            try:
                dotted = ast.unparse(n.func)
            except Exception:
                continue
            q = step.ev.model.resolve(module, "", dotted)
            if q and step.G.nodes.get(q, {}).get("kind") == "class" and (q not in found or n.lineno < found[q].lineno):
                found[q] = n
    return dict(sorted(found.items()))


def built(step: Step, cls: str, call: Optional[ast.Call], mcls: Optional[str]) -> Instance:
    """An object of ``cls`` made by the model's own construction call: the arguments it can tell
    (``LogitsProcessor(config)``: the checkpoint's config.json) bound to ``__init__``'s parameters."""
    inst = Instance(cls)
    if call is not None and mcls:
        mod = step.world._module_of(mcls)
        env = {"config": step.world.hf}
        # the enclosing function's other parameters are not known here (``compress_ratio_override``
        # passed through a decoder layer's constructor): unknown, never a name looked up elsewhere
        tree = step.world.module_ast(step.G.nodes.get(mcls, {}).get("path", ""))
        for fn in astwalk.walk(tree) if tree is not None else ():
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.lineno <= call.lineno <= (fn.end_lineno or fn.lineno) \
                    and any(n is call for n in astwalk.walk(fn)):
                for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs:
                    if a.arg not in ("self", "config"):
                        env.setdefault(a.arg, UNKNOWN)
        step.world.bind_init(inst, call, step.ev, env, mod, "", 0)
        inst.attrs["__args__"] = {k: v for k, v in inst.attrs.get("__args__", {}).items() if v is not UNKNOWN}
    return inst


def attention_module(step: Step, mcls: Optional[str]) -> Optional[dict]:
    """The model's own attention module: a class the model's module constructs whose constructor
    builds SGLang's ``RadixAttention`` (the layer that hands q, k, v to the backend). Its ``forward``
    is walked in decode mode for the kernels the model code launches itself around the backend
    (the compressor, the indexer, rotary, the quantization of the output projection's input)."""
    radix = set(step.classes("RadixAttention", "layers/radix_attention"))
    made = constructed_classes(step, mcls) if mcls and radix else {}
    for q, call in made.items():
        node = step.world._class_ast(q)
        init = next((st for st in getattr(node, "body", ()) if isinstance(st, ast.FunctionDef) and st.name == "__init__"), None)
        mod = step.world._module_of(q)
        if init is None or not any(isinstance(n, ast.Call) and plain_dotted(n.func)
                                   and step.ev.model.resolve(mod, f"{node.name}.__init__", plain_dotted(n.func)) in radix
                                   for n in astwalk.walk(init)):
            continue
        inst = built(step, q, call, mcls)
        got = step.walk(inst, "forward")
        if not got["entry"]:
            continue
        return {"kind": "attention_module", "class": q, **got}
    return None


def decoder_layer(step: Step, mcls: Optional[str], attn_cls: Optional[str]) -> Optional[dict]:
    """The decoder layer's own work around its submodules: the class the model's module constructs
    whose constructor builds the attention module (``self.self_attn = MQALayer(...)``), its
    ``forward`` walked in decode mode, keeping only what its own methods and the functions they call
    launch (DeepSeek-V4's hyper-connection pre-norm, ``self.hc_pre``); the submodules it calls
    (attention, MLP, norms) are the other layer kinds of the map."""
    if not mcls or not attn_cls:
        return None
    made = constructed_classes(step, mcls)
    for q, call in made.items():
        node = step.world._class_ast(q)
        init = next((st for st in getattr(node, "body", ()) if isinstance(st, ast.FunctionDef) and st.name == "__init__"), None)
        mod = step.world._module_of(q)
        if init is None or q == attn_cls or not any(
                isinstance(n, ast.Call) and plain_dotted(n.func)
                and step.ev.model.resolve(mod, f"{node.name}.__init__", plain_dotted(n.func)) == attn_cls for n in astwalk.walk(init)):
            continue
        inst = built(step, q, call, mcls)
        got = step.walk(inst, "forward", follow_modules=False)
        if not got["entry"]:
            return None
        own = set(step.world.mro(q))

        def ours(lf) -> bool:
            # every hop in the layer's own methods or in module-level functions (not another module's methods)
            for h in lf.get("via", []):
                parent = (h.get("node") or "").rsplit(".", 1)[0]
                if parent in own:
                    continue
                if step.G.nodes.get(parent, {}).get("kind") == "class":
                    return False
            return True

        got["leaves"] = [lf for lf in got["leaves"] if ours(lf)]
        if not got["leaves"]:
            return None  # a layer that only calls its submodules (Llama's): nothing of its own to map
        return {"kind": "decoder_layer", "class": q, **got}
    return None


def simple_layers(step: Step, mcls: Optional[str]) -> list[dict]:
    out = []
    made = constructed_classes(step, mcls) if mcls else {}
    for kind, where in _LAYER_MODULES:
        # one class a kind: the most basic one the model builds there (ParallelLMHead, a
        # VocabParallelEmbedding whose weight the logits processor multiplies, is not the embedding)
        cands = sorted((q for q in made if where in step.G.nodes[q].get("path", "")), key=lambda q: (len(step.world.mro(q)), q))
        if cands:
            inst = built(step, cands[0], made[cands[0]], mcls)
            try:
                out.append({"kind": kind, "class": cands[0], **step.walk(inst, "forward")})
            except RecursionError:
                out.append({"kind": kind, "class": cands[0], "leaves": [], "note": "recon ran out of depth following this layer's code"})
    sampler = step.classes("Sampler", "layers/sampler.py")
    if sampler:
        try:
            out.append({"kind": "sampling", "class": sampler[0], **step.walk(Instance(sampler[0]), "forward")})
        except RecursionError:
            out.append({"kind": "sampling", "class": sampler[0], "leaves": [], "note": "recon ran out of depth following this layer's code"})
    return out


def communication(step: Step) -> dict:
    tp = step.world.state.get("tp_size")
    tp = tp if isinstance(tp, int) else 1
    d = step.world.schema.fields.get("tp_size") if step.world.schema else None
    out = {"kind": "communication", "tp_size": tp, "decided": {"path": d.path, "line": d.line} if d else None, "leaves": []}
    if tp <= 1:
        out["note"] = "tp_size 1: no tensor-parallel all-reduce on the step"
        return out
    ar = sorted(n for n, dd in step.G.nodes(data=True) if dd.get("kind") == "function" and n.endswith(".tensor_model_parallel_all_reduce")
                and "/srt/" in dd.get("path", ""))
    if ar:
        dd = step.G.nodes[ar[0]]
        w = StepWalker(step.world, step.ev, None)
        try:
            w.walk(ar[0], None, [], (), 0)
            w.launched_locals()
        except RecursionError:
            pass
        out["entry"] = ar[0]
        out["leaves"] = [_leaf(step, lf) for lf in w.leaves if _is_op(lf)] or [
            {"kind": "collective", "name": ar[0], "path": dd["path"], "line": dd.get("line"), "primary": True, "when": [], "via": []}]
    out["sites"] = collective_sites(step, model_class(step))
    if not out["sites"]:
        out["note"] = f"tp_size {tp}: the model's module calls no tensor-parallel collective recon can find"
    return out


_COLLECTIVE = re.compile(r"(all_reduce|all_gather|reduce_scatter)")


def collective_sites(step: Step, mcls: Optional[str]) -> list[dict]:
    """Where the model's code places the tensor-parallel collectives of a layer: calls in the model's
    module to the tree's collective functions (``tensor_model_parallel_all_reduce``,
    ``attn_tp_all_reduce``, defined under ``distributed/`` or in the DP-attention module), the
    ``RowParallelLinear`` layers it builds that reduce their own output (``reduce_results`` not
    false) and the ``LayerCommunicator`` it builds (the all-reduce between attention and MLP);
    each with the tests around it, evaluated where the configuration decides them."""
    d = step.G.nodes.get(mcls or "", {})
    tree = step.world.module_ast(d["path"]) if d.get("path") else None
    if tree is None:
        return []
    from ..engine.asts import source_line as _src
    from ..engine.handoffs import guarded_calls
    mod = step.world._module_of(mcls)
    out = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        # the construction, and the methods a step reaches from forward through self.method(...)
        reach, todo = {"__init__"}, ["forward"]
        while todo:
            m = todo.pop()
            if m in reach or m not in methods:
                continue
            reach.add(m)
            todo += [n.func.attr for n in astwalk.walk(methods[m]) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                     and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]
        for fn in (methods[m] for m in sorted(reach) if m in methods):
            scope = f"{cls.name}.{fn.name}"
            for call, guards in guarded_calls(fn):
                name = plain_dotted(call.func)
                q = step.ev.model.resolve(mod, scope, name) if name else None
                node = step.G.nodes.get(q or "", {})
                path = node.get("path", "")
                what = None
                if node.get("kind") == "function" and _COLLECTIVE.search(q.rsplit(".", 1)[-1]) \
                        and ("/distributed/" in path or path.endswith("dp_attention.py")):
                    what = f"{last(q)}(...)"
                elif node.get("kind") == "class" and node.get("name") == "RowParallelLinear":
                    rr = next((k.value for k in call.keywords if k.arg == "reduce_results"), None)
                    if rr is not None and step.world.literal(rr) is False:
                        continue
                    what = f"RowParallelLinear({'reduce_results=' + ast.unparse(rr) if rr is not None else 'reduce_results default True'}) all-reduces its output"
                elif node.get("kind") == "class" and node.get("name") == "LayerCommunicator":
                    what = "LayerCommunicator: all-reduce between attention and MLP, by the layer's scatter modes (not followed)"
                if what is None:
                    continue
                tests = []
                for t, holds in guards:
                    v = step.ev.eval(t, {}, mod, scope)
                    if v is not UNKNOWN and isinstance(v, (bool, int, float, str, type(None))) and bool(v) != holds:
                        break
                    if v is UNKNOWN or not isinstance(v, (bool, int, float, str, type(None))):
                        tests.append(_src(t)[:140] if holds else f"not ({_src(t)[:140]})")
                else:
                    out.append({"what": what, "in": scope, "path": d["path"], "line": call.lineno, "when": tests})
    return out
