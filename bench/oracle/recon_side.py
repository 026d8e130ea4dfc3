"""recon's answers for the oracle's cells: the runtime view's ``server_args`` (value, and whether
recon decided it), computed in-process with the release's tree loaded once."""

from __future__ import annotations

import shlex


def load_tree(version: str):
    from recon.target import from_version
    from recon.tree import load

    return load(from_version(version))


def answers(tree, device: str, model_dir: str, flags: list, env: dict, probes: bool = False) -> dict:
    """field -> {"value", "decided", "source"} for every field recon's view tracks; or
    {"__error__": message} when recon refuses the cell (a bad flag: exit 2)."""
    from recon.checks import CheckContext
    from recon.errors import ReconError
    from recon.profiles import load_device, load_model
    from recon.runtime import parse_server_args

    try:
        dev = load_device(device)
        mdl = load_model(model_dir)
        parsed = parse_server_args(tree, shlex.join(flags)) if flags else parse_server_args(tree, None)
        ctx = CheckContext(tree, dev, mdl, server_flags=parsed, env=env)
        view = server_args_view(ctx, parsed, env)
    except ReconError as e:
        return {"__error__": str(e)}
    if view.refusals:  # SGLang's own resolution raises on these arguments, and recon says so
        r = view.refusals[0]
        return {"__error__": f"SGLang refuses: {r['message']} ({r['path']}:{r['line']})"}
    out = {}
    forked = _forked_fields(view)
    for name, rec in view.server_args.items():
        if not isinstance(rec, dict):
            continue
        src = str(rec.get("source", ""))
        # Undecided: another resolution (a fork) changes it, code outside the arguments writes it
        # later, or recon holds no value for it (an unknown value reads as None in the evaluator).
        decided = name not in forked and not rec.get("later") and rec.get("value") not in (None, "unset")
        out[name] = {"value": rec.get("value"), "decided": decided, "source": src,
                     "where": f"{rec.get('path', '')}:{rec.get('line', '')}".strip(":")}
    if probes:
        out.update(probe_answers(view.engine, ctx))
    return out


# The decoder layer the child probes (child.py: ``model.layers.3.mlp.experts`` and
# ``model.layers.3.self_attn.o_proj``); recon names that layer's MoE and linear layers from the
# model's construction code (recon.runtime.prefixes) and asks get_quant_method for them by name.
PROBE_LAYER = 3


def _short(q) -> str:
    return repr(str(q).rsplit(".", 1)[-1]) if q else "None"


def probe_answers(engine, ctx) -> dict:
    """recon's side of the child's probe (child.py ``probe``): the quant method name it looks up,
    its config class, the MoE method (the runtime view's ``get_quant_method`` outcomes), the dense
    layers' linear method and the decode attention backend class (the kernel map's steps, without
    walking them). Undecided where recon names more than one outcome."""
    from recon.kernels.step import Step, attention_class, dense_method
    from recon.runtime.moe import quant_methods, quant_method_name, registry
    from recon.runtime.prefixes import LINEAR_PATH, MOE_PATH, layer_prefix

    world, ev = engine.world, engine.ev
    out = {}

    def put(field, value, decided, source, where=""):
        out[field] = {"value": value, "decided": decided, "source": source, "where": where}

    name, src = quant_method_name(world, world.state)
    put("oracle_quantization", repr(name) if name else "None", True, src)
    reg = registry(world).get(name) if name else None
    put("oracle_quant_config", _short(reg[0]) if reg else "None", name is None or reg is not None,
        "quantization registry", f"{reg[1]}:{reg[2]}" if reg else "")
    if getattr(ctx.model, "num_experts", 0) and name:
        qm = quant_methods(world, ev, prefix=layer_prefix(world, ev, MOE_PATH, PROBE_LAYER))
        methods = [o for o in qm["outcomes"] if o["method"] and not o["raises"]]
        # an outcome that names no method (an unknown value, a None) is another answer, not none
        kinds = {o["method"] or repr(o["value"]) for o in qm["outcomes"] if not o["raises"]}
        put("oracle_moe_method", _short(methods[0]["method"]) if methods else "(no method recon can name)",
            len(kinds) == 1 and not qm.get("guesses"),
            "get_quant_method (MoE layer)", f"{methods[0]['path']}:{methods[0]['line']}" if methods else qm.get("note", ""))
    step = Step(ctx, engine)
    d, _ = dense_method(step, prefix=layer_prefix(world, ev, LINEAR_PATH, PROBE_LAYER))
    if d.get("none_from"):
        put("oracle_linear_method", "None", True, "get_quant_method returns None (linear layer)",
            f"{d['none_from']['path']}:{d['none_from']['line']}")
    else:
        put("oracle_linear_method", _short(d.get("method")),
            bool(d.get("method")) and not d.get("other_methods") and not d.get("unknown_outcomes") and not d.get("guesses"),
            "get_quant_method (linear layer)" if d.get("config_class") else "LinearBase without a quant config",
            "{path}:{line}".format(**d["method_returned_at"]) if d.get("method_returned_at") else d.get("note", ""))
    a, prim = attention_class(step, "DECODE")
    put("oracle_attention_class", _short(a.get("backend_class")), prim is not None and not a.get("other_classes"),
        "attention registry factory", "{path}:{line}".format(**a["registry"]) if a.get("registry") else a.get("note", ""))
    return out


