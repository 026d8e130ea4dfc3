"""What runs for one scenario (device, model, server flags, environment): the runtime view, the
graph evaluated with the scenario's one engine (:mod:`recon.engine`). The per-layer kernel map of a
whole step, on the same floor, is :mod:`recon.kernels`.

It answers "what runs there" by following SGLang's own mechanisms rather than names:

- the server arguments (:mod:`recon.engine.serverargs`): SGLang's defaults, the user's
  ``--server-args``, and the code that rewrites them for the device and the model;
- the MoE layer's quant method (:mod:`.moe`): SGLang's quant-method registry, the config class's
  ``get_quant_method`` evaluated for the MoE layer, then the chain from its ``apply`` to the
  kernels and library ops, through held objects and decorator registries;
- what the decode CUDA-graph capture runs (:mod:`.capture`) and backend choices stored as strings
  (:mod:`.selections`); queries kept to the path that runs (:mod:`.query`).

What cannot be decided statically is kept as an assumption with both outcomes. Checks, ``spec``,
``query`` and ``apply`` read :func:`runtime_view` (through a :class:`recon.scenario.Scenario`'s
``view``): one per context, cached on disk under recon's one key scheme (:mod:`recon.derived`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..engine.opreqs import external_ops
from ..engine.serverargs import ServerArgsError, load_schema, open_later_writers, parse_flags, refusals
from ..engine.values import plain
from ..engine.world import World
from .moe import apply_path, quant_methods

__all__ = ["RuntimeView", "runtime_view", "ServerArgsError", "parse_server_args", "parse_env", "undeclared_envs"]


@dataclass
class RuntimeView:
    device: str
    model: str
    flags: dict
    env: dict
    server_args: dict = field(default_factory=dict)  # tracked field -> {value, source, path, line, test}
    forks: list = field(default_factory=list)  # other resolutions: [{assumptions, changes}]
    moe: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)  # assumptions the view made (env defaults, ...)
    notes_idle: list = field(default_factory=list)  # those of them whose flip changes no choice
    alternatives: list = field(default_factory=list)  # what the MoE runs in the forks that change its backend
    diagnostics: list = field(default_factory=list)
    # raise/assert sites of SGLang's resolution that fire on these arguments: it refuses to start
    refusals: list = field(default_factory=list)
    # the MoE method (or that there is none) is the tree's own answer: its ServerArgs were evaluated
    # and its quantization registry read. False only where the tree has no ServerArgs to evaluate;
    # a product may then fall back to what the graph alone shows, saying so. Not part of to_dict.
    moe_decided: bool = False
    # why the model has no MoE layer (a dense model: its config.json names no experts); empty for a MoE model
    no_moe: str = ""

    def to_dict(self) -> dict:
        return {"device": self.device, "model": self.model, "flags": self.flags, "env": self.env,
                "server_args": self.server_args, "forks": self.forks, "moe": self.moe, "notes": self.notes, "notes_idle": self.notes_idle,
                "alternatives": self.alternatives,
                "diagnostics": self.diagnostics, "no_moe": self.no_moe or None,
                **({"refusals": self.refusals} if self.refusals else {})}

    def primary_leaves(self) -> list:
        """The leaves of the first outcome (every undecided test false): the one way products that
        need a single path (costs, roofline) read; :meth:`decided_leaves` are those that run for sure."""
        return [lf for lf in self.moe.get("leaves", []) if lf.get("primary")]

    def decided_leaves(self) -> list:
        return [lf for lf in self.moe.get("leaves", []) if lf.get("decided", not lf.get("when"))]

    def grouped_op(self) -> Optional[dict]:
        """The grouped tensor-core op the MoE chain ends in on the primary path, if it does."""
        return next((lf for lf in self.primary_leaves() if lf.get("grouped_tensor_core")), None)

    @property
    def moe_method(self) -> Optional[str]:
        return self.moe.get("method")

    def on_path_files(self) -> set:
        """Files the resolved MoE path runs code in (the primary path: undecided tests false)."""
        out = set()
        for lf in self.primary_leaves():
            out.add(lf["path"])
            out.update(h["path"] for h in lf["via"])
            node = lf.get("name")
            if node and "/" not in node:
                out.add(node)  # resolved to a file below by the caller when the node is in the graph
        if self.moe.get("apply_path"):
            out.add(self.moe["apply_path"])
        return out

    def on_path(self, path: str, line: Optional[int] = None) -> bool:
        return path in self.on_path_files()


def parse_server_args(tree, text: Optional[str]) -> dict:
    """Validate ``--server-args`` against the tree's own ServerArgs (ServerArgsError on bad input)."""
    if not text:
        return {}
    world = World(tree, _Blank())
    world.schema = load_schema(world)
    return parse_flags(text, world.schema)


def undeclared_envs(tree, envs: dict) -> list:
    """The names in ``envs`` that SGLang's environment declarations do not know."""
    world = World(tree, _Blank())
    declared = world.declared_envs()
    return sorted(n for n in envs if n not in declared)


