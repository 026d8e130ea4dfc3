"""The one object the spec is made of, assembled from the parts: :func:`build_context` and :func:`spec_for`."""

from __future__ import annotations

import json
from typing import Optional

from .. import notanalyzed, roofline
from ..engine.handoffs import describe as describe_handoff
from ..placement import on_step, placement_counts
from ..names import short
from .common import TYPICAL_BATCH, path_line, by_name, finding_row, megabytes, graph_node
from .moepath import moe_chain, kernels_of, mermaid_flow, moe_backends, pick_moe, root_causes, runtime_summary, slot_causes
from .plan import SLOT_ANCHOR, build_plan, reference_kernel
from .roles import Roles
from .rows import headline, ranked_rows, target_row, will_it_run
from .tables import counts, dense_rows, gated_sites, gates, tensor_core_paths
from .weights import weights_as_created


SECTIONS = [
    "Summary",
    "The MoE decode path on this device",
    "What a tuned kernel needs",
    "Dense FP8 GEMM tuning",
    "Integration points and constraints",
    "The plan",
    "Appendix: every finding",
    "Not analyzed",
]


REFERENCE_DEVICES = ("h200", "b200", "rtx-pro-6000")


def scan(tree, device, model, rules=None, server_flags=None, env=None):
    """The findings the spec is built from: ``recon.scan.run_rules``, whose results are cached on
    disk by the tree's content, recon's code, the rules, the device and the model."""
    from ..rules import load_rules
    from ..scan import run_rules

    return run_rules(tree, device, model, load_rules() if rules is None else rules, server_flags=server_flags, env=env)


