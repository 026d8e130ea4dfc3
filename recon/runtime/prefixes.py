"""The names SGLang gives a model's layers, read from the model's construction code.

A quant config chooses per named layer (``get_quant_method(layer, prefix)``: ignored layers,
``modules_to_not_convert``, per-layer schemes), and the name is what the model's constructors
hand down: ``self.model = Qwen3MoeModel(..., prefix=add_prefix("model", prefix))``, ``self.layers
= make_layers(n, lambda idx, prefix: Layer(..., prefix=prefix), prefix=add_prefix("layers",
prefix))`` (``make_layers`` naming layer ``idx`` ``add_prefix(idx, prefix)``), ``self.mlp =
MoE(..., prefix=add_prefix("mlp", prefix))``, ``self.experts = ...(prefix=add_prefix("experts",
prefix))``. Each step's ``prefix=`` argument is evaluated with the engine (``add_prefix`` is
SGLang's own function), starting from the entry class with ``prefix=""`` as the loader builds it;
the class of the next step is the class the write constructs (a class handed in as a constructor
parameter, ``decoder_layer_type``, is the default the most derived constructor declares, unless
the construction call passes it). Where a step cannot be read, or two writes of one attribute give
different names, the name is None: the caller asks for any layer of the kind instead.
"""

from __future__ import annotations

import ast
from typing import Optional

from ..engine.interp import UNKNOWN
from ..engine.values import ClassRef, Instance
from ..names import dotted_name
from .. import astwalk

# the attribute paths of the layers the oracle and the runtime view ask about, under a decoder layer
MOE_PATH = ("mlp", "experts")
LINEAR_PATH = ("self_attn", "o_proj")
# builtins that look at a function without calling it (``getattr(layer_fn, "func", layer_fn)``)
_INSPECTS = frozenset({"getattr", "hasattr", "isinstance", "callable", "type", "id", "repr", "str"})


def entry_class(world) -> Optional[str]:
    """The class SGLang's registry serves for the checkpoint (``World.entry_class``)."""
    return world.entry_class()


def _constructions(world, cls: str, attr: str) -> list:
    """(write, call) for each ``self.attr = Call(...)`` in a constructor of ``cls`` or its bases
    (a tuple target included: ``self.layers, self.start, self.end = make_layers(...)``)."""
    return [(w, w.value) for w in world.class_writes(cls, attr)
            if w.receiver == "self" and w.scope.endswith(".__init__") and not w.mutates and isinstance(w.value, ast.Call)]


def _keyword(call: ast.Call, name: str):
    return next((k.value for k in call.keywords if k.arg == name), None)


