"""The plan, with recon's reference kernel and its peers measured (anchors) and scaled to the device."""

from __future__ import annotations

import re

from .. import roofline
from .common import TYPICAL_BATCH


from ..refkernel import (  # noqa: F401 - the spec package's names for them
    ARCH_SOURCE, FLASHINFER_ANCHOR, REFERENCE_RESULTS, REFERENCE_SOURCE, SLOT_ANCHOR, arch_paths, arch_table,
    measuring_bandwidth, on_device, reference_kernel)


def _prediction_text(od: dict, device) -> str:
    """The kernel row's words for a device without measurements: the path, CI's compile, the predicted time."""
    if not od or od.get("measured"):
        return ""
    if not od.get("supported"):
        return f"on {device.short} ({od['arch']}): reference_impl does not run ({od.get('why_not')})"
    ci = (f"compiled for {od['compiled_as']} in CI" if od["compiled_in_ci"] else f"not compiled for {od['arch']} in CI")
    pr = [r for r in od["rows"] if r.get("prediction") and r["M"] in (1, TYPICAL_BATCH)]
    text = f"on {device.short} ({od['arch']}, paths {'/'.join(od['paths'])} per `{od['source']}`, {ci})"
    if pr:
        text += ": PREDICTION, not measured: " + ", ".join(
            f"`{r['path']}` path at M={r['M']}, {r['predicted_step_ms']} ms/step (floor {r['floor_step_ms']} ms / its H200 efficiency {r['h200_pct_roofline']}%)" for r in pr)
    else:
        text += ": no prediction (no H200 measurement of a path it runs at M=1 or M=" + str(TYPICAL_BATCH) + ")"
    return text


def _flashinfer_peer(model, device) -> dict:
    """reference_impl against FlashInfer's CUTLASS fused MoE at this model's shape, both measured in
    one process on the H200 (bench/reference_impl/bench_flashinfer.py); times on another device are
    scaled by copy bandwidth and labelled an estimate."""
    try:
        data = roofline._anchor(FLASHINFER_ANCHOR)
    except (OSError, ValueError):
        return {}
    shape = next((v for v in (data.get("shapes") or {}).values()
                  if (v.get("E"), v.get("H"), v.get("I"), v.get("topk")) == (model.num_experts, model.hidden_size, model.moe_intermediate_size, model.top_k)), None)
    if not shape:
        return {}
    tuned = {p["M"]: p for p in shape.get("autotuned_points", [])}
    scale = 1.0 if device.name == data.get("device") else measuring_bandwidth(data) / device.bandwidth_tbs
    rows = []
    for p in sorted(shape.get("points", []), key=lambda p: p["M"]):
        t = tuned.get(p["M"])
        ref, peer = (t or p)["reference_impl_us"], (t["flashinfer_autotuned_us"] if t else p["flashinfer_default_tactic_us"])
        rows.append({"M": p["M"], "ref_us": round(ref * scale, 1), "peer_us": round(peer * scale, 1), "ratio": round(peer / ref, 2),
                     "tactic": "autotuned" if t else "default tactic"})
    return {"device": data.get("device"), "rows": rows, "estimate": scale != 1.0, "source": f"recon/data/anchors/{FLASHINFER_ANCHOR}"}