def parse_env(pairs) -> dict:
    out = {}
    for p in pairs or ():
        name, sep, value = p.partition("=")
        if not sep or not name.strip():
            raise ServerArgsError(f"--env expects NAME=VALUE, got {p!r}")
        out[name.strip()] = value
    return out


class _Blank:
    architectures: list = []
    hf_config: dict = {}


def classify(tree, lf: dict) -> dict:
    """What a leaf is: a grouped tensor-core GEMM over experts or not (None: cannot tell)."""
    if lf["kind"] in ("library", "native_op", "jit_kernel"):
        for rx, d in external_ops():
            if "grouped_tensor_core" in d and rx.search(lf["name"]):  # the MoE classification rows
                return {"what": d["what"], "grouped_tensor_core": bool(d.get("grouped_tensor_core"))}
        return {"what": "", "grouped_tensor_core": None}
    node = tree.graph.nodes.get(lf["name"], {})
    if node.get("path"):
        body = "\n".join(tree.lines(node["path"])[node["line"] - 1: node.get("end_line", node["line"])])
        return {"what": "Triton kernel", "grouped_tensor_core": ("tl.dot" in body)}
    return {"what": "", "grouped_tensor_core": None}


def _package_of(tree, lf: dict) -> dict:
    """For a library op: the release's requirement that installs its package, or that none does
    (``triton_kernels`` on releases that do not require it: the op runs only where a user added it)."""
    if lf["kind"] != "library":
        return {}
    from ..engine.packages import declared
    decl = declared(tree)
    if decl is None:
        return {}
    return {"package": lf["name"].split(".", 1)[0], "required_by_release": decl.lookup(lf["name"])[0], "requirements": decl.where}


def _leaf_dict(lf, sites: Optional[dict] = None) -> dict:
    from .moe import leaf_tests
    return {"kind": lf.kind, "name": lf.name, "path": lf.path, "line": lf.line, "primary": lf.primary,
            # decided: runs whatever recon could not decide; else `tests` picks between it and the
            # other outcome (file:line of each), and the view shows both
            "decided": lf.decided, "tests": leaf_tests(lf, sites or {}),
            "when": [_cond(t, h) for t, h in lf.when],
            "via": [{"what": h.what, "path": h.path, "line": h.line, "node": h.node} for h in lf.via]}


def _cond(test: str, holds: bool) -> str:
    return test if holds else f"not ({test})" if " " in test else f"not {test}"


