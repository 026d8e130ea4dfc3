"""The kernel map: the layer kinds of :mod:`recon.kernels.step` put together for one step, with
launches per step, CUDA-graph capture and the roofline floor; cached on disk like the runtime view
(by the tree's content, recon's code, device, model, flags, environment and prefill M)."""

from __future__ import annotations

from typing import Optional

from ..roofline import moe_roofline
from ..engine.values import EnumVal
from ..names import last

ORDER = ("embedding", "norm", "decoder_layer", "attention", "attention_module", "rotary", "dense_gemm", "moe", "communication", "logits", "sampling")


def _assumed_true(lf: dict) -> int:
    return sum(1 for w in lf.get("when", []) if not w.startswith("not "))


def _ops(layer: dict) -> list[dict]:
    """The leaves on the path that runs: the primary ones (every undecided test false); else, the
    primary rule's nearest extension, those that take the fewest undecided tests as true (every
    leaf is reached only under some undecided test: said, not hidden). A leaf that needs an ``if``
    without an else to hold (optional work: ``if grammars: all_reduce(...)``) is never on it: the
    other outcome of that test runs nothing instead, so it stays among the conditional leaves."""
    leaves = layer.get("leaves", [])
    # the attention metadata is walked from its own entry (the runner's init_forward_metadata): its
    # path is chosen apart from the layer's
    return _runs([lf for lf in leaves if not lf.get("metadata")]) + _runs([lf for lf in leaves if lf.get("metadata")])


def _runs(leaves: list[dict]) -> list[dict]:
    """:func:`_ops` for the leaves of one walk."""
    prim = [lf for lf in leaves if lf.get("primary")]
    if prim or not leaves:
        return prim
    leaves = [lf for lf in leaves if not lf.get("extra_if")]
    if not leaves:
        return []
    least = min(_assumed_true(lf) for lf in leaves)
    return [lf for lf in leaves if _assumed_true(lf) == least]


def _negates(a: str, b: str) -> bool:
    return a in (f"not ({b})", f"not {b}") or b in (f"not ({a})", f"not {a}")


def _launches(ops: list[dict]) -> int:
    """Launches one instance makes: ops on mutually exclusive branches (one's condition is the
    negation of one of the other's) are alternatives, one of which runs; the others add up."""
    chosen: list[set] = []
    for o in ops:
        w = set(o.get("when", []))
        if not any(any(_negates(x, y) for x in w for y in c) for c in chosen):
            chosen.append(w)
    return len(chosen)


def _instances(kind: str, model, tp: int) -> tuple[int, str]:
    L = model.num_layers
    roles = max(1, len(model.dense_gemm_shapes))
    return {
        "embedding": (1, "once a step"),
        "norm": (2 * L + 1, "two per decoder layer and the final norm"),
        "attention": (L, f"{L} decoder layers"),
        "attention_module": (L, f"{L} decoder layers"),
        "decoder_layer": (L, f"{L} decoder layers"),
        "rotary": (L, f"{L} decoder layers"),
        "dense_gemm": (roles * L, f"{roles} dense linear roles x {L} layers (the model profile's dense GEMM shapes)"),
        "moe": (model.num_moe_layers, f"{model.num_moe_layers} MoE layers"),
        "communication": (L if tp > 1 else 0, f"{L} layers (collective sites below, read from the model's code)" if tp > 1 else "tp_size 1"),
        "logits": (1, "once a step"),
        "sampling": (1, "once a step"),
    }.get(kind, (1, "once a step"))