def build_context(tree, device, model, findings, errors=(), target_reason: Optional[str] = None, rules=None, view=None,
                  budget: Optional[dict] = None) -> dict:
    """The one object the spec is made of (JSON as is; Markdown through the templates)."""
    G = tree.graph
    titles = {r.id: r.title for r in (rules or [])}
    # the root causes and the dense tuning the plan reads come from the findings on the mapped step
    # only (recon.placement); the device-wide sections (gates, backend choice, the grouped
    # tensor-core candidates a rewrite may use) and the appendix read them all, and the appendix
    # counts them by placement
    all_findings, step_findings = findings, on_step(findings)
    roles = Roles(rules)
    rl = roofline.moe_roofline(model, device)
    gap = roofline.slot_gap(model, device, SLOT_ANCHOR)
    cg, backend = pick_moe(findings, roles, view)
    hops = moe_chain(G, cg, backend)
    kernels = kernels_of(cg, backend)
    apply_q = (cg.data["quant_method"] if cg else None) or ((backend.data.get("taken_in") or [None])[0] if backend else None)
    quant_class = apply_q.rsplit(".", 1)[0] if apply_q else None
    apply_node = graph_node(G, apply_q)
    path_files = {h["at"].rsplit(":", 1)[0] for h in hops if h.get("qualname")} | {h["defined_at"].rsplit(":", 1)[0] for h in hops if h.get("defined_at")}
    causes = root_causes(step_findings, kernels, path_files, rl, model, roles)
    for c in causes:
        c["title"] = c["title"] or titles.get(c["rule"], c["rule"])
    slot = next(iter(slot_causes(causes, roles)), None)
    slot_kernel = None
    if slot:
        d = slot["data"]
        tiles = d.get("tiles") or {}
        slot_kernel = {"name": d.get("kernel"), "qualname": d.get("qualname"), "at": path_line(d.get("path"), d.get("line")),
                       "sum_lines": [path_line(d.get("path"), l) for l in d.get("sum_lines", [])], "sum_exprs": d.get("sum_exprs", []),
                       "autotune_at": path_line(d.get("path"), tiles.get("autotune_line")) if tiles.get("autotune_line") else "",
                       "tiles": tiles.get("ranges", {})}
    arch_names = [n for n in model.architectures if any(G.nodes[q].get("kind") == "class" for q in by_name(G, n))]
    model_class = sorted(q for n in model.architectures for q in by_name(G, n) if G.nodes[q].get("kind") == "class")
    backends = []
    for f in moe_backends(findings, roles, view):
        d = f.data
        backends.append({"attribute": d.get("attribute"), "value": d.get("value"), "taken": d.get("taken"), "compared_with": d.get("compared_with"),
                         "set_in": short((d.get("set_in") or [None])[0]), "set_at": path_line(*(d.get("set_in") or [None, None, None])[1:3]),
                         "taken_in": short((d.get("taken_in") or [None])[0]), "taken_at": path_line(*(d.get("taken_in") or [None, None, None])[1:3]),
                         "others": {k: v.get("value") for k, v in sorted((d.get("reference") or {}).items())}})
    backends.sort(key=lambda b: (b["taken_in"], b["attribute"] or "", str(b["compared_with"])))
    cg_warn = next((f for f in findings if roles.is_(f, "capture") and "reachable_functions" in f.data), None)
    cg_note = next((f for f in findings if roles.is_(f, "capture") and f.data.get("unresolved_quant_methods")), None)
    cg_unresolved = cg_note.data["unresolved_quant_methods"] if cg_note else []
    cg_handoffs = sorted({describe_handoff({**h, "when": []}) for q in cg_unresolved
                          for h in (cg_note.data.get("handoffs") or {}).get(q, [])}) if cg_note else []
    rows = {r["M"]: r for r in rl["rows"]}
    r1, rt = rows.get(1, rl["rows"][0]), rows.get(TYPICAL_BATCH, rl["rows"][-1])
    gap_rows = {g["M"]: g for g in gap.get("rows", [])}
    summary = {
        "expert_mb": megabytes(rl["expert_bytes"]["total"]),
        "batch1": {"M": r1["M"], "experts": r1["unique_experts"], "layer_mb": megabytes(r1["layer_bytes"]), "step_mb": megabytes(r1["step_bytes"]), "floor_ms": r1["step_floor_ms"]},
        "typical": {"M": rt["M"], "experts": rt["unique_experts"], "layer_mb": megabytes(rt["layer_bytes"]), "step_mb": megabytes(rt["step_bytes"]), "floor_ms": rt["step_floor_ms"]},
        "gap": None,
    }
    if slot_kernel and gap.get("available") and 1 in gap_rows:
        g1 = gap_rows[1]
        gt = gap_rows.get(TYPICAL_BATCH)
        summary["gap"] = {"kind": "slot kernel measured on " + gap["measured_on"] + (", scaled by bandwidth (an estimate)" if gap["estimate"] else ""),
                          "batch1": g1, "typical": gt}
    ctx: dict = {
        "sections": list(SECTIONS),
        "target": target_row(tree, target_reason),
        "not_analyzed": notanalyzed.entries(tree),  # files the findings do not cover
        "device": device.to_dict(),
        "model": model.to_dict(),
        "model_class": {"architectures": list(model.architectures), "found": model_class, "missing": sorted(set(model.architectures) - set(arch_names))},
        "summary": summary,
        "roofline": rl,
        "slot_gap": gap,
        "moe_path": {
            "found": bool(hops),
            "quant_method": apply_q,
            "quant_method_at": path_line(apply_node.get("path"), apply_node.get("line")),
            "backend": ({"attribute": backend.data.get("attribute"), "value": backend.data.get("value"), "taken": backend.data.get("taken"),
                         "set_at": path_line(*(backend.data.get("set_in") or [None, None, None])[1:3]), "taken_at": path_line(*(backend.data.get("taken_in") or [None, None, None])[1:3])}
                        if backend else None),
            "backends": backends,
            "chain": hops,
            "mermaid": mermaid_flow(hops) if hops else "",
            "kernels": kernels,
            "slot_kernel": slot_kernel,
            "unresolved_in_capture": [] if apply_q else [short(q) for q in cg_unresolved],
            "unresolved_handoffs": [] if apply_q else cg_handoffs,
            "weights": weights_as_created(tree, quant_class, model),
            "root_causes": causes,
            "root_cause_rules": roles.root_causes(),  # the rules whose findings can be root causes, by rank
            "gated_sites": gated_sites(findings, path_files | {p.rsplit(":", 1)[0] for p in [apply_node.get("path", "")] if p}, roles),
        },
        "gates": gates(findings, roles),
        # grouped tensor-core entry points anywhere in the tree: the candidates a rewrite can use
        "tensor_core_paths": tensor_core_paths(all_findings, device, roles),
        "dense_fp8": dense_rows(step_findings, device, roles),
        "integration": {
            "swap_in": {"symbol": short(apply_q), "qualname": apply_q, "at": path_line(apply_node.get("path"), apply_node.get("line"))} if apply_q else None,
            "in_capture": cg.data.get("in_capture") if cg else None,
            "capture_safe": cg.data.get("capture_safe") if cg else None,
            "capture_site": cg.data.get("capture_chain", [{}])[0] and path_line(cg.data["capture_chain"][0].get("path"), cg.data["capture_chain"][0].get("line")) if cg else (cg_warn.data.get("capture_site") if cg_warn else None),
            "constraints": list(cg.data.get("constraints", [])) if cg else [],
            "hazards_on_path": list(cg.data.get("hazards", [])) if cg else [],
            "forward_hazards": ({"message": cg_warn.message, "count": max(0, len(cg_warn.evidence) - 1), "at": path_line(cg_warn.primary.path, cg_warn.primary.line)} if cg_warn else None),
        },
        "errors": [{"rule": r, "error": e} for r, e in sorted(errors)],
        "findings": [dict(finding_row(f), title=titles.get(f.rule_id, f.rule_id)) for f in all_findings],
        "will_it_run": will_it_run(all_findings, roles, titles),
        "finding_counts": counts(all_findings),
        "placement_counts": placement_counts(all_findings),
    }
    ctx["runtime"] = runtime_summary(view)
    gop = view.grouped_op() if view is not None else None
    ctx["moe_path"]["grouped_op"] = ({"name": gop["name"], "what": gop["what"], "at": path_line(gop["path"], gop["line"]), "kind": gop["kind"]}
                                     if gop else None)
    if view is not None and ctx["moe_path"]["found"]:
        # the chain past apply as the view walked it: to the Triton kernel it launches, else to the
        # library op (FlashInfer, DeepGEMM, ...) where the work leaves the tree
        prim = view.primary_leaves()
        leaf = next((lf for lf in prim if lf["kind"] == "triton_kernel"), None) if kernels else \
            next((lf for lf in prim if lf["kind"] in ("library", "native_op")), None)
        if leaf and not leaf.get("decided", not leaf.get("when")):
            # the chain is the first outcome of tests recon could not decide: the plan says so
            ctx["moe_path"]["assumes"] = [("" if t["holds"] else "not ") + t["test"] + (f" [{t['path']}:{t['line']}]" if t.get("path") else "")
                                          for t in leaf.get("tests") or []]
        seen_at = {h["at"] for h in hops}
        if leaf and path_line(leaf["path"], leaf["line"]) not in seen_at:
            for h in leaf["via"]:
                if path_line(h["path"], h["line"]) not in seen_at:
                    hops.append({"symbol": h["what"], "qualname": None, "at": path_line(h["path"], h["line"]), "how": "calls", "inferred": False, "defined_at": "", "kind": ""})
            how = "launches" if leaf["kind"] == "triton_kernel" else f"{leaf['kind'].replace('_', ' ')} (outside the tree)"
            hops.append({"symbol": leaf["name"], "qualname": None, "at": path_line(leaf["path"], leaf["line"]), "how": how, "inferred": False, "defined_at": "", "kind": leaf["kind"]})
            ctx["moe_path"]["mermaid"] = mermaid_flow(hops)
    tests = " ".join(g["test"] or "" for g in ctx["moe_path"]["gated_sites"])
    ctx["moe_path"]["gates"] = [g for g in ctx["gates"] if g["gate"] in tests] or [g for g in ctx["gates"] if g["gate"].startswith("is_sm")]
    ctx["reference_kernel"] = reference_kernel(model, device, rl)
    # the step budget of the kernel map (recon.kernels.budget): the same rows `recon kernels` prints
    ctx["budget"] = budget
    ctx["moe_path"]["recon_kernel"] = _recon_kernel(budget, summary, model, device)
    ctx["headline"] = headline(budget)
    ctx["budget_rows"] = ranked_rows(budget)
    ctx["plan"] = build_plan(ctx, model, device)
    ctx["not_found"] = _not_found(ctx)
    ctx["chart"] = _chart(ctx, model, device)
    # plain JSON types throughout (tuples from finding data become lists), so the JSON output and
    # the object the templates render are the same data
    return json.loads(json.dumps(ctx, sort_keys=True))