def build_plan(ctx: dict, model, device) -> list[dict]:
    rl = ctx["roofline"]
    rows = {r["M"]: r for r in rl["rows"]}
    r1, rt = rows.get(1, rl["rows"][0]), rows.get(TYPICAL_BATCH, rl["rows"][-1])
    slot_found = ctx["moe_path"]["slot_kernel"] is not None
    tc = ctx["tensor_core_paths"]
    cutlass = next((p for p in tc if p["format"] == "nvfp4"), None)
    ref = ctx["reference_kernel"]
    ref_rows = {r["M"]: r for r in ref.get("rows", [])}
    plan = []
    best = {
        "tier": "best",
        "title": "Grouped FP4 tensor-core GEMM over expert segments" + (f" ({cutlass['entry']}, adapted to {model.expert_quant.upper()})" if cutlass else ""),
        "what": (cutlass["adapt"] if cutlass else ["a grouped block-scaled FP4 GEMM for the model's format"]),
        "where": cutlass["at"] if cutlass else "",
        "expected": (f"reads each touched expert once on tensor cores: approaches the floor, {r1['step_floor_ms']} ms/step at M=1 and "
                     f"{rt['step_floor_ms']} ms/step at M={rt['M']} on {device.short} (expected, not measured)"),
        "ships": False,
    }
    medium = {
        "tier": "medium",
        "title": "Triton grouped kernel: sort slots by expert, tensor-core block GEMMs per expert segment, fused SwiGLU and top-k combine",
        "what": ["route with pure tensor ops (histogram, prefix sums, argsort) so it stays CUDA-graph capturable",
                 "one read of each touched expert per step; tl.dot (or tl.dot_scaled on sm_120) with BLOCK_M > 1"],
        "where": ctx["integration"]["swap_in"]["at"] if ctx["integration"]["swap_in"] else "",
        "expected": "",
        "ships": True,
    }
    if ref.get("available"):
        a, b = ref_rows.get(1), ref_rows.get(64) or ref.get("rows")[-1]
        parts = []
        if a:
            parts.append(f"measured on {ref['device']}: {a['ms']} ms per MoE layer at M=1 = {a['pct_roofline']}% of roofline, {a['x_slot']}x the slot kernel")
        if b:
            parts.append(f"{b['ms']} ms at M={b['M']} = {b['pct_roofline']}% of roofline" + (f", {b['x_slot']}x the slot kernel" if b.get("x_slot") else ""))
        est = [r for r in ref["rows"] if r.get("est_device_ms") is not None and r["M"] in (1, TYPICAL_BATCH)]
        pred = _prediction_text(ref.get("on_device") or {}, device)
        if est and not pred:
            parts.append("on " + device.short + " at the same fraction of its floor (an estimate): " + ", ".join(f"{r['est_device_ms']} ms/layer at M={r['M']}" for r in est))
        if pred:
            parts.append(pred)
        medium["expected"] = "; ".join(parts)
    else:
        medium["expected"] = "reads each touched expert once; no measurement of recon's kernel at this model's shape"
    cheap = {
        "tier": "cheapest",
        "title": "Retune the slot kernel (larger BLOCK_K, num_stages 1, more warps)",
        "what": ["edit the autotune configs of the slot kernel; no new code path"],
        "where": ctx["moe_path"]["slot_kernel"]["autotune_at"] if slot_found else "",
        "expected": (f"small: tiles do not change which units do the math — it keeps CUDA-core FMAs, the per-element decode, and one expert read per slot "
                     f"({rt['slot_reread_factor']}x the floor's bytes at M={rt['M']}, {rl['rows'][-1]['slot_reread_factor']}x at M={rl['rows'][-1]['M']})"
                     + (f"; today it runs at {round(100 * ctx['summary']['gap']['batch1']['fraction_of_roofline'], 1)}% of roofline at M=1" if ctx["summary"].get("gap") else "")),
        "ships": False,
    }
    plan = [best, medium, cheap]
    gop = ctx["moe_path"].get("grouped_op")
    if gop and not slot_found:
        return _by_share(_assuming(_plan_for_grouped(ctx, gop, model, device, rl, medium), ctx), ctx, model)
    if not slot_found:
        for p in plan:
            p["note"] = "no slot kernel on this device's MoE path in this tree: compare with the path that runs before acting"
    for p, addresses in zip(plan, ("moe", "moe", None)):
        p["addresses"] = addresses
    return _by_share(_assuming(plan, ctx) + _budget_items(ctx), ctx, model)


def _assuming(plan: list[dict], ctx: dict) -> list[dict]:
    """The MoE items are written for the chain the spec names; where that chain's ops are reached
    only under tests recon could not decide, each item says which outcome it assumes."""
    tests = (ctx.get("moe_path") or {}).get("assumes") or []
    for p in plan if tests else ():
        p["assumes"] = list(tests)
    return plan


def _today(row: dict, m: str):
    t = row["time"].get(m)
    return t["us"] if t else next(p["floor_us"] for p in row["points"] if str(p["M"]) == m)


def _budget_items(ctx: dict) -> list[dict]:
    """Fixes the step budget names beside the kernel rewrites: a per-call conversion done once at load,
    an untuned config tuned for this device."""
    b = ctx.get("budget")
    out = []
    for r in (b or {}).get("rows", []):
        if r.get("fix") and "process_weights_after_loading" in r["fix"]:
            out.append({"tier": "cheapest", "title": "Convert the MXFP4 scales once at load, in process_weights_after_loading",
                        "what": [f"the slot path runs {r['op']} on every call ({r['launches_per_step']} conversions a step)",
                                 "do the conversion once in the quant method's process_weights_after_loading and store the "
                                 "float32 scales on the layer (4x the scale bytes in memory), so the forward only reads them"],
                        "where": r.get("at", ""), "ships": False, "addresses": "conversion",
                        "expected": "removes the conversion row of the step budget; the slot GEMVs are unchanged"})
        if r["kind"] == "dense_gemm" and (r.get("config") or "").startswith("default"):
            d = next(iter(ctx.get("dense_fp8") or []), None)
            out.append({"tier": "cheapest", "title": f"Tune the dense FP8 GEMM configs for {ctx['device']['short']}",
                        "what": [f"the dense GEMMs run {r['op']} with the {r['config']}",
                                 "run SGLang's tuning script (section 4) on this device and add the config files"],
                        "where": (d or {}).get("template_at", ""), "ships": False, "addresses": "dense_gemm",
                        "expected": "no anchor for the dense GEMMs: the gain is unmeasured (the floor is in the budget)"})
    return out


