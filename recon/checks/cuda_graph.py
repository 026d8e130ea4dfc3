"""cuda-graph-host-sync: what runs inside the decode CUDA-graph capture, and what in it syncs the host.

1. The capture chain: a ``with <graph ctx>(...)`` capture site whose body calls a callable it was
   given; the caller that passes a nested ``run_once``-style function which calls ``forward(...)``;
   where ``forward`` comes from (a context manager such as ``patch_model`` yielding ``model.forward``);
   and the model class SGLang registers for ``ctx.model.architectures``.
2. The code reachable from that model's ``forward``: graph edges (calls, typed dynamic calls,
   launches) plus three resolutions the graph leaves open (:mod:`recon.runtime.capture`, which also
   finds the capture chain of 1), made from a few re-parsed files:
   layers held in containers (``for layer in self.layers: layer(...)`` where ``self.layers`` is built
   from ``make_layers(..., lambda ...: DecoderLayer(...))``), layers built by a factory
   (``self.experts = get_moe_impl_class(...)(...)``: the factory's unconditional return), and the
   MoE quant method (``self.quant_method.apply``: the method the runtime view resolved through
   SGLang's own ``get_quant_method`` for this device, model and flags; where the view decides none
   or cannot decide, no method is followed and no class is picked by its name).
   Hops made by these resolutions are marked inferred.
3. In that code: host syncs and data-dependent shapes (``.item()``, ``.tolist()``, ``.cpu()``,
   ``.nonzero()``, ``.unique()``, ``torch.cuda.synchronize()``, ``torch.bincount``, boolean-mask
   indexing), skipping those guarded by ``if not <is capturing>`` and the like.
4. For each MoE kernel path (quant-method ``apply`` -> ... -> Triton kernel launch): whether it runs
   inside the capture and whether it is capture-safe.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Optional

from ..runtime import runtime_view
from ..engine.handoffs import IGNORE, describe, handoffs
from ..findings import Evidence, Finding
from . import check
from ..runtime.capture import CaptureScope, capture_route, capture_chains, model_forwards, reach

_DEFAULT_HAZARDS = {
    ".item": "host sync",
    ".tolist": "host sync",
    ".cpu": "host sync",
    ".numpy": "host sync",
    ".nonzero": "data-dependent shape",
    ".unique": "data-dependent shape",
    ".bincount": "data-dependent shape",
    ".masked_select": "data-dependent shape",
    ".synchronize": "host sync",
}
_CAPTURE_TEST = re.compile(r"captur", re.I)


@dataclass(frozen=True)
class CudaGraphParams:
    # where the capture and what it reaches are looked for (recon.runtime.capture.CaptureScope)
    capture_dirs: list[str] = CaptureScope.capture_dirs  # where the decode capture lives
    exclude_dirs: list[str] = CaptureScope.exclude_dirs
    forward_names: list[str] = CaptureScope.forward_names  # what the captured function calls the model's forward by
    max_depth: int = CaptureScope.max_depth
    max_nodes: int = CaptureScope.max_nodes
    dynamic_cap: int = CaptureScope.dynamic_cap  # follow an untyped dynamic call only when it has this few candidates
    kernel_depth: int = 3  # hops from a quant method's apply to the kernels it launches
    handoff_ignore: list[str] = IGNORE  # library calls that pick no kernel
    max_findings: int = 40
    constraints: list[str] = ()  # what a kernel on this path must respect (the spec lists them)
    hazards: Optional[dict] = None  # call suffix -> what it is; None: the built-in table


# --- 3. hazards -----------------------------------------------------------------------------------


def _guarded(branches, scope: str, line: int) -> Optional[int]:
    """Line of a capture guard that keeps ``line`` out of the capture, or None."""
    for b in branches:
        if b.scope != scope or not _CAPTURE_TEST.search(b.test):
            continue
        test = b.test.strip()
        single = not re.search(r"\b(and|or)\b", test)
        if test.startswith("not ") and single and b.line < line <= b.body_end:
            return b.line
        if not test.startswith("not ") and single:
            if b.else_line and b.else_line <= line <= b.end_line:
                return b.line
    return None


def _hazards(ctx, fn: str, params: CudaGraphParams) -> list[dict]:
    key = ("cg-haz", fn)
    if key in ctx.cache:
        return ctx.cache[key]
    G = ctx.tree.graph
    d = G.nodes[fn]
    out: list[dict] = []
    ctx.cache[key] = out
    if d.get("kind") not in ("function",) or not d.get("path"):
        return out
    facts = ctx.tree.index.facts(d["path"])
    if facts is None:
        return out
    scope = d.get("qualname")
    lines = ctx.cache.get(("lines", d["path"])) or ctx.tree.lines(d["path"])
    ctx.cache[("lines", d["path"])] = lines
    pats = params.hazards or _DEFAULT_HAZARDS
    for c in facts.calls:
        if c.scope != scope:
            continue
        for suffix, what in pats.items():
            if not (c.func.endswith(suffix) and (c.func == suffix.lstrip(".") or c.func[-len(suffix) - 1 : -len(suffix)] not in ("_",))):
                continue
            if suffix == ".synchronize" and not c.func.startswith(("torch.cuda", "torch.", "self.device_module")) and "stream" not in c.func:
                continue
            receiver = c.func[: -len(suffix)]
            if "cpu" in receiver.lower() and suffix in (".tolist", ".item", ".numpy", ".cpu"):
                continue  # already a host tensor: no device sync
            token = suffix + "("
            hit = next((ln for ln in range(c.line, (c.end_line or c.line) + 1) if token in lines[ln - 1]), None)
            if hit is None:
                continue
            if any(h["line"] == hit for h in out):
                break
            g = _guarded(facts.branches, scope, hit)
            out.append({"function": fn, "path": d["path"], "line": hit, "call": c.func + "()", "token": token, "kind": what, "guarded_by": g})
            break
    for s in facts.subscripts:
        if s.scope == scope and s.line <= len(lines) and s.value in lines[s.line - 1]:
            g = _guarded(facts.branches, scope, s.line)
            out.append({"function": fn, "path": d["path"], "line": s.line, "call": f"{s.value}[{s.index}]", "token": s.value + "[", "kind": "data-dependent shape (boolean mask)", "guarded_by": g})
    return out


# --- the check -----------------------------------------------------------------------------------


def _ev(ctx, path: str, line: int, note: str) -> Evidence:
    return Evidence(path, line, note=note, snippet=ctx.snippet(path, line))


@dataclass
class CaptureHazardsData:
    """Host syncs and data-dependent shapes reachable from the captured forward."""

    capture_site: str  # path:line
    model_forward: str
    reachable_functions: int
    functions: list
    guarded: list
    constraints: list
    elsewhere: list  # hazards in code the mapped step does not enter (recon.placement): not counted


@dataclass
class MoEPathData:
    """A MoE quant method reached from the captured forward: its kernels and whether they are capture-safe."""

    quant_method: str
    selected_for_device: bool
    in_capture: bool
    capture_safe: bool
    kernels: list
    scanned: list
    native_ops: list
    library_ops: list
    resolved_by: str  # "runtime view": the method is only ever taken from the view
    launches: list  # [{kernel, path, line}]
    hazards: list
    guarded: list
    capture_chain: list  # [{what, path, line, inferred}]
    path_to_apply: list  # [{node, path, line, how, inferred}]
    constraints: list


@dataclass
class UnresolvedMoEData:
    """MoE quant methods reached from the capture whose kernels are picked at run time."""

    capture_site: str
    unresolved_quant_methods: list
    handoffs: dict  # quant method -> where it hands its work off

@check("cuda_graph_host_sync", params=CudaGraphParams, payload=(CaptureHazardsData, MoEPathData, UnresolvedMoEData))
def cuda_graph_host_sync(ctx, rule) -> list[Finding]:
    G = ctx.tree.graph
    params: CudaGraphParams = rule.params
    constraints = list(params.constraints)
    forwards = model_forwards(ctx)
    chains = capture_chains(ctx, params)
    if not forwards or not chains:
        return []
    # the plain capture (graph_ctx / torch.cuda.graph) before breakable or piecewise variants
    chains.sort(key=lambda c: (not re.search(r"(^|[ .])(graph_ctx|graph)\(\)", G.nodes[c["site"]]["name"]), c["site_path"], c["site_line"]))
    chain = chains[0]
    view = runtime_view(ctx) if getattr(ctx.model, "num_experts", 0) else None
    if view is not None and view.moe_method:
        # the method SGLang's own get_quant_method returns for this device, model and flags
        qm, device_matched = [view.moe.get("apply") or view.moe_method], True
    else:
        # the view decided no method (its diagnostics say why) or could not decide one: no class
        # is picked by its name instead, and the capture's hazards are still reported
        qm, device_matched = [], False
    primary_qm = qm[:1] if device_matched else qm
    fwd = forwards[0]
    parent = reach(ctx, [fwd], params, primary_qm)
    fd = G.nodes[fwd]
    model_hop = {"what": f"model forward: {fd['qualname']} (EntryClass for {', '.join(ctx.model.architectures)})", "path": fd["path"], "line": fd["line"], "text": "def forward", "inferred": True}
    capture_hops = chain["hops"] + [model_hop]
    findings: list[Finding] = []
    # hazards in every reached function, in one finding; capture-guarded ones kept in data only
    guarded, live_all, by_fn = [], [], []
    for n in sorted(parent, key=lambda n: (G.nodes[n].get("path", ""), G.nodes[n].get("line", 0))):
        hz = _hazards(ctx, n, params)
        guarded += [h for h in hz if h["guarded_by"]]
        live = [h for h in hz if not h["guarded_by"]]
        if live:
            hops = capture_route(parent, n)
            live_all += live
            by_fn.append({"function": n, "hazards": [{k: h[k] for k in ("path", "line", "call", "kind")} for h in live],
                          "reached_by": [{"node": h[0], "from": h[1], "path": h[2], "line": h[3], "how": h[4], "inferred": h[5]} for h in hops]})
    # against the mapped step: a sync in code the step never enters is not blamed on the step
    live_all, by_fn, elsewhere, placement = _placed(ctx, live_all, by_fn)
    if live_all:
        cap = params.max_findings
        ev = [_ev(ctx, chain["site_path"], chain["site_line"], "CUDA-graph capture site")]
        ev += [_ev(ctx, h["path"], h["line"], f"{h['kind']}: {h['call']} in {G.nodes[h['function']]['qualname']}") for h in live_all[:cap]]
        kinds = sorted({h["kind"] for h in live_all})
        msg = (f"{len(live_all)} host sync(s)/data-dependent shape(s) in {len(by_fn)} function(s) statically reachable from the "
               f"CUDA-graph-captured forward of {ctx.model.name} ({', '.join(kinds)}); branches inside a function are not evaluated, "
               f"so some may only run outside decode capture (prefill, logprobs, warmup): each is a hazard if its branch runs "
               f"while capturing")
        if elsewhere:
            msg += (f"; {len(elsewhere)} more in code the mapped step does not run (or reaches only through a call in a "
                    f"branch it decides off) are not counted")
        if placement.get("placement") == "elsewhere":
            # none is on the step: said so here (no model named), not as a site off the step
            msg = (f"{len(live_all)} host sync(s)/data-dependent shape(s) in {len(by_fn)} function(s) statically reachable "
                   f"from the CUDA-graph-captured forward ({', '.join(kinds)}), none on the mapped step for this device, model "
                   f"and flags: each sits in code the step does not run (a function it does not enter, a branch it decides "
                   f"off) or in a function it reaches only through a call in such a branch (elsewhere in the tree)")
            placement = {**placement, "placement_said": True}
        findings.append(Finding(rule.id, msg, "warning", ev, {
            "capture_site": f"{chain['site_path']}:{chain['site_line']}",
            "model_forward": fwd,
            "reachable_functions": len(parent),
            "functions": by_fn,
            "guarded": [{k: h[k] for k in ("path", "line", "call", "guarded_by")} for h in guarded],
            "constraints": constraints,
            "elsewhere": elsewhere,
            **placement,
        }))
    # the MoE kernel paths: inside capture? capture-safe?
    unresolved = []  # quant methods run inside the capture whose kernels the graph does not reach
    for q in qm:
        in_capture = q in parent
        if not in_capture:  # a path not reached from the captured forward is not a capture fact
            continue
        sub = reach(ctx, [q], dataclasses.replace(params, max_depth=params.kernel_depth), [])
        kernels = sorted(v for v in sub if G.nodes[v].get("kind") == "triton_kernel")
        natives = sorted(v for v in sub if G.nodes[v].get("kind") == "native_op")
        libraries: list = []
        if view is not None and q == view.moe.get("apply"):
            # what the runtime view reached from apply on the path taken (branches decided)
            leaves = view.primary_leaves()
            kernels = sorted({lf["name"] for lf in leaves if lf["kind"] == "triton_kernel" and lf["name"] in G})
            natives = sorted({lf["name"] for lf in leaves if lf["kind"] == "native_op"})
            libraries = [{"op": lf["name"], "path": lf["path"], "line": lf["line"]} for lf in leaves if lf["kind"] == "library"]
            sub = reach(ctx, [q], dataclasses.replace(params, max_depth=params.kernel_depth), []) if not kernels else \
                {k: v for k, v in sub.items() if k == q or k in kernels or not (G.nodes[k].get("kind") == "triton_kernel")}
            walked = {w["node"] for w in view.moe.get("walked", []) if [] in (w.get("when") or [[]])}
            if walked:  # the functions the view entered on the path taken, not all the graph reaches
                sub = {k: v for k, v in sub.items() if k == q or k in walked or k in kernels}
        if not kernels and not natives and not libraries:
            unresolved.append(q)
            continue
        hz = [h for v in sorted(sub) for h in _hazards(ctx, v, params)]
        live = [h for h in hz if not h["guarded_by"]]
        qd = G.nodes[q]
        path_hops = capture_route(parent, q) if in_capture else []
        kchain = capture_route(sub, kernels[0]) if kernels else []
        if libraries or (kernels and not kchain and view is not None and q == view.moe.get("apply")):
            # hops as the runtime view walked them: (node, parent, path, line, how, inferred)
            first = next((lf for lf in view.primary_leaves() if lf["name"] in kernels), None) or \
                next((lf for lf in view.primary_leaves() if lf["kind"] == "library"), None)
            kchain = [((h["node"] if h["node"] in G else None) or (first["name"] if i == len(first["via"]) - 1 else h["node"]), None, h["path"], h["line"], h["what"], False)
                      for i, h in enumerate(first["via"])] if first else []
            kchain = [h for h in kchain if h[0]]
        ev = []
        if in_capture:
            ev += [_ev(ctx, h["path"], h["line"], h["what"] + (" (inferred)" if h["inferred"] else "")) for h in capture_hops]
            ev += [_ev(ctx, h[2], h[3], f"calls {G.nodes[h[0]].get('name', h[0])}" + (f" ({h[4]})" if h[5] else "")) for h in path_hops]
        ev.append(_ev(ctx, qd["path"], qd["line"], f"{qd['qualname']}"))
        ev += [_ev(ctx, h[2], h[3], f"{'launches' if G.nodes.get(h[0], {}).get('kind') == 'triton_kernel' else 'calls'} {G.nodes.get(h[0], {}).get('name', h[0].rsplit('.', 1)[-1])}") for h in kchain]
        ev += [_ev(ctx, h["path"], h["line"], f"{h['kind']}: {h['call']}") for h in live]
        safe = not live
        names = " -> ".join([qd["qualname"]] + [G.nodes.get(h[0], {}).get("name", h[0].rsplit(".", 1)[-1]) for h in kchain])
        if libraries and not kernels:
            names += " (library op" + ("s" if len(libraries) > 1 else "") + ": " + ", ".join(sorted({lb["op"] for lb in libraries})) + ")"
        where = ("runs inside the CUDA-graph capture" if in_capture else
                 ("not the quant method taken on this device" if device_matched and q != qm[0] else "not reached from the captured forward"))
        msg = f"MoE kernel path {names}: " + where + \
              (" and is capture-safe (no host syncs or data-dependent shapes on its path)" if safe else f"; {len(live)} host sync(s)/data-dependent shape(s) on its path")
        if view is not None and q == view.moe.get("apply"):
            msg += " (the method SGLang's get_quant_method returns for this device, model and server flags)"
        findings.append(Finding(rule.id, msg, "note" if safe else "warning", ev, {
            "quant_method": q,
            "selected_for_device": bool(device_matched and q == qm[0]),
            "in_capture": in_capture,
            "capture_safe": safe,
            "kernels": kernels,
            "scanned": sorted(v for v in sub if G.nodes[v].get("kind") == "function"),
            "native_ops": natives[:20],
            "library_ops": libraries[:20],
            "resolved_by": "runtime view",
            "launches": [{"kernel": h[0], "path": h[2], "line": h[3]} for h in kchain if G.nodes.get(h[0], {}).get("kind") == "triton_kernel"],
            "hazards": [{k: h[k] for k in ("path", "line", "call", "kind")} for h in live],
            "guarded": [{k: h[k] for k in ("path", "line", "call", "guarded_by")} for h in hz if h["guarded_by"]],
            "capture_chain": [{k: h[k] for k in ("what", "path", "line", "inferred")} for h in capture_hops],
            "path_to_apply": [{"node": h[0], "path": h[2], "line": h[3], "how": h[4], "inferred": h[5]} for h in path_hops],
            "constraints": constraints,
            # the method the view decided runs inside the capture is on the step, whatever its first line
            **(_path_placement(ctx, view, [h[0] for h in kchain]) if in_capture and view is not None and q == view.moe.get("apply") else {}),
        }))
    if unresolved and not any("quant_method" in f.data for f in findings):
        findings.append(_unresolved_finding(ctx, rule, chain, unresolved, params.kernel_depth))
    return findings


def _path_placement(ctx, view, named: list) -> dict:
    """The method the view decided runs inside the capture is on the step, whatever its first line;
    but the chain this finding names (the functions in ``named``, then the first outcome's ops) may
    pass through code reached only under tests recon could not decide (either sense): the finding
    then depends on those tests, each named with its file:line."""
    from ..placement import ON_STEP, UNDECIDED, step_sites, with_site
    from ..runtime.moe import cond_text, merge_ways
    tests = []
    for lf in view.primary_leaves():
        if lf.get("decided", not lf.get("when")):
            continue
        for t in lf.get("tests") or []:
            txt = cond_text(t["test"], t["holds"]) + (f" [{t['path']}:{t['line']}]" if t.get("path") else "")
            if txt not in tests:
                tests.append(txt)
    s = step_sites(ctx)
    walked = {w["node"]: [tuple(x) for x in w.get("when") or [[]]] for w in view.moe.get("walked", [])}
    for node in named:
        ways = merge_ways(walked.get(node) or s.functions.get(node, set()) if s is not None else walked.get(node, []))
        if not ways or () in ways:
            continue
        for t in min(ways, key=lambda w: (len(w), w)):
            txt = with_site(s, t) if s is not None else t
            if txt not in tests:
                tests.append(txt)
    return {"placement": UNDECIDED, "placement_tests": tests} if tests else {"placement": ON_STEP}


def _placed(ctx, live: list, by_fn: list) -> tuple:
    """The hazards split by where they sit against the mapped step (recon.placement): those on it
    or under undecided tests are kept (the finding is placed by the best of them); those the step
    never enters are listed apart. Without a map: all kept, unplaced."""
    from ..placement import ELSEWHERE, ON_STEP, UNDECIDED, place, step_sites

    s = step_sites(ctx)
    if s is None:
        return live, by_fn, [], {}
    # a function the capture reaches only through a call in a branch the map decided does not
    # run (`LogitsProcessor.forward` calling the prefill-only logprob helper) is not reached
    cut = {b["function"] for b in by_fn
           if any((r.get("path"), r.get("line")) in s.dead and (r.get("path"), r.get("line")) not in s.call_lines
                  for r in b.get("reached_by") or [])}
    kept, away, where, tests = [], [], set(), []
    for h in live:
        got = place(s, h["path"], h["line"])
        if got["placement"] == ELSEWHERE or h.get("function") in cut:
            away.append({k: h[k] for k in ("path", "line", "call", "kind")})
        else:
            kept.append(h)
            where.add(got["placement"])
            tests += [t for t in got["tests"] if t not in tests]
    keep_fns = {h["function"] for h in kept}
    fns = [{**b, "hazards": [x for x in b["hazards"] if any(x["path"] == h["path"] and x["line"] == h["line"] for h in kept)]}
           for b in by_fn if b["function"] in keep_fns]
    if not kept:  # every one is off the step: one finding placed elsewhere says so
        return live, by_fn, [], ({"placement": ELSEWHERE} if live else {})
    if ON_STEP in where:
        return kept, fns, away, {"placement": ON_STEP}
    # none on the step: the finding depends on the tests its hazards are reached under, named
    return kept, fns, away, {"placement": UNDECIDED, "placement_tests": tests}


def _unresolved_finding(ctx, rule, chain: dict, unresolved: list[str], depth: int) -> Finding:
    """The MoE quant method is reached from the captured forward, but no kernel is reached from it:
    older releases pick the kernels at run time (a library call in one branch, a runner object built
    from server arguments in another), which static reading does not evaluate. Said as such, so a
    spec does not claim the method is absent, with where each method hands its work off and when."""
    G = ctx.tree.graph
    short = lambda q: G.nodes[q]["qualname"].rsplit(".", 2)[-2] + ".apply"  # noqa: E731
    ignore = tuple(rule.params.handoff_ignore)
    offs = {q: handoffs(ctx, q, ignore) for q in unresolved}
    names = ", ".join(short(q) for q in unresolved)
    msg = (f"MoE quant method{'s' if len(unresolved) > 1 else ''} for {ctx.model.expert_quant} experts reached from the "
           f"CUDA-graph-captured forward of {ctx.model.name}: {names}; no Triton kernel or native op is reached from "
           f"{'them' if len(unresolved) > 1 else 'it'} within {depth} calls, so the kernels are chosen through calls this "
           f"analysis does not resolve (for instance a runner picked from server arguments at run time)")
    said = [f"{short(q)} hands off to " + "; ".join(describe(h) for h in offs[q]) for q in unresolved if offs[q]]
    if said:
        msg += ". " + ". ".join(said)
    ev = [_ev(ctx, chain["site_path"], chain["site_line"], "CUDA-graph capture site")]
    ev += [_ev(ctx, G.nodes[q]["path"], G.nodes[q]["line"], G.nodes[q]["qualname"]) for q in unresolved]
    ev += [_ev(ctx, h["path"], h["line"], f"hand-off: {describe(h)}") for q in unresolved for h in offs[q]]
    return Finding(rule.id, msg, "note", ev, {
        "capture_site": f"{chain['site_path']}:{chain['site_line']}",
        "unresolved_quant_methods": list(unresolved),
        "handoffs": {q: offs[q] for q in unresolved},
        **_placed_methods(ctx, unresolved),
    })


def _placed_methods(ctx, methods: list) -> dict:
    """A finding about quant methods is placed where the methods are (the best of them), not at
    the capture site its first evidence cites."""
    from ..placement import PLACEMENTS, place, step_sites

    s = step_sites(ctx)
    G = ctx.tree.graph
    got = [place(s, G.nodes[q].get("path"), G.nodes[q].get("line"))["placement"] for q in methods if q in G] if s else []
    return {"placement": min(got, key=PLACEMENTS.index)} if got else {}