def _chart(ctx: dict, model, device) -> Optional[dict]:
    """Section 6's picture, from the rows its tables print (recon.spec.chart)."""
    from .chart import chart_of, mermaid

    c = chart_of(ctx)
    if c:
        import re

        # the model's name may come from a user's config.json: only plain characters go into the
        # Mermaid block and the PNG's alt text
        c["title"] = re.sub(r"[^\w .:+-]", "", f"{model.name}: time per MoE layer against M")
        c["mermaid"] = mermaid(c, c["title"])
    return c


def _recon_kernel(budget: Optional[dict], summary: dict, model, device) -> Optional[dict]:
    """recon's grouped kernel where `recon apply` put it on the MoE path (the map's MoE layer says so
    from the files' header): its kernels and its time per step at the summary's batches, measured or
    predicted as the step budget takes it, against the floor."""
    row = next((r for r in (budget or {}).get("rows", []) if r.get("recon_kernel")), None)
    if row is None:
        return None
    from ..refkernel import layer_times

    out = {"recon": row["recon_kernel"]["recon"], "kernels": [k for k in row["op"].split(", ") if k], "times": {}}  # the ones on the path
    bs = [summary["batch1"], summary["typical"]]
    times = layer_times(model, device, [b["M"] for b in bs])
    for b in bs:
        t = times.get(b["M"])
        if t:
            step_ms = t["ms"] * model.num_moe_layers
            out["times"][str(b["M"])] = {"step_ms": round(step_ms, 4), "how": t["how"], "path": t.get("path"), "source": t["source"],
                                         "x_floor": round(step_ms / b["floor_ms"], 2) if b["floor_ms"] else None}
    return out