def _roofline(kind: str, model, device, m: int) -> Optional[dict]:
    """A layer kind's floor at M: the step budget's (recon.kernels.budget), memory and compute."""
    from .budget import dense_floor_inputs, moe_floor_inputs, floor_point

    if kind == "dense_gemm" and model.dense_gemm_shapes:
        p = floor_point(m, *dense_floor_inputs(model, m), device, "fp8" if model.dense_quant == "fp8" else "bf16")
        return {**p, "basis": "every dense linear's weights (and block scales) read once per layer"}
    if kind == "moe" and model.num_experts:
        p = floor_point(m, *moe_floor_inputs(model, m), device, "bf16")
        uniq = round(moe_roofline(model, device, [m])["rows"][0]["unique_experts"], 2)
        return {**p, "basis": f"{uniq} experts touched per layer, each read once"}
    if kind == "embedding":
        p = floor_point(m, m * model.hidden_size * 2, 0, device, "bf16")
        return {**p, "basis": "one bf16 row gathered per token"}
    return None


DEFAULT_CONTEXT = 4096  # tokens already in each sequence's KV cache when --context is not given


def attention_roofline(model, device, m: int, context: int) -> dict:
    """Decode attention reads each sequence's KV cache once per layer: M x (layers x context, a
    sliding-window layer at most its window) x KV bytes per token and layer."""
    kv = model.kv_cache or {}
    per = kv.get("bytes_per_token_layer")
    if not per:
        return {"M": m, "context": context, "bytes": None, "flops": None, "floor_us": None,
                "basis": f"KV-cache reads not modelled: the {model.name} profile gives no KV bytes per token "
                         "(kv_cache.bytes_per_token_layer); its projections are under dense_gemm"}
    win, swl = kv.get("sliding_window"), min(kv.get("sliding_window_layers") or 0, model.num_layers)
    tokens = (model.num_layers - swl) * context + swl * min(context, win or context)
    b = m * tokens * per
    return {"M": m, "context": context, "bytes": b, "flops": None, "floor_us": round(b / (device.bandwidth_tbs * 1e12) * 1e6, 1),
            "basis": f"KV cache read once per layer at context {context} ({per} B per token and layer"
                     + (f"; {swl} layers read at most a {win}-token window" if swl and win else "") + ")"}


def _guarded(kind: str, fn, *args):
    """A layer kind's answer, or a layer saying recon could not follow it (never a crash)."""
    try:
        return fn(*args)
    except RecursionError:
        return {"kind": kind, "note": "recon ran out of depth following this layer's code", "leaves": []}


class MapInProgress(RuntimeError):
    """The map of this context was asked for while it is being built: a rule the budget runs
    (``missing-device-config`` reads the map's dense layer) gets no map rather than a second build."""


_BUILDING: set = set()  # id() of the contexts whose map is being built in this process


def build_map(ctx, prefill_m: Optional[int] = None) -> dict:
    import sys

    if id(ctx) in _BUILDING:
        raise MapInProgress("the kernel map of this scenario is being built")
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20000))
    _BUILDING.add(id(ctx))
    try:
        return _build_map(ctx, prefill_m)
    finally:
        _BUILDING.discard(id(ctx))
        sys.setrecursionlimit(old)