def _forked_fields(view) -> set:
    """Fields another resolution of the view (an undecided test's other outcome) changes."""
    names = set()
    for fork in view.forks or []:
        for ch in fork.get("changes", []) if isinstance(fork, dict) else []:
            if isinstance(ch, dict) and ch.get("field"):
                names.add(ch["field"])
            elif isinstance(ch, (list, tuple)) and ch:
                names.add(ch[0])
        if isinstance(fork, dict) and isinstance(fork.get("changes"), dict):
            names.update(fork["changes"])
    return names


EXTRA_FIELDS = ("decode_attention_backend", "prefill_attention_backend", "kv_cache_dtype",
                "fp8_gemm_runner_backend", "fp4_gemm_runner_backend", "speculative_algorithm", "page_size",
                "disable_cuda_graph", "enable_dp_attention", "ep_size")


def server_args_view(ctx, flags: dict, env: dict):
    """The server-argument half of ``recon.runtime.build`` (its MoE half costs tens of seconds a
    cell and is not compared here): the same World, gate model, schema, evaluator and resolution,
    and the same records (decisions, defaults of the tracked fields, later writers, forks)."""
    from types import SimpleNamespace

    from recon.engine.evaluator import Evaluator
    from recon.engine.gatemodel import gate_model
    from recon.engine.interp import Dev
    from recon.engine.serverargs import load_schema, open_later_writers, refusals, resolve
    from recon.engine.values import plain
    from recon.engine.world import World

    world = World(ctx.tree, ctx.model, env)
    gm = gate_model(ctx)
    world.shared_asts = gm._module_ast
    world.schema = load_schema(world)
    ev = Evaluator(world, Dev.of(ctx.device), gm)
    view = SimpleNamespace(server_args={}, forks=[], refusals=[],
                           engine=SimpleNamespace(world=world, ev=ev, flags=dict(flags), env=dict(env)))
    if world.schema is None:
        return view
    states = resolve(world, world.schema, dict(flags), ev)
    world.state = states[0]
    view.refusals = refusals(world, world.schema, world.state, ev)
    for k, d in sorted(world.state.decisions.items()):
        if k.startswith("_"):
            continue
        view.server_args[k] = {"value": plain(d.value), "source": d.source, "path": d.path, "line": d.line, "test": d.test}
    # build() lists four fields when nothing wrote them; the resolution state holds every field,
    # so the other compared ones are read from it the same way (their default, or a later writer).
    for k in ("moe_runner_backend", "quantization", "moe_a2a_backend", "attention_backend", *EXTRA_FIELDS):
        if k not in view.server_args and k in world.schema.fields:
            f = world.schema.fields[k]
            view.server_args[k] = {"value": plain(world.state.get(k)), "source": "default", "path": f.path, "line": f.line, "test": ""}
    for k, d in view.server_args.items():
        if d["source"] == "default" and d["value"] == "None" and open_later_writers(world, world.schema, k, world.state, ev):
            d["later"] = True
    for st in states[1:]:
        changes = {k: plain(st.get(k)) for k in view.server_args if plain(st.get(k)) != view.server_args[k]["value"]}
        if changes and len({(a[2], a[3]) for a in st.assumptions}) <= 1:
            view.forks.append({"changes": changes})
    return view