def _not_found(ctx: dict) -> list[str]:
    """What the spec looked for and did not find, said plainly rather than left out."""
    out = []
    mp = ctx["moe_path"]
    if ctx["model_class"]["missing"]:
        out.append(f"model class {', '.join(ctx['model_class']['missing'])} (the model's registered architecture) is not in this tree")
    if not mp["quant_method"] and mp["unresolved_in_capture"]:
        names, many = mp["unresolved_in_capture"], len(mp["unresolved_in_capture"]) > 1
        out.append(f"which kernel the {ctx['model']['expert_quant'].upper()} MoE quant method runs on this device: "
                   f"{'the candidates ' if many else ''}{', '.join(names)} {'are' if many else 'is'} reached from the "
                   f"captured forward, but {'their' if many else 'its'} kernels are picked through calls not resolved "
                   "statically (a runner chosen at run time from server arguments, for instance)"
                   + (f"; {'they hand' if many else 'it hands'} the work to {', '.join(mp['unresolved_handoffs'])} "
                      "(the CUDA-graph note says under which branch tests)" if mp.get("unresolved_handoffs") else ""))
    elif not mp["quant_method"]:
        out.append(f"no MoE quant method for {ctx['model']['expert_quant'].upper()} experts was found on the captured forward of this model for this device")
    if not mp["found"]:
        out.append("no MoE dispatch chain (capture site -> model forward -> quant method -> kernel)")
    if mp["quant_method"] and not mp["backend"]:
        out.append("no backend selection (a string attribute set in one method and compared in another) on the MoE quant method")
    if not mp["slot_kernel"] and not mp.get("recon_kernel"):
        out.append("no per-slot CUDA-core MoE kernel (tl.sum reduction, one row per program) on the MoE path")
    if not mp["weights"]["found"]:
        out.append("no create_weights on the MoE quant method, so weight shapes are from the model profile only")
    if not ctx["tensor_core_paths"]:
        out.append("no grouped low-precision GEMM entry points")
    if not ctx["dense_fp8"]:
        out.append("no tuned-config lookup for the dense FP8 GEMM")
    if ctx["integration"]["in_capture"] is None and not mp["unresolved_in_capture"]:
        out.append("whether the MoE runs inside CUDA-graph capture (no capture chain to the MoE quant method)")
    return out