def _build_map(ctx, prefill_m: Optional[int] = None) -> dict:
    from ..runtime import runtime_view
    from ..engine.engine import engine_for
    from .step import Step, attention, attention_module, communication, decoder_layer, dense, model_class, moe, simple_layers

    view = runtime_view(ctx)  # walked with the context's engine when it is not in the cache
    step = Step(ctx, engine_for(ctx))
    st = step.world.state
    mcls = model_class(step)
    layers = []
    notes = step.world.notes
    notes.mark()

    def add(lay):
        if lay:
            # the environment variables this layer's decisions read (their defaults or --env)
            lay["env_read"] = [notes[n] for n in sorted(notes.mark())]
            layers.append(lay)

    for got in _guarded("norm", simple_layers, step, mcls) or []:
        got["env_read"] = []
        layers.append(got)
    notes.mark()
    add(_guarded("attention", attention, step, "DECODE"))
    add(_guarded("attention_module", attention_module, step, mcls))
    amod = next((lay.get("class") for lay in layers if lay["kind"] == "attention_module"), None)
    add(_guarded("decoder_layer", decoder_layer, step, mcls, amod))
    add(_guarded("dense_gemm", dense, step))
    if getattr(ctx.model, "num_experts", 0):
        lay = moe(view)
        if lay:
            lay["env_read"] = list(view.notes)
            # recon's own grouped kernel, where `recon apply` put it on this path (its files' header)
            from ..refkernel import applied_in
            lay["recon_kernel"] = applied_in(ctx.tree, lay["leaves"])
            layers.append(lay)
    tp = st.get("tp_size")
    tp = tp if isinstance(tp, int) else 1
    add(communication(step))
    dcg = st.get("disable_cuda_graph")
    dec = st.decisions.get("disable_cuda_graph")
    graph = {"captured": dcg is False, "value": dcg if isinstance(dcg, bool) else None,
             "source": dec.source if dec else "default" if isinstance(dcg, bool) else "not decided"}
    m = min(ctx.model.decode_batches) if ctx.model.decode_batches else 1
    mmax = max(ctx.model.decode_batches) if ctx.model.decode_batches else 1
    for lay in layers:
        n, why = _instances(lay["kind"], ctx.model, tp)
        ops = _ops(lay)
        lay["ops"] = ops
        # the attention metadata a backend builds is built once a step, not once a layer
        each = [o for o in ops if not o.get("metadata")]
        once = _launches([o for o in ops if o.get("metadata")])
        per = _launches(each) if each else 0
        if lay["kind"] == "communication" and tp > 1:
            # one collective per site a layer passes (the unconditional ones; the others are listed)
            per = sum(1 for st in lay.get("sites", []) if not st["when"]) or None
        if once:
            why += f" + {once} metadata launch{'es' if once > 1 else ''} once a step"
        lay["per_step"] = {"instances": n, "basis": why, "launches": (n * (per or 0) + once) if (per or once) else None}
        lay["cuda_graph"] = graph["captured"]
        lay["roofline"] = [r for r in (_roofline(lay["kind"], ctx.model, ctx.device, mm) for mm in sorted({m, mmax})) if r]
        if lay["kind"] == "attention":
            lay["roofline"] = [attention_roofline(ctx.model, ctx.device, mm, DEFAULT_CONTEXT) for mm in sorted({m, mmax})]
    layers.sort(key=lambda lay: ORDER.index(lay["kind"]) if lay["kind"] in ORDER else len(ORDER))
    for lay in layers:
        lay["tensor_cores"] = _tensor_cores(ctx, lay.get("ops", []))
    out = {
        "target": ctx.tree.target.label, "version": ctx.tree.target.version,
        "device": ctx.device.name, "arch": ctx.device.sm, "model": ctx.model.name, "model_class": mcls,
        "flags": ctx.server_flags, "env": ctx.env, "cuda_graph": graph, "tp_size": tp,
        # the start-up choices (an enum a start-up function settles from the server arguments)
        "startup": [{"global": f"{k[0]}.{k[1]}", "value": _plain(v[0]), "path": v[1], "line": v[2], "set_in": v[3]}
                    for k, v in sorted(step.ev.global_sites.items()) if isinstance(v[0], EnumVal)],
        "layers": layers,
        "notes": sorted(set(view.notes) | set(step.world.notes.values())),
        # the notes whose test, taken the other way, changes no value the walk decides (text counts them)
        "notes_idle": sorted((set(view.notes) | set(step.world.notes.values()))
                             & (set(getattr(view, "notes_idle", ())) | getattr(step.world.notes, "idle", set()))),
        "diagnostics": list(view.diagnostics),
    }
    if prefill_m:
        out["prefill"] = _prefill(ctx, step, prefill_m)
    return out