def build(ctx, flags: Optional[dict] = None, env: Optional[dict] = None, engine=None) -> RuntimeView:
    """The view for the context, walked with its engine (:func:`engine.engine_for`). ``flags``/``env``
    left as None are the context's own (``ctx.server_flags``, ``ctx.env``): the view of a scenario is
    the view for its server flags. Other ``flags``/``env`` than the context's (``{}`` included: no
    flags) get an engine of their own."""
    from ..engine.engine import Engine, engine_for

    own_flags, own_env = dict(getattr(ctx, "server_flags", None) or {}), dict(getattr(ctx, "env", None) or {})
    flags = own_flags if flags is None else dict(flags)
    env = own_env if env is None else dict(env)
    if engine is None:
        same = flags == own_flags and env == own_env
        engine = engine_for(ctx) if same else Engine(ctx, flags, env)
    world, ev = engine.world, engine.ev
    view = RuntimeView(ctx.device.name, ctx.model.name, flags, env)
    known = {d.get("name") for _, d in ctx.tree.graph.nodes(data=True) if d.get("kind") == "class"} if ctx.model.architectures else set()
    missing = [a for a in ctx.model.architectures if a not in known]
    if missing:
        view.diagnostics.append(f"no model class {', '.join(missing)} in this tree: this release cannot serve the model, so "
                                "what follows is what its code would pick for such a checkpoint, not a path that runs")
    if not list(ctx.model.architectures):
        view.diagnostics.append("the model config names no architectures: per-model server-argument overrides and the model's "
                                "classes cannot be matched, so only device- and flag-dependent choices are evaluated")
    forks_states: list = []
    if world.schema is None:
        view.diagnostics.append("no ServerArgs class in this tree: server arguments are not evaluated")
    else:
        states = engine.states
        forks_states = states[1:]
        view.refusals = refusals(world, world.schema, world.state, ev)
        for r in view.refusals:
            view.diagnostics.append(f"SGLang refuses these server arguments here: {r['message']} ({r['path']}:{r['line']}); "
                                    "what follows is what its resolution had picked when it raised")
        for k, d in sorted(world.state.decisions.items()):
            if k.startswith("_"):  # a private attribute hooks pass on: it shows in the tests it decides
                continue
            view.server_args[k] = {"value": plain(d.value), "source": d.source, "path": d.path, "line": d.line, "test": d.test}
        for k in ("moe_runner_backend", "quantization", "moe_a2a_backend", "attention_backend"):
            if k not in view.server_args and k in world.schema.fields:
                f = world.schema.fields[k]
                view.server_args[k] = {"value": plain(world.state.get(k)), "source": "default", "path": f.path, "line": f.line, "test": ""}
        for k, d in view.server_args.items():
            if d["source"] == "default" and d["value"] == "None":
                later = open_later_writers(world, world.schema, k, world.state, ev)
                if later:
                    d["later"] = [{"path": p, "line": ln, "scope": sc} for p, ln, sc in later[:6]]
        for st in states[1:]:
            changes = {k: plain(st.get(k)) for k in view.server_args if plain(st.get(k)) != view.server_args[k]["value"]}
            if len({(a[2], a[3]) for a in st.assumptions}) > 1:
                continue  # combinations of single forks say nothing new
            if changes:
                # what this fork assumes beyond the primary outcome: the tests it takes as true
                view.forks.append({"assumptions": [{"test": a[0], "holds": a[1], "path": a[2], "line": a[3]} for a in st.assumptions if a[1]],
                                   "changes": changes})
    if getattr(ctx.model, "num_experts", 0):
        qm = quant_methods(world, ev)
        moe = {k: v for k, v in qm.items() if k != "outcomes"}
        moe["outcomes"] = [{k: v for k, v in o.items() if k != "instance"} for o in qm["outcomes"]]
        primary = next((o for o in qm["outcomes"] if o["method"] and not o["raises"]), None)
        if primary:
            moe["method"] = primary["method"]
            moe["assumed"] = primary["assumptions"]
            got = apply_path(world, ev, primary["instance"])
            moe["apply"] = got["apply"]
            moe["mro"] = world.mro(primary["method"])
            moe["apply_path"] = world.path_of(got["apply"]) if got["apply"] else None
            moe["leaves"] = [_leaf_dict(lf, got.get("test_sites")) for lf in got["leaves"]]
            from .moe import forks
            moe["forks"] = forks(moe["leaves"])
            moe["test_sites"] = {t: list(at) for t, at in sorted(got.get("test_sites", {}).items())}
            moe["premise_decided"] = got.get("premise_decided", [])
            moe["walked"] = got.get("walked", [])
            moe["calls"] = got.get("calls", {})
            # memoized callees (a JIT build cache, an lru_cache'd loader): built once, not walked
            moe["built_once"] = got.get("built_once", [])
            for lf in moe["leaves"]:
                lf.update(classify(ctx.tree, lf))
                lf.update(_package_of(ctx.tree, lf))
            moe["switches"] = [{**s, "value": plain(s["value"])} for s in got["switches"]]
            moe["construction"] = [{**s, "value": plain(s["value"])} for s in got["construction"]]
        else:
            moe["method"] = None
            moe["leaves"] = []
        if moe.get("note"):
            view.diagnostics.append(moe["note"])
        view.moe = moe
        view.moe_decided = world.schema is not None
        view.alternatives = _alternatives(ctx, world, ev, forks_states, view)
    else:
        # a dense model: no layer routes to experts, so there is no MoE quant method to ask for
        view.no_moe = (f"{ctx.model.name} is a dense model: its config.json names no routed experts, so no layer "
                       "builds a MoE layer (no MoE quant method, runner or kernels); `recon kernels` maps its attention "
                       "and dense GEMMs")
        view.moe_decided = world.schema is not None
    view.notes = sorted(world.notes.values())
    view.notes_idle = sorted(set(view.notes) & world.notes.idle)
    return view


def _alternatives(ctx, world, ev, states, view) -> list:
    """For each fork that changes the MoE runner backend or the quantization: the method and the ops
    it would run, so both outcomes of an undecidable test are shown, not only its server argument."""
    out = []
    primary_state = world.state
    for st in states:
        changed = {k: plain(st.get(k)) for k in ("moe_runner_backend", "quantization")
                   if plain(st.get(k)) != plain(primary_state.get(k))}
        if not changed or len({(a[2], a[3]) for a in st.assumptions}) > 1:
            continue
        world.state = st
        # what the evaluator settles from the state (start-up globals) must not outlive the fork
        saved = dict(ev._globals), dict(ev.global_sites)
        try:
            qm = quant_methods(world, ev)
            first = next((o for o in qm["outcomes"] if o["method"] and not o["raises"]), None)
            ops = []
            if first:
                got = apply_path(world, ev, first["instance"])
                ops = [lf.name for lf in got["leaves"] if lf.primary][:4]
        finally:
            world.state = primary_state
            ev._globals, ev.global_sites = saved
        out.append({"assumptions": [{"test": a[0], "holds": a[1], "path": a[2], "line": a[3]} for a in st.assumptions if a[1]],
                    "changes": changed, "method": first["method"] if first else None, "ops": ops})
    return out


def runtime_view(ctx) -> RuntimeView:
    """The view for the context's device, model and server flags (``ctx.server_flags``, ``ctx.env``):
    built once per context with its engine, and read from the derived-data cache when it is there
    (stored when it was not); kept on the context as ``ctx.view``."""
    if getattr(ctx, "view", None) is None:
        from .cached import load_or_build, scenario_key

        ctx.view = load_or_build("runtime", scenario_key(ctx), lambda: build(ctx))
    return ctx.view