def spec_for(tree, device, model, rules=None, target_reason: Optional[str] = None, server_flags=None, env=None) -> dict:
    """Scan (cached) and build the context: the whole spec as data, for a context of its own."""
    from ..checks import CheckContext

    return spec_of(CheckContext(tree, device, model, server_flags=dict(server_flags or {}), env=dict(env or {})),
                   rules, target_reason)


def spec_of(ctx, rules=None, target_reason: Optional[str] = None) -> dict:
    """The spec of a scenario's context (:attr:`recon.scenario.Scenario.ctx`): its findings (cached)
    and its one runtime view, the one its checks read."""
    from ..cache import cache_dir, load_pickle, save_pickle
    from ..progress import phase
    from ..rules import load_rules
    from ..scan import run_scenario

    rules = load_rules() if rules is None else rules
    key = _spec_key(ctx, rules, target_reason)
    store = cache_dir() / "spec" / f"{key}.pkl" if key else None
    if store is not None:
        hit = load_pickle(store)
        if hit is not None:  # a warm spec: neither the findings nor the tree's graph are read
            with phase("spec") as ph:
                ph.note = "cached"
            return hit
    res = run_scenario(ctx, rules)
    if not ctx.model.is_moe:
        # a dense model: the spec of its attention and dense GEMMs, read from the kernel map
        from ..runtime import runtime_view
        from ..scenario import kernel_map_of
        from .dense import build_dense_context
        out = build_dense_context(ctx.tree, ctx.device, ctx.model, res.findings, res.errors, target_reason, rules,
                                  runtime_view(ctx), kernel_map_of(ctx))
    else:
        view = _view_of(res)
        out = build_context(ctx.tree, ctx.device, ctx.model, res.findings, res.errors, target_reason, rules, view, _budget_of(res))
    if store is not None and not out.get("errors"):  # a crashed check is retried next time, as the findings are
        save_pickle(store, out)
    return out


def _spec_key(ctx, rules, target_reason: Optional[str]) -> Optional[str]:
    """The spec's cache key: its findings' key (tree content, recon's code and data, scenario,
    rules) and what the spec shows of this tree beyond its content (its label, the reason it was
    chosen, the files not analyzed)."""
    import hashlib

    from ..scan import cache_key

    base = cache_key(ctx, rules)
    if base is None:
        return None
    h = hashlib.sha1(base.encode())
    h.update(json.dumps([target_row(ctx.tree, target_reason), notanalyzed.entries(ctx.tree)], sort_keys=True, default=str).encode())
    return h.hexdigest()


def _budget_of(res) -> Optional[dict]:
    """The step budget of the scenario's kernel map (cached like the map), as ``recon kernels`` shows it."""
    ctx = res.context
    if ctx is None:
        return None
    from ..scenario import kernel_map_of
    return kernel_map_of(ctx)["budget"]


def _view_of(res):
    """The runtime view of the scenario the findings were made for (the findings' context's, read
    from its own cache entry on a warm run: keyed like the findings, so never older than them)."""
    ctx = res.context
    if ctx is None or not getattr(ctx.model, "num_experts", 0):
        return None
    from ..runtime import runtime_view
    return runtime_view(ctx)