def _prefill(ctx, step, prefill_m: int) -> dict:
    """The prefill step's part of the map: its attention (``forward_extend``) and rooflines at M tokens."""
    from .step import attention

    pre = _guarded("attention", attention, step, "EXTEND")
    pre["ops"] = _ops(pre)
    return {"M": prefill_m, "attention": pre, "cuda_graph": False,
            "dense_gemm_roofline": _roofline("dense_gemm", ctx.model, ctx.device, prefill_m),
            "moe_roofline": _roofline("moe", ctx.model, ctx.device, prefill_m)}


def _with_prefill(ctx, decode: dict, prefill_m: int) -> dict:
    """The map with a prefill step: the decode map (everything but ``prefill`` is the same for any
    prefill size) and the prefill part walked with the scenario's engine, as build_map would."""
    import copy
    import sys

    from ..engine.engine import engine_for
    from .step import Step

    if id(ctx) in _BUILDING:
        raise MapInProgress("the kernel map of this scenario is being built")
    out = copy.deepcopy(decode)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20000))
    _BUILDING.add(id(ctx))
    try:
        out["prefill"] = _prefill(ctx, Step(ctx, engine_for(ctx)), prefill_m)
    finally:
        _BUILDING.discard(id(ctx))
        sys.setrecursionlimit(old)
    return out


def _tensor_cores(ctx, ops: list[dict]) -> Optional[bool]:
    """Whether the layer's Triton kernels do their math on tensor cores (a ``tl.dot``/``tl.dot_scaled``
    in the kernel's body); None when it launches no Triton kernel recon can read (a library op)."""
    from ..engine.kernelfacts import kernel_summary

    got = []
    for o in ops:
        if o.get("kind") != "triton_kernel":
            continue
        s = kernel_summary(ctx, o["name"])
        if s is not None:
            got.append(bool(s.get("dots")))
    return any(got) if got else None


def _plain(v):
    from ..engine.values import plain
    return plain(v)


def map_for(ctx, prefill_m: Optional[int] = None, context: int = DEFAULT_CONTEXT) -> dict:
    """The map for the context, from the cache when it is there (stored when it was not); the
    attention roofline at ``context`` tokens of KV cache per sequence."""
    from ..runtime.cached import load_or_build, scenario_key

    def decode():
        return load_or_build("kernels", scenario_key(ctx, None), lambda: build_map(ctx, None))

    # a scenario asks for its decode map and for one with a prefill step (the checks' 8192 tokens):
    # the second reuses the first's walk rather than walking every decode layer again
    m = load_or_build("kernels", scenario_key(ctx, prefill_m), lambda: _with_prefill(ctx, decode(), prefill_m)) if prefill_m else decode()
    for lay in m["layers"]:
        if lay["kind"] == "attention":
            ms = sorted({r["M"] for r in lay.get("roofline", [])}) or [1]
            lay["roofline"] = [attention_roofline(ctx.model, ctx.device, mm, context) for mm in ms]
    m["context"] = context
    _mark_will_run(ctx, m)
    return m


def _mark_will_run(ctx, m: dict) -> None:
    """Each layer's library ops with what they are built for (recon/data/external_ops.yaml, for the
    version the release pins): ``will_run`` lists those on the layer's path that have no kernels for
    the device (runs False) or that recon does not know (runs None). Read at render time, so an edit
    of the data shows without rebuilding the cached map."""
    from ..engine.opreqs import support

    lays = list(m.get("layers", [])) + ([m["prefill"]["attention"]] if (m.get("prefill") or {}).get("attention") else [])
    for lay in lays:
        marks = []
        for o in lay.get("ops", []):
            if o.get("kind") != "library":
                continue
            s = support(ctx.tree, o["name"], ctx.device.sm)
            if s.runs is not True:
                marks.append({"op": o["name"], "runs": s.runs, "built_for": list(s.archs), "package": s.package,
                              "version": s.version, "first_with": s.first_with, "at": f"{o['path']}:{o['line']}"})
        lay["will_run"] = marks