def _saves(p: dict, ctx: dict, model, m: str):
    """What a plan item takes off the step at M (us), from the step budget; None where unmeasured."""
    b = ctx.get("budget")
    if not b:
        return None
    moe = [r for r in b["rows"] if r["kind"] == "moe"]
    if p.get("addresses") == "conversion":
        r = next((r for r in moe if r.get("fix")), None)
        return r["time"][m]["us"] if r and r["time"].get(m) else None
    if p.get("addresses") != "moe" or not moe or not any(r["time"].get(m) for r in moe):
        return None
    today = sum(_today(r, m) for r in moe)
    if p["tier"] == "best":
        return today - moe[0]["points"][0]["floor_us"]
    ref = ctx.get("reference_kernel") or {}
    od = ref.get("on_device") or {}
    if od.get("measured"):
        got = next((r["ms"] * model.num_moe_layers * 1e3 for r in ref.get("rows", []) if str(r["M"]) == m), None)
    else:
        got = next((r["predicted_step_ms"] * 1e3 for r in od.get("rows", []) if str(r["M"]) == m and r.get("prediction")), None)
    return today - got if got is not None else None


def _by_share(plan: list[dict], ctx: dict, model) -> list[dict]:
    """The plan ranked by the share of the step each item takes off at the smallest decode M (the step
    budget's total); items without a measurement or prediction keep their order, after the others."""
    b = ctx.get("budget")
    if not b:
        return plan
    m = str(b["M"][0])
    total = b["total"][m]["today_us"]
    for p in plan:
        s = _saves(p, ctx, model, m)
        p["saves_us"] = round(s, 1) if s is not None else None
        p["step_share"] = round(s / total, 4) if s is not None and total else None
        p["step_M"] = int(m)
    order = sorted(range(len(plan)), key=lambda i: (plan[i]["saves_us"] is None, -(plan[i]["saves_us"] or 0), i))
    return [plan[i] for i in order]


def _plan_for_grouped(ctx: dict, gop: dict, model, device, rl: dict, medium: dict) -> list[dict]:
    """The chain already ends in a grouped tensor-core kernel: no rewrite is recommended on faith.
    What is left to gain is the distance to the memory floor, which only a side-by-side
    measurement of the two kernels can show."""
    rows = {r["M"]: r for r in rl["rows"]}
    r1, rt = rows.get(1, rl["rows"][0]), rows.get(TYPICAL_BATCH, rl["rows"][-1])
    keep = {
        "tier": "best",
        "title": f"Already a grouped tensor-core kernel: {gop['name'].rsplit('.', 1)[-1]} ({gop['what'] or gop['kind']})",
        "what": [f"the chain ends at `{gop['name']}` (`{gop['at']}`): each touched expert is read once per step, on tensor cores",
                 "measure it against the memory floor before changing anything: the floor is what is left to gain"],
        "where": gop["at"],
        "expected": (f"the floor on {device.short}: {r1['step_floor_ms']} ms/step at M=1, {rt['step_floor_ms']} ms/step at M={rt['M']}"),
        "ships": False,
    }
    compare = dict(medium)
    compare["ships"] = False
    compare["title"] = "recon's grouped kernel against it, side by side: swap only where it measures faster"
    compare["what"] = ["run both on the same weights under CUDA-graph replay; swap only where recon's is faster"]
    peer = _flashinfer_peer(model, device) if re.search(r"flashinfer(\.fused_moe)?\.cutlass_fused_moe$", gop["name"]) else {}
    if peer.get("rows"):
        faster = [r for r in peer["rows"] if r["ratio"] > 1.0]
        slower = [r for r in peer["rows"] if r["ratio"] <= 1.0]
        est = f" scaled to {device.short} by copy bandwidth (an estimate)" if peer["estimate"] else ""
        compare["expected"] = ("measured side by side on " + peer["device"] + est + ": "
                               + "; ".join(f"M={r['M']}: recon {r['ref_us']} us vs FlashInfer {r['peer_us']} us ({r['tactic']}), {r['ratio']}x" for r in peer["rows"] if r["M"] <= 64))
        compare["what"] = [f"recon's kernel measured faster at M={', '.join(str(r['M']) for r in faster)}" if faster else "recon's kernel was not measured faster at any M",
                           f"not faster at M={', '.join(str(r['M']) for r in slower)}: keep FlashInfer there" if slower else
                           "above M=64 FlashInfer ran its default tactic only (its autotuner did not run): those ratios overstate recon's lead",
                           f"source: `{peer['source']}`"]
    else:
        compare["expected"] = "not measured against this op: no recommendation to replace it"
    return [keep, compare]