def _param_default(world, ev, inst: Instance, name: str):
    """A class a constructor parameter holds: the construction's own argument, else the default the
    most derived constructor that declares the parameter gives it."""
    got = inst.attrs.get("__args__", {}).get(name, UNKNOWN)
    if isinstance(got, ClassRef):
        return got.qual
    for c in world.mro(inst.cls):
        init = world.method(c, "__init__")
        fn = ev.model.function_ast(init) if init and init.startswith(c + ".") else None
        if fn is None:
            continue
        pos = fn.args.posonlyargs + fn.args.args
        pairs = list(zip(pos[len(pos) - len(fn.args.defaults):], fn.args.defaults))
        pairs += [(a, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None]
        for a, d in pairs:
            if a.arg == name:
                mod, scope = ev.model.module_scope(init)
                return ev._class_of_ref(ev._eval_raw(d, {}, mod, scope))
    return None


def _step(world, ev, inst: Instance, attr: str, prefix: str, index: Optional[int]) -> list:
    """[(name, the constructed object or None)] for ``inst.attr`` built under ``prefix``: one per
    write of the attribute in a constructor (a list of layers: the layer ``index``)."""
    out = []
    for w, call in _constructions(world, inst.cls, attr):
        env = world.write_env(w, inst, ev, {"prefix": prefix})
        if "prefix" not in {a.arg for a in (w.fn.args.args + w.fn.args.kwonlyargs if w.fn is not None else [])}:
            return []  # a constructor without a prefix parameter: the name is not handed down here
        kw = _keyword(call, "prefix")
        if kw is None:
            out.append((None, None))
            continue
        name = ev.eval(kw, env, w.module, w.scope)
        if not isinstance(name, str):
            out.append((None, None))
            continue
        lam = next((a for a in list(call.args) + [k.value for k in call.keywords] if isinstance(a, ast.Lambda)), None)
        if lam is not None:
            # make_layers(n, lambda idx, prefix: Layer(...), prefix=...): the layer's name is what
            # make_layers hands its layer function, its layer the lambda's class
            if index is None:
                out.append((None, None))
                continue
            name = _layer_name(world, ev, call, lam, w, name, index)
            body = lam.body if isinstance(lam.body, ast.Call) else None
            cls = _class_called(world, ev, inst, body, env, w) if body is not None else None
            out.append((name, Instance(cls) if cls else None))
            continue
        cls = _class_called(world, ev, inst, call, env, w)
        made = None
        if cls:
            made = Instance(cls)
            try:
                world.bind_init(made, call, ev, env, w.module, w.scope, 0)
            except Exception:
                made = Instance(cls)
        out.append((name, made))
    return out


def _class_called(world, ev, inst: Instance, call: ast.Call, env: dict, w) -> Optional[str]:
    f = call.func
    if isinstance(f, ast.Name) and w.fn is not None and f.id in {a.arg for a in w.fn.args.args + w.fn.args.kwonlyargs}:
        return _param_default(world, ev, inst, f.id)  # decoder_layer_type: a class handed in
    return ev._class_of_ref(ev._eval_raw(f, env, w.module, w.scope))


def _layer_name(world, ev, call: ast.Call, lam: ast.Lambda, w, layers_prefix: str, index: int) -> Optional[str]:
    """The name ``make_layers`` gives layer ``index``: the ``prefix=`` it passes its layer function
    (``layer_fn(idx=idx, prefix=add_prefix(idx, prefix))``), evaluated in its own code."""
    target = ev.model.resolve(w.module, w.scope, dotted_name(call.func)) if dotted_name(call.func) else None
    pos = next((i for i, a in enumerate(call.args) if a is lam), None)
    key = next((k.arg for k in call.keywords if k.value is lam), None)
    names = _named_by(ev, target, pos, key, layers_prefix, index, 3)
    return names.pop() if len(names) == 1 else None


def _named_by(ev, target: Optional[str], pos: Optional[int], key: Optional[str], layers_prefix: Optional[str],
              index: int, hops: int) -> set:
    """In function ``target``, which gets the layer function as argument ``pos`` (or keyword
    ``key``) and the layers' name as ``prefix``: every name it gives layer ``index`` (None for one
    it cannot tell), following a function it hands the layer function on to (``make_pp_layers``
    calling ``make_layers(..., layer_fn, prefix=prefix)``, ``functools.partial(f, layer_fn)``)."""
    fn = ev.model.function_ast(target) if target else None
    if fn is None or hops <= 0:
        return {None}
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    fn_param = params[pos] if pos is not None and pos < len(params) else key
    if fn_param is None:
        return {None}
    mod, scope = ev.model.module_scope(target)
    names: set = set()
    for n in astwalk.walk(fn):
        if not isinstance(n, ast.Call):
            continue
        if isinstance(n.func, ast.Name) and n.func.id == fn_param:
            kw = _keyword(n, "prefix")
            env = {"prefix": layers_prefix}
            idx = _keyword(n, "idx")
            if isinstance(idx, ast.Name):
                env[idx.id] = index
            got = ev.eval(kw, env, mod, scope) if kw is not None and layers_prefix is not None else None
            names.add(got if isinstance(got, str) else None)
            continue
        # handed on whole to another function (with the layers' name, or without)
        at = next((i for i, a in enumerate(n.args) if isinstance(a, ast.Name) and a.id == fn_param), None)
        kat = next((k.arg for k in n.keywords if isinstance(k.value, ast.Name) and k.value.id == fn_param), None)
        if at is None and kat is None or isinstance(n.func, ast.Name) and n.func.id in _INSPECTS:
            continue
        func = n.func
        if (dotted_name(func) or "").rsplit(".", 1)[-1] == "partial" and n.args and at is not None and at > 0:
            func, at = n.args[0], at - 1  # partial(f, layer_fn): f gets it one place earlier
        callee = ev.model.resolve(mod, scope, dotted_name(func)) if dotted_name(func) else None
        if callee is None or ev.model.function_ast(callee) is None:
            names.add(None)
            continue
        kw = _keyword(n, "prefix")
        inner = ev.eval(kw, {"prefix": layers_prefix}, mod, scope) if kw is not None and layers_prefix is not None else None
        names |= _named_by(ev, callee, at, kat, inner if isinstance(inner, str) else None, index, hops - 1)
    return names


def layer_prefix(world, ev, path: tuple, index: int) -> Optional[str]:
    """The name of the layer at ``path`` (attribute names under a decoder layer, ``("mlp",
    "experts")``) in decoder layer ``index``, as the model's constructors build it; None where the
    construction code does not say one name."""
    top = entry_class(world)
    if top is None:
        return None
    # entry class -> the model -> its list of decoder layers -> the path under a decoder layer
    frontier = [("", Instance(top))]
    for attr, idx in (("model", None), ("layers", index)) + tuple((a, None) for a in path):
        nxt = []
        for prefix, inst in frontier:
            if inst is None:
                continue
            nxt += _step(world, ev, inst, attr, prefix, idx)
        if not nxt:
            return None
        named = {n for n, _ in nxt}
        if None in named or len(named) != 1:
            return None
        frontier = nxt
    return frontier[0][0]