# --- diff ------------------------------------------------------------------------------------------
def _sig(lay: dict) -> dict:
    return {
        "backend": (lay.get("backend_name") or {}).get("value") if lay["kind"] == "attention" else
        ((lay.get("backend") or {}).get("value") if lay["kind"] == "moe" else None),
        "class": last(lay.get("backend_class") or lay.get("method") or lay.get("class")),
        "ops": sorted({last(o["name"]) if "/" not in o["name"] else o["name"] for o in lay.get("ops", [])}),
        "launches": lay.get("per_step", {}).get("launches"),
        # what the method was built with (MXFP8 activations or not) and what its dispatchers return
        "settings": sorted([f"self.{c['attr']} = {c['value']}" for c in lay.get("construction", []) or []]
                           + [f"self.{a} = {last(next((c['function'] for c in d['choices'] if c['primary']), None))}"
                              for a, d in sorted((lay.get("dispatchers") or {}).items()) if any(c["primary"] for c in d["choices"])]),
    }


def diff_maps(a: dict, b: dict) -> list[dict]:
    """Per layer kind: what differs between map ``a`` and map ``b`` (only the kinds that differ)."""
    ka = {lay["kind"]: lay for lay in a["layers"]}
    kb = {lay["kind"]: lay for lay in b["layers"]}
    out = []
    for kind in [k for k in ORDER if k in ka or k in kb]:
        sa = _sig(ka[kind]) if kind in ka else None
        sb = _sig(kb[kind]) if kind in kb else None
        if sa == sb:
            continue
        row = {"kind": kind, "before": sa, "after": sb}
        rka, rkb = (ka.get(kind) or {}).get("recon_kernel"), (kb.get(kind) or {}).get("recon_kernel")
        if rka or rkb:  # recon's own kernel on one side: what `recon apply` changed
            row["recon_kernel"] = {"before": rka, "after": rkb}
        ta, tb = _kind_time(a, kind), _kind_time(b, kind)
        if ta or tb:
            row["time_us"] = {"before": ta, "after": tb}  # the step budget's rows of this kind, summed
        if sa and sb:
            row["ops_removed"] = sorted(set(sa["ops"]) - set(sb["ops"]))
            row["ops_added"] = sorted(set(sb["ops"]) - set(sa["ops"]))
            # a side with no op named is a path recon did not follow to the end, not "no kernel"
            row["unnamed"] = [side for side, sig in (("before", sa), ("after", sb)) if not sig["ops"]]
        out.append(row)
    return out


def _kind_time(m: dict, kind: str) -> Optional[dict]:
    """{M: {"us", "how"}} of the step budget's rows of ``kind`` at the decode batches: measured or
    predicted where every row of the kind is timed, else the floor ("floor": at least)."""
    b = m.get("budget")
    if not b:
        return None
    rows = [r for r in b["rows"] if r["kind"] == kind]
    if not rows:
        return None
    out = {}
    for i, mm in enumerate(b["M"]):
        if mm not in b["decode_M"]:
            continue
        times = [r["time"].get(str(mm)) for r in rows]
        fl = [r["points"][i]["floor_us"] for r in rows]
        if any(t is None and f is None for t, f in zip(times, fl)):
            continue  # a row recon cannot size: no sum
        hows = sorted({t["how"] for t in times if t})
        out[str(mm)] = {"us": round(sum(t["us"] if t else f for t, f in zip(times, fl)), 1),
                        # a row without a time counts its floor: the sum is then "at least"
                        "how": "/".join(hows) + (" + floor" if hows and not all(times) else "") if hows else "floor"}
    return out or None


def budget_totals(m: dict) -> Optional[dict]:
    """{M: today's step total in us} at the decode batches of the map's budget."""
    b = m.get("budget")
    if not b:
        return None
    return {k: v["today_us"] for k, v in b["total"].items() if v["M"] in b["decode_M"]}
