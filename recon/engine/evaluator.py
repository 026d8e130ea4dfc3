"""One evaluator for SGLang's dispatch code, with one notion of "unknown".

It extends the arch-gate interpreter (device probes, gates, platform tables, module flags) with
the values a dispatch decision reads besides the device: server arguments in their resolution
state, the checkpoint's config.json, attributes of in-tree objects (from the writes their classes
make), in-tree enums and their predicate methods, declared environment-variable defaults, and the
layer a quant method is asked for. ``explore`` runs a function body and keeps *every* outcome a
test it cannot decide allows, each with the assumptions that lead to it, so a caller can say
"both, depending on X" instead of picking one.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .. import bounded
from .interp import STEP_BUDGET, UNKNOWN, Interpreter, FuncHandle, Raised, Returned, in_place_call, truth_value, unpack
from ..names import dotted_name
from .values import MISSING, ClassRef, EnumVal, ExtRef, FuncRef, HFConfig, Instance, LayerObj, ModelPath, Partial, ServerArgsObj
from .asts import global_names, source_line, tree_memo
from .steptensors import AtLeast, StepTensor, TensorShape
from .. import astwalk

MAX_OUTCOMES = 16


@dataclass
class Outcome:
    """One way a function body can end: what it returned (or ``raises``), and what was assumed."""

    value: Any
    assumptions: tuple = ()  # ((test source, assumed truth, path, line), ...)
    line: int = 0
    raises: bool = False
    env: dict = field(default_factory=dict)


# filesystem calls on a path: "wrap" keeps the path, "file" asks for a single file, "dir" for more
_PATH_FUNCS = {"Path": "wrap", "pathlib.Path": "wrap", "os.path.isfile": "file", "path.isfile": "file",
               "os.path.isdir": "dir", "os.path.exists": "dir", "path.isdir": "dir", "path.exists": "dir"}
_PATH_METHODS = {"is_file": False, "is_dir": UNKNOWN, "exists": UNKNOWN}


class Evaluator(Interpreter):
    def __init__(self, world, dev, gate_model):
        super().__init__(world.tree, dev, gate_model)
        self.world = world
        self._primary_depth = 0
        self._globals: dict = {}
        self.global_sites: dict = {}  # (module, name) -> (value, path, line, function, assumptions)
        # module -> {name: display expression bound once at top level}: the tree's alone, shared by
        # every scenario of it (the expressions are kept, not the files they were read from)
        self._tables: dict = tree_memo(world.tree).setdefault("module_tables", {})
        self.step_reads = 0  # reads of a step tensor's size (recon.engine.steptensors): the premise used

    # --- helpers -------------------------------------------------------------------------------
    def note(self, key: str, text: str) -> None:
        self.world.notes.setdefault(key, text)

    def _class_of_ref(self, v) -> Optional[str]:
        if isinstance(v, ClassRef):
            return v.qual
        if isinstance(v, FuncHandle) and v.qual and self.model.G.nodes.get(v.qual, {}).get("kind") == "class":
            return v.qual
        return None

    def call_function(self, qual, args: list, kwargs: dict, depth: int):
        """The base interpreter's; where a test inside leaves the result open, the primary rule
        (every undecided test false) decides it, and the tests it took are noted."""
        got = super().call_function(qual, args, kwargs, depth)
        if got is UNKNOWN and qual and qual not in self.model.gates and self._primary_depth < 2 \
                and not any(a is UNKNOWN for a in list(args) + list(kwargs.values())):
            self._primary_depth += 1
            try:
                got = self.world.primary_call(qual, None, args, kwargs, self)
            finally:
                self._primary_depth -= 1
        return got

    def call_method(self, qual: str, selfval, args: list, kwargs: dict, depth: int):
        """Run an in-tree method with ``self`` bound to ``selfval`` (the base interpreter drops it)."""
        if depth > self.depth_limit:
            return UNKNOWN
        fn = self.model.function_ast(qual)
        if fn is None:
            return UNKNOWN
        names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        env: dict[str, Any] = {}
        for p, d in zip(names[len(names) - len(fn.args.defaults):], fn.args.defaults):
            env[p] = self.world.literal(d)
        if names:
            env[names[0]] = selfval
        for p, v in zip(names[1:], args):
            env[p] = v
        env.update(kwargs)
        mod, scope = self.model.module_scope(qual)
        try:
            self.exec_block(fn.body, env, mod, scope, depth + 1)
        except Raised:
            if self.in_try:
                raise  # a try around the call being evaluated may catch it
            return UNKNOWN
        except Returned as r:
            return r.value
        return None

    def _exec_stmts(self, stmts, env, mod, scope, depth):
        """The base interpreter's, except that an undecided test whose one way raises is taken the
        other way: a precondition (``if not is_flashinfer_available(): raise``) is assumed met, as
        the code that runs at all must have met it; the assumption is noted."""
        for i, st in enumerate(stmts):
            if isinstance(st, ast.If):
                raises = [bool(b) and isinstance(b[-1], ast.Raise) for b in (st.body, st.orelse)]
                if raises[0] != raises[1] and self.eval(st.test, env, mod, scope, depth) is UNKNOWN:
                    # a precondition (an optional package, a driver, a checkpoint property): say it was assumed
                    text = f"assumed the precondition holds: {'not ' if raises[0] else ''}({_src(st.test)[:100]})"
                    self.world.notes.setdefault(f"pre:{_src(st.test)}", text)
                    # its other way is a raise, not another kernel or op: it changes no choice
                    self.world.notes.idle.add(text)
                    super().exec_block(st.orelse if raises[0] else st.body, env, mod, scope, depth)
                    continue
            if isinstance(st, ast.For) and isinstance(st.target, ast.Name) and not st.orelse:
                seq = self.eval(st.iter, env, mod, scope, depth)
                if isinstance(seq, (list, tuple, dict, str, set)) and len(seq) <= 64:
                    # a loop over a known sequence: run its body per element (break ends it)
                    for item in (sorted(seq, key=repr) if isinstance(seq, set) else seq):
                        env[st.target.id] = item
                        if any(isinstance(x, ast.Break) for x in st.body) or any(
                                isinstance(n, (ast.Break, ast.Continue)) for x in st.body for n in astwalk.walk(x)):
                            raise Returned(UNKNOWN)  # control flow inside: out of this evaluator's depth
                        super().exec_block(st.body, env, mod, scope, depth)
                    continue
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                # a name bound to a class or function keeps it (``cls = Fast if X else Slow; cls()``):
                # it is unknown only where it is used as a truth value
                self._step()
                env[st.targets[0].id] = self._eval_kept(st.value, env, mod, scope, depth)
                continue
            super().exec_block([st], env, mod, scope, depth)

    def _eval_kept(self, node, env, mod, scope, depth):
        if depth == 0:
            self.steps = STEP_BUDGET
        try:
            v = self._eval(node, env, mod, scope, depth)
        except Returned:
            raise
        except Exception:  # as in ``eval``: what cannot be evaluated is unknown
            return UNKNOWN
        return v if isinstance(v, (FuncHandle, ClassRef, FuncRef, Partial)) else truth_value(v)

    # --- expressions ---------------------------------------------------------------------------
    def _eval_core(self, node, env, mod, scope, depth):
        if isinstance(node, ast.Attribute):
            got = self._attribute(node, env, mod, scope, depth)
            if got is not NotImplemented:
                return got
        elif isinstance(node, ast.Call):
            got = self._call_known(node, env, mod, scope, depth)
            if got is not NotImplemented:
                return got
        elif isinstance(node, ast.Name) and node.id not in env:
            slot = self.world.slot(mod, node.id, self, depth)
            if slot is not NotImplemented:
                return slot
        elif isinstance(node, ast.Tuple) and isinstance(node.ctx, ast.Load):
            # keep callables as values: `return cutlass_fused_moe, ActivationType`
            if not any(isinstance(e, ast.Starred) for e in node.elts):
                return bounded.build(tuple, [self._eval_raw(e, env, mod, scope, depth) for e in node.elts])
        elif isinstance(node, ast.BoolOp):
            # Python's value semantics (`cfg or {}` is the dict), unknown where it matters
            last, unknown = None, False
            for v in node.values:
                x = truth_value(self._eval(v, env, mod, scope, depth))
                if x is UNKNOWN:
                    unknown = True
                    continue
                last = x
                if isinstance(node.op, ast.And) and not x:
                    return x
                if isinstance(node.op, ast.Or) and x:
                    return x
            return UNKNOWN if unknown else last
        elif isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
            keys = [truth_value(self._eval(k, env, mod, scope, depth)) for k in node.keys]
            if any(k is UNKNOWN or isinstance(k, (dict, list)) for k in keys):
                return UNKNOWN
            return bounded.build_dict((k, truth_value(self._eval(v, env, mod, scope, depth))) for k, v in zip(keys, node.values))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            a = truth_value(self._eval(node.left, env, mod, scope, depth))
            b = truth_value(self._eval(node.comparators[0], env, mod, scope, depth))
            if a is UNKNOWN and not (isinstance(node.left, ast.Constant)) or b is UNKNOWN and not isinstance(node.comparators[0], ast.Constant):
                return UNKNOWN
            same = (a is b) or (a is MISSING and b is None) or (isinstance(a, EnumVal) and a == b)
            return same if isinstance(node.ops[0], ast.Is) else not same
        return super()._eval(node, env, mod, scope, depth)

    def _receiver(self, node, env, mod, scope, depth):
        """The value of an attribute's receiver when it is one of ours, else NotImplemented."""
        base = node
        while isinstance(base, (ast.Attribute, ast.Subscript)):
            base = base.value
        if isinstance(base, ast.Name) and base.id in env or isinstance(base, ast.Call):
            return self._eval(node, env, mod, scope, depth)
        return NotImplemented

    def _bag_field(self, node: ast.Attribute, mod, scope):
        """``get_exec().moe.flashinfer_mxfp4_moe_precision``: a server argument read through a
        namespace accessor. The accessor is an in-tree function called without arguments whose
        return names the namespace by a constant (``config_bag("exec")``); the field's declaring
        class is that namespace plus the groups read on the way (``ExecMoe`` = exec + moe)."""
        schema, state = self.world.schema, self.world.state
        info = schema.fields.get(node.attr) if schema is not None and state is not None else None
        if info is None or not (info.group or info.namespace):
            return NotImplemented
        groups, base = [], node.value
        while isinstance(base, ast.Attribute):
            groups.append(base.attr)
            base = base.value
        if not (isinstance(base, ast.Call) and not base.args and not base.keywords and dotted_name(base.func)) or len(groups) > 2:
            return NotImplemented
        qual = self.model.resolve(mod, scope, dotted_name(base.func))
        spaces = self.world.namespaces_returned(qual) if qual else ()
        want = info.group.lower()
        tail = "".join(reversed(groups)).lower().replace("_", "")
        if any(ns.lower().replace("_", "") + tail == want for ns in spaces):
            return state.get(node.attr)
        # a ServerArgs field marked with the namespace it is projected into (``NS("exec.moe")``)
        if info.namespace and any(".".join([ns] + list(reversed(groups))) == info.namespace for ns in spaces):
            return state.get(node.attr)
        return NotImplemented

    def _attribute(self, node: ast.Attribute, env, mod, scope, depth, missing_ok: bool = False):
        got = self._attribute_raw(node, env, mod, scope, depth)
        # an attribute the object does not have raises at run time; only getattr/hasattr see it
        return UNKNOWN if got is MISSING and not missing_ok else got

    def _attribute_raw_core(self, node: ast.Attribute, env, mod, scope, depth):
        w = self.world
        dotted = dotted_name(node)
        prop = self.model.platform_property(dotted) if dotted else None
        if prop:  # get_platform().is_sm120: a platform property looked up through a probe table
            probe = self._probe(prop.rsplit(".", 1)[-1], prop, [])  # a device probe (is_cuda): the device answers
            return probe if probe is not KeyError else self.gate_value(prop, depth + 1)
        if dotted and re.search(r"platform", dotted.rsplit(".", 1)[0], re.I):
            probe = self._probe(node.attr, dotted, [])  # get_platform().is_hip / .is_cuda
            if probe is not KeyError:
                return probe
        bag = self._bag_field(node, mod, scope)
        if bag is not NotImplemented:
            return bag
        recv = self._receiver(node.value, env, mod, scope, depth)
        if recv is NotImplemented:
            # a class attribute: an enum member, or a constant in the class body
            ref = self._name(dotted_name(node.value), mod, scope, depth) if dotted_name(node.value) else None
            cls = self._class_of_ref(ref)
            if cls:
                member = w.class_constant(cls, node.attr)
                if member is not NotImplemented:
                    return member
            slot = w.slot(mod, dotted_name(node), self, depth)
            if slot is not NotImplemented:
                return slot
            if not isinstance(node.value, (ast.Attribute, ast.Subscript, ast.IfExp)):
                return NotImplemented
            # Enum.MEMBER.value, TABLE["key"].name, (A if x else B).name
            recv = self._eval(node.value, env, mod, scope, depth)
            if not (isinstance(recv, (EnumVal, Instance, HFConfig, ServerArgsObj)) or self._class_of_ref(recv)):
                return NotImplemented
        a = node.attr
        if isinstance(recv, StepTensor):
            got = recv.attr(a)
            if isinstance(got, TensorShape):
                self.step_reads += 1  # the premise (the step's tensors are not empty) is read here
            return got
        if isinstance(recv, ServerArgsObj):
            got = recv.state.get(a)
            if got is UNKNOWN and w.schema is not None and a not in w.schema.fields:
                mc = w.server_args_model_config_attr(a)
                if mc is not None:
                    return mc
            return got
        if isinstance(recv, HFConfig):
            return recv.attr(a)
        if isinstance(recv, Instance):
            v = w.instance_attr(recv, a, self, depth)
            if v is MISSING and (meth := w.method(recv.cls, a)):
                if _is_property(self.model.function_ast(meth)):
                    # ``model_config.has_asymmetric_kv``: a property's value is its getter's result,
                    # unknown where the getter cannot be decided (never the truthy method itself)
                    return self.call_method(meth, recv, [], {}, depth + 1)
                return FuncRef(meth, (), (), recv)  # a bound method taken as a value: return self.forward_cuda
            if (v is MISSING or v is UNKNOWN) and w.is_field(a) and any(
                    isinstance(x, ServerArgsObj) for x in recv.attrs.get("__args__", {}).values()):
                # a view built over the server arguments answers their fields
                return next(x for x in recv.attrs["__args__"].values() if isinstance(x, ServerArgsObj)).state.get(a)
            return v
        if isinstance(recv, EnumVal):
            return recv.value if a == "value" else recv.name if a == "name" else UNKNOWN
        if isinstance(recv, LayerObj):
            return w.layer_own_attr(recv, a, self, depth)
        cls = self._class_of_ref(recv)
        if cls:
            member = w.class_constant(cls, a)
            if member is not NotImplemented:
                return member
        slot = w.slot(mod, dotted_name(node), self, depth) if dotted_name(node) else NotImplemented
        if slot is not NotImplemented:
            return slot
        return UNKNOWN if recv is UNKNOWN or isinstance(recv, FuncHandle) else NotImplemented

    def _call_known_core(self, node: ast.Call, env, mod, scope, depth):
        w = self.world
        f = node.func
        ev = lambda n: truth_value(self._eval(n, env, mod, scope, depth))  # noqa: E731
        got = self._model_path_call(node, env, mod, scope, depth)
        if got is not NotImplemented:
            return got
        if not node.args and not node.keywords and self._returns_server_args(f, mod, scope):
            return ServerArgsObj(self.world.state)
        if isinstance(f, ast.Name) and f.id not in env:
            # the attribute's name may be a constant or a value the helper was handed
            # (``def _hf_attr(config, name): return getattr(config, name, None)``)
            attr_name = (node.args[1].value if isinstance(node.args[1], ast.Constant) else ev(node.args[1])) \
                if f.id in ("getattr", "hasattr") and len(node.args) >= 2 else None
            if isinstance(attr_name, str) and attr_name.isidentifier():
                obj = self._eval(node.args[0], env, mod, scope, depth)
                if f.id == "hasattr" and isinstance(obj, FuncHandle) and obj.dotted == "torch" and not obj.qual:
                    return True  # torch's device modules (torch.cuda, torch.xpu) exist in every build
                got = self._attribute(ast.Attribute(value=node.args[0], attr=attr_name, ctx=ast.Load()), env, mod, scope, depth, True) \
                    if isinstance(obj, (HFConfig, Instance, ServerArgsObj, EnumVal)) else UNKNOWN
                if f.id == "hasattr":
                    return UNKNOWN if got is UNKNOWN else got is not MISSING
                if got is MISSING:
                    return ev(node.args[2]) if len(node.args) > 2 else UNKNOWN
                return got
            if f.id == "isinstance" and len(node.args) == 2:
                return self._isinstance(node.args[0], node.args[1], env, mod, scope, depth)
        got = self._registry_lookup(node, f, ev, mod, scope)
        if got is not None:
            return got
        if isinstance(f, ast.Attribute):
            # envs.NAME.get() / .is_set() / .value: a declared environment variable
            if f.attr in ("get", "is_set", "value", "get_value") and isinstance(f.value, ast.Attribute):
                got = w.env_field(f.value.attr, f.attr)
                if got is not NotImplemented:
                    return got
            # os.environ.get("X", d) / os.getenv("X", d)
            dotted = dotted_name(f)
            if dotted in ("os.environ.get", "os.getenv", "environ.get") and node.args:
                name = ev(node.args[0])  # a constant, or the name a helper was given
                if isinstance(name, str):
                    dflt = ev(node.args[1]) if len(node.args) > 1 else None
                    return w.env_raw(name, dflt, f"{dotted}({name!r})")
            recv = self._receiver(f.value, env, mod, scope, depth)
            if recv is NotImplemented and dotted_name(f.value):
                recv = self._name(dotted_name(f.value), mod, scope, depth)
                if self._class_of_ref(recv) is None and not isinstance(recv, (EnumVal, Instance)):
                    slot = w.slot(mod, dotted_name(f.value), self, depth)
                    recv = slot if slot is not NotImplemented else NotImplemented
            if isinstance(recv, StepTensor):
                # x.numel(), x.size(0), x.view(-1, h): sizes of a tensor of the step, not empty
                got = recv.call(f.attr, [ev(a) for a in node.args if not isinstance(a, ast.Starred)])
                if isinstance(got, (TensorShape, AtLeast)):
                    self.step_reads += 1
                return got
            if isinstance(recv, dict) and f.attr == "get":
                args = [ev(a) for a in node.args]
                return recv.get(*args) if args and args[0] is not UNKNOWN else UNKNOWN
            if isinstance(recv, HFConfig) and f.attr == "get":
                args = [ev(a) for a in node.args]
                got = recv.attr(args[0]) if args and isinstance(args[0], str) else UNKNOWN
                return (args[1] if len(args) > 1 else None) if got is MISSING else got
            if isinstance(recv, (EnumVal, Instance)):
                cls = recv.cls
                meth = w.method(cls, f.attr)
                if meth:
                    args = [ev(a) for a in node.args if not isinstance(a, ast.Starred)]
                    kwargs = {k.arg: ev(k.value) for k in node.keywords if k.arg}
                    return self.call_method(meth, recv, args, kwargs, depth + 1)
                return UNKNOWN
            if isinstance(recv, FuncHandle) and self._class_of_ref(recv):
                recv = ClassRef(self._class_of_ref(recv))  # Config.from_config(...): a method of an in-tree class
            if isinstance(recv, ClassRef):
                meth = w.method(recv.qual, f.attr)
                if meth:
                    args = [ev(a) for a in node.args if not isinstance(a, ast.Starred)]
                    kwargs = {k.arg: ev(k.value) for k in node.keywords if k.arg}
                    fn = self.model.function_ast(meth)
                    if fn is not None and fn.args.args and fn.args.args[0].arg == "cls":
                        return self.call_method(meth, recv, args, kwargs, depth + 1)  # a classmethod: cls bound
                    return self.call_function(meth, args, kwargs, depth + 1)
            if isinstance(recv, ServerArgsObj):
                args = [ev(a) for a in node.args if not isinstance(a, ast.Starred)]
                kwargs = {k.arg: ev(k.value) for k in node.keywords if k.arg}
                got = w.server_args_method(f.attr, recv, args, kwargs, self, depth)
                if got is not NotImplemented:
                    return got
        # a class called: an enum member by value, or an instance
        target = self._eval(f, env, mod, scope, depth) if isinstance(f, (ast.Name, ast.Attribute, ast.IfExp, ast.Subscript)) else None
        cls = self._class_of_ref(target)
        if cls:
            if w.is_enum(cls) and node.args:
                v = ev(node.args[0])
                return w.enum_member(cls, v) if v is not UNKNOWN else UNKNOWN
            mc = w.model_config()
            if mc is not None and cls == mc.cls:
                return mc  # the server builds one ModelConfig per checkpoint: the world's
            inst = Instance(cls)
            w.bind_init(inst, node, self, env, mod, scope, depth)
            return inst
        return NotImplemented

    def _returns_server_args(self, f, mod, scope) -> bool:
        """``get_global_server_args()``: an in-tree accessor taking no argument whose declared return
        type is the ServerArgs class gives the process's (resolved) server arguments."""
        sch = self.world.schema
        d = dotted_name(f)
        if sch is None or self.world.state is None or not d:
            return False
        q = self.model.resolve(mod, scope, d)
        fn = self.model.function_ast(q) if q and self.model.G.nodes.get(q, {}).get("kind") == "function" else None
        if fn is None or fn.returns is None or fn.args.args or fn.args.posonlyargs:
            return False
        ret = fn.returns.value if isinstance(fn.returns, ast.Constant) and isinstance(fn.returns.value, str) else ast.unparse(fn.returns)
        return ret.rsplit(".", 1)[-1] == sch.class_qual.rsplit(".", 1)[-1]

    def _model_path_call(self, node: ast.Call, env, mod, scope, depth):
        """Filesystem questions about the checkpoint's path (:class:`ModelPath`): it is no single
        file; whether it is a local folder is unknown. ``Path(p)`` keeps it a model path."""
        f = node.func
        dotted = dotted_name(f)
        if dotted in _PATH_FUNCS and len(node.args) == 1 and not self.model.resolve(mod, scope, dotted):
            v = truth_value(self._eval(node.args[0], env, mod, scope, depth))
            if isinstance(v, ModelPath):
                return {"wrap": v, "file": False}.get(_PATH_FUNCS[dotted], UNKNOWN)
        elif isinstance(f, ast.Attribute) and f.attr in _PATH_METHODS and not node.args \
                and isinstance(f.value, ast.Name) and isinstance(env.get(f.value.id), ModelPath):
            return _PATH_METHODS[f.attr]
        return NotImplemented

    def _registry_lookup(self, node: ast.Call, f, ev, mod, scope) -> Optional[FuncRef]:
        """``Pool.get_fused_func("none", "marlin")``: a lookup by constant keys in the container a
        registering decorator (``@register_fused_func("none", "marlin")``) keeps functions in
        gives the function registered under those keys."""
        if not node.args or not isinstance(f, (ast.Name, ast.Attribute)):
            return None
        from .registries import container_names, registrations
        regs = registrations(self.world)
        if not regs:
            return None
        if not all(isinstance(a, (ast.Constant, ast.Name, ast.Attribute)) for a in node.args):
            return None  # registry keys are constants or names bound to them
        args = [ev(a) for a in node.args]
        if not all(isinstance(a, str) for a in args) or not any(tuple(r[0]) == tuple(args) for r in regs):
            return None
        callee = self.world.R.resolve(mod, scope, dotted_name(f)) if dotted_name(f) else None
        reads = container_names(self.world, callee, "load") if callee else frozenset()
        if not reads:
            return None
        for keys, deco, q, path, line, owner in regs:
            if tuple(keys) == tuple(args) and reads & container_names(self.world, self.world.R.resolve(q.rsplit(".", 1)[0], "", deco) or "", "store"):
                return FuncRef(q, tuple(keys), (path, line))
        return None

    def _isinstance(self, obj_node, cls_node, env, mod, scope, depth):
        obj = self._eval(obj_node, env, mod, scope, depth)
        wanted = cls_node.elts if isinstance(cls_node, ast.Tuple) else [cls_node]
        builtin = {"dict": dict, "list": list, "str": str, "int": int, "tuple": tuple, "bool": bool, "float": float, "set": set}
        if all(isinstance(c, ast.Name) and c.id in builtin and c.id not in env for c in wanted):
            if obj is UNKNOWN or isinstance(obj, FuncHandle):
                return UNKNOWN
            return isinstance(obj, tuple(builtin[c.id] for c in wanted))
        quals = []
        for c in wanted:
            ref = self._eval(c, env, mod, scope, depth)
            q = self._class_of_ref(ref)
            if q is None:
                return UNKNOWN
            quals.append(q)
        if isinstance(obj, LayerObj):
            mro = {obj.cls} | set(obj.bases)
        elif isinstance(obj, (Instance, EnumVal)):
            mro = set(self.world.mro(obj.cls))
        elif isinstance(obj, (str, int, float, bool, dict, list, tuple)) or obj is None:
            return False  # a plain value is no instance of an in-tree class (enum members are EnumVal)
        else:
            return UNKNOWN
        return any(q in mro for q in quals)

    # --- exploring a body ----------------------------------------------------------------------
    def explore(self, stmts, env: dict, mod: str, scope: str, path: str = "", depth: int = 0,
                assumed: tuple = ()) -> list[Outcome]:
        """Every way ``stmts`` can end, following only the branches the tests allow."""
        outs: list[Outcome] = []
        self._explore(list(stmts), dict(env), mod, scope, path, depth, tuple(assumed), outs)
        return outs

    def _explore(self, stmts, env, mod, scope, path, depth, assumed, outs) -> bool:
        """False when the block falls through (the caller goes on), True when it ended."""
        for i, st in enumerate(stmts):
            if len(outs) >= MAX_OUTCOMES:
                return True
            if isinstance(st, ast.Return):
                v = self.eval(st.value, env, mod, scope, depth) if st.value is not None else None
                if v is UNKNOWN and st.value is not None:
                    v = self._eval_raw(st.value, env, mod, scope, depth)
                outs.append(Outcome(v, assumed, st.lineno, env=env))
                return True
            if isinstance(st, ast.Raise):
                outs.append(Outcome(None, assumed, st.lineno, raises=True, env=env))
                return True
            if isinstance(st, ast.If):
                t = self.eval(st.test, env, mod, scope, depth)
                if t is UNKNOWN:
                    src = _src(st.test)
                    rest = stmts[i + 1:]
                    for truth, body in ((True, st.body), (False, st.orelse)):
                        a = assumed + ((src, truth, path, st.lineno),)
                        e = dict(env)
                        if not self._explore(list(body), e, mod, scope, path, depth, a, outs):
                            self._explore(rest, e, mod, scope, path, depth, a, outs) or outs.append(Outcome(None, a, 0, env=e))
                    return True
                if self._explore(list(st.body if t else st.orelse), env, mod, scope, path, depth, assumed, outs):
                    return True
                continue
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                env[st.targets[0].id] = self._eval_raw(st.value, env, mod, scope, depth)
            elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Tuple):
                unpack(st.targets[0], self._eval_raw(st.value, env, mod, scope, depth), env)
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                env[st.target.id] = self._eval_raw(st.value, env, mod, scope, depth)
            elif isinstance(st, ast.Assert):
                if self.eval(st.test, env, mod, scope, depth) is False:
                    outs.append(Outcome(None, assumed, st.lineno, raises=True, env=env))
                    return True
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                if self._explore(list(st.body), env, mod, scope, path, depth, assumed, outs):
                    return True
            elif isinstance(st, ast.Try):
                if self._explore(list(st.body), env, mod, scope, path, depth, assumed, outs):
                    return True
            elif isinstance(st, ast.Expr) and in_place_call(st.value, env):
                self._in_place(st.value, env, mod, scope, depth)
            elif isinstance(st, (ast.For, ast.While)):
                if self._explore_loop(st, env, mod, scope, depth, assumed, outs):
                    return True
        return False

    def _in_place(self, call, env, mod, scope, depth) -> None:
        """``names.append(x)`` while exploring: the local bound to the changed copy, or unknown."""
        if depth == 0:
            self.steps = STEP_BUDGET
        try:
            self.apply_in_place(call, env, mod, scope, depth)
        except Returned:
            env[call.func.value.id] = UNKNOWN
        except Exception:
            env[call.func.value.id] = UNKNOWN

    def _explore_loop(self, st, env, mod, scope, depth, assumed, outs) -> bool:
        """A loop while exploring: run exactly where its sequence and every test inside are known
        (``for layer in ignored_layers: normalized.append(...)``); otherwise every name it binds or
        changes is unknown after it, and a loop that may return or raise adds an outcome of
        unknown value, so no caller reads the outcomes after it as all there are."""
        if depth == 0:
            self.steps = STEP_BUDGET
        trial = dict(env)
        try:
            if isinstance(st, ast.While):
                raise Returned(UNKNOWN)
            self.exec_block([st], trial, mod, scope, depth)
        except Raised:
            outs.append(Outcome(None, assumed, st.lineno, raises=True, env=env))
            return True
        except Returned as r:
            if any(isinstance(n, ast.Return) for n in astwalk.walk(st)) and r.value is not UNKNOWN:
                outs.append(Outcome(r.value, assumed, st.lineno, env=env))
                return True
            for n in astwalk.walk(st):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    env[n.id] = UNKNOWN
                elif isinstance(n, ast.Call) and in_place_call(n, env):
                    env[n.func.value.id] = UNKNOWN
            if any(isinstance(n, (ast.Return, ast.Raise)) for n in astwalk.walk(st)):
                outs.append(Outcome(UNKNOWN, assumed, st.lineno, env=env))
            return False
        except Exception:
            for n in astwalk.walk(st):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    env[n.id] = UNKNOWN
            if any(isinstance(n, (ast.Return, ast.Raise)) for n in astwalk.walk(st)):
                outs.append(Outcome(UNKNOWN, assumed, st.lineno, env=env))
            return False
        env.update(trial)
        return False

    def _eval_raw(self, node, env, mod, scope, depth=0):
        """Like ``eval`` but keeps class references (a returned class is an answer, not unknown)."""
        if depth == 0:
            self.steps = STEP_BUDGET  # a top-level evaluation, as in ``eval``
        try:
            v = self._eval(node, env, mod, scope, depth)
        except Returned:
            raise
        except Exception:
            return UNKNOWN
        cls = self._class_of_ref(v)
        if cls:
            return ClassRef(cls)
        if isinstance(v, FuncHandle) and not (v.qual and v.qual in self.model.G):
            full = self.world.imported_as(mod, scope, v.dotted) or (v.qual if v.qual and "." in v.qual else None)
            return ExtRef(full or v.dotted)
        return truth_value(v)


    # --- what a whole step reads besides the MoE layer ---------------------------------------------
    # (loops that break or continue, the class machinery of a dispatch resolved on the first call,
    # start-up globals, module tables, ServerArgs's own methods): each case runs first, then the
    # evaluator's core reading of the node (the ``*_core`` methods above)
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
                    raise Returned(UNKNOWN)
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
                    raise Returned(UNKNOWN)
                self.exec_block(st.body if t else st.orelse, env, mod, scope, depth)
                continue
            self._exec_stmts([st], env, mod, scope, depth)

    def _eval(self, node, env, mod, scope, depth):
        if isinstance(node, ast.IfExp):
            # the branch taken is the value, a class or function included; undecided: both, where they agree
            t = self.eval(node.test, env, mod, scope, depth)
            if t is not UNKNOWN:
                return self._eval(node.body if t else node.orelse, env, mod, scope, depth)
            a, b = (self._eval(n, env, mod, scope, depth) for n in (node.body, node.orelse))
            return a if a is not UNKNOWN and type(a) is type(b) and a == b else UNKNOWN
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id not in env:
            # a module table indexed by a known key (``BACKENDS["cutlass"]``): its entry, a class kept
            table = self._table(mod, node.value.id)
            if isinstance(table, dict):
                key = self.eval(node.slice, env, mod, scope, depth)
                if key is UNKNOWN or isinstance(key, (dict, list, set)):
                    return UNKNOWN
                return table[key] if key in table else UNKNOWN
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            # `klass is BaseFusedOp`: in-tree classes are the same object when they are the same class
            a = self._class_of_ref(self._eval(node.left, env, mod, scope, depth))
            b = self._class_of_ref(self._eval(node.comparators[0], env, mod, scope, depth))
            if a and b:
                return (a == b) == isinstance(node.ops[0], ast.Is)
        if isinstance(node, ast.Dict) and node.keys and all(k is not None for k in node.keys):
            # a table of callables (`return {"flash_attn_with_kvcache": flash_attn_with_kvcache}`):
            # the values stay callables, as in a tuple, so `table()["name"](...)` reaches the op
            got = self._eval_core(node, env, mod, scope, depth)
            if isinstance(got, dict) and any(v is UNKNOWN for v in got.values()):
                return bounded.build_dict((k, self._eval_raw(v, env, mod, scope, depth)) for k, v in zip(got, node.values))
            return got
        return self._eval_core(node, env, mod, scope, depth)

    def _attribute_raw(self, node, env, mod, scope, depth):
        if node.attr in ("__mro__", "__dict__"):
            cls = self._class_of_ref(self._eval(node.value, env, mod, scope, depth))
            if cls:
                if node.attr == "__mro__":
                    return tuple(ClassRef(c) for c in self.world.mro(cls))
                return _defined_names(self.world._class_ast(cls))
        got = self._attribute_raw_core(node, env, mod, scope, depth)
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
            tree = self.world.module_ast(path, keep=False) if path else None
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
            if name not in global_names(fn):
                continue
            if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in astwalk.walk(fn)):
                scoped = True  # a context manager sets the global for its with-block only, not at start-up
                continue
            stores = [n for n in astwalk.walk(fn) if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
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
            if outs and outs[0].value is not UNKNOWN and not isinstance(outs[0].value, FuncHandle):
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
        got = self._partial(node, env, mod, scope, depth)
        if got is not NotImplemented:
            return got
        if isinstance(f, ast.Name) and f.id not in env and f.id in ("type", "getattr") and node.args:
            obj = self._eval(node.args[0], env, mod, scope, depth)
            if f.id == "type" and len(node.args) == 1 and isinstance(obj, Instance):
                return ClassRef(obj.cls)
            if f.id == "getattr" and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant) and isinstance(obj, Instance):
                # getattr(self, name) with a name the code computed (a table's entry)
                name = self.eval(node.args[1], env, mod, scope, depth)
                if isinstance(name, str) and name.isidentifier():
                    const = ast.Call(func=f, args=[node.args[0], ast.Constant(value=name)] + node.args[2:], keywords=[])
                    return self._call_known_core(const, env, mod, scope, depth)
                return UNKNOWN
        if isinstance(f, ast.Attribute) and f.attr == "get" and isinstance(f.value, ast.Name) and f.value.id not in env:
            table = self._table(mod, f.value.id)
            if isinstance(table, dict) and node.args:
                key = self.eval(node.args[0], env, mod, scope, depth)
                if key is UNKNOWN:
                    return UNKNOWN
                return table[key] if key in table else (self._eval_raw(node.args[1], env, mod, scope, depth) if len(node.args) > 1 else None)
        got = self._call_known_core(node, env, mod, scope, depth)
        if got is NotImplemented and len(node.args) == 1 and dotted_name(f):
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

    def _partial(self, node, env, mod, scope, depth):
        """``functools.partial(fn, 3)`` of an in-tree function is a :class:`Partial`; calling one runs
        ``fn`` with the bound arguments first. NotImplemented for any other call."""
        f = node.func
        args = lambda: [truth_value(self._eval(a, env, mod, scope, depth)) for a in node.args[1:] if not isinstance(a, ast.Starred)]  # noqa: E731
        if isinstance(f, ast.Name) and isinstance(env.get(f.id), Partial):
            p = env[f.id]
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                return UNKNOWN
            rest = [truth_value(self._eval(a, env, mod, scope, depth)) for a in node.args]
            kw = {**dict(p.kwargs), **{k.arg: truth_value(self._eval(k.value, env, mod, scope, depth)) for k in node.keywords}}
            return self.call_function(p.qual, list(p.args) + rest, kw, depth + 1)
        dotted = dotted_name(f)
        if not node.args or not dotted or dotted.rsplit(".", 1)[-1] != "partial" or isinstance(f, ast.Name) and f.id in env:
            return NotImplemented
        if (self.world.imported_as(mod, scope, dotted) or "") != "functools.partial":
            return NotImplemented
        fn = self._eval(node.args[0], env, mod, scope, depth)
        q = fn.qual if isinstance(fn, (FuncHandle, FuncRef)) else None
        if not q or self.model.G.nodes.get(q, {}).get("kind") != "function" or isinstance(fn, FuncRef) and fn.bound is not None:
            return NotImplemented
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return NotImplemented
        kw = tuple((k.arg, truth_value(self._eval(k.value, env, mod, scope, depth))) for k in node.keywords)
        return Partial(q, tuple(args()), kw)

    def _wrapped(self, node, f, env, mod, scope, depth) -> Optional[FuncRef]:
        """``torch.compiler.disable(decode_attention_fwd)``: a callable from outside the tree handed
        one in-tree function gives back a callable that runs it."""
        callee = self._eval(f, env, mod, scope, depth)
        if not isinstance(callee, FuncHandle) or (callee.qual and callee.qual in self.model.G):
            return None
        arg = self._eval(node.args[0], env, mod, scope, depth)
        q = arg.qual if isinstance(arg, FuncHandle) else arg.qual if isinstance(arg, FuncRef) else None
        if not q or self.model.G.nodes.get(q, {}).get("kind") not in ("function", "triton_kernel"):
            return None
        full = self.world.imported_as(mod, scope, dotted_name(f)) or dotted_name(f)
        return FuncRef(q, (f"wrapped by {full}",), (self.world.G.nodes.get(mod, {}).get("path", ""), node.lineno))


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


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
    return UNKNOWN if isinstance(v, FuncHandle) else v


_src = source_line


def _is_property(fn) -> bool:
    """A def decorated ``@property`` or ``@cached_property`` (``functools.cached_property``)."""
    for d in getattr(fn, "decorator_list", ()) or ():
        name = d.attr if isinstance(d, ast.Attribute) else d.id if isinstance(d, ast.Name) else ""
        if name in ("property", "cached_property"):
            return True
    return False
