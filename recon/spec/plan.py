"""The plan, with recon's reference kernel and its peers measured (anchors) and scaled to the device."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from typing import Optional

from .. import roofline
from .common import TYPICAL_BATCH


REFERENCE_RESULTS = "h200_grouped_reference_impl.json"  # bench/reference_impl/bench_moe.py's results (the one copy)


SLOT_ANCHOR = "h200_slot_gemv_e8m0_scales.json"
FLASHINFER_ANCHOR = "h200_flashinfer_cutlass_moe.json"  # FlashInfer's CUTLASS fused MoE beside reference_impl, one run  # the slot kernel with E8M0 scales, as the real path stores them
REFERENCE_SOURCE = "recon/data/anchors/h200_grouped_reference_impl.json"


ARCH_SOURCE = "reference_impl/arch.py"  # the per-architecture table, read as data (never imported: it needs torch)


def _arch_table() -> Optional[dict]:
    """reference_impl/arch.py's ``_TABLE`` (major -> the flags set on that row) and ``COMPILED`` (the
    (major, minor) pairs the compile test compiles for), read from its AST; None when not installed."""
    spec = importlib.util.find_spec("reference_impl")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "arch.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return None
    found: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
    try:
        table = {}
        for k, v in zip(found["_TABLE"].keys, found["_TABLE"].values):
            if not (isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "dict" and not v.args):
                return None
            table[ast.literal_eval(k)] = {kw.arg: ast.literal_eval(kw.value) for kw in v.keywords}
        compiled = [tuple(c) for c in ast.literal_eval(found["COMPILED"])]
    except (KeyError, ValueError, TypeError, AttributeError):
        return None
    return {"table": table, "compiled": compiled}


def _arch_paths(device) -> dict:
    """What reference_impl may run on this device's architecture, from arch.py's table: the config
    paths (``dot``, ``mma``, ``wgmma``) and whether CI compiles that row (the compile test,
    tests/reference_impl/test_gluon_compile.py, compiles every launched kernel for each of ``COMPILED``)."""
    out = {"arch": device.sm, "source": ARCH_SOURCE, "supported": False, "paths": [], "compiled_in_ci": False, "compiled_as": None}
    data = _arch_table() if device.vendor == "nvidia" else None
    if data is None:
        out["why_not"] = "not a CUDA GPU" if device.vendor != "nvidia" else f"{ARCH_SOURCE} not found beside recon"
        return out
    major, minor = device.compute_capability
    row = data["table"].get(major)
    if row is None or (major, minor) < (8, 0):
        out["why_not"] = f"{ARCH_SOURCE} has no row for {device.sm}"
        return out
    row = dict(row)
    if major == 9 and minor != 0:  # for_capability: wgmma (and the one-launch kernel) are sm_90a only
        row["wgmma"] = row["fused"] = False
    out["supported"] = True
    out["paths"] = ["dot"] + [p for p in ("mma", "wgmma") if row.get(p)]
    # minor versions share their major's row: the row is compiled as (major, 0) where not exactly
    hit = next((c for c in data["compiled"] if c == (major, minor)), None) or next((c for c in data["compiled"] if c == (major, 0)), None)
    out["compiled_in_ci"] = hit is not None
    out["compiled_as"] = f"sm_{hit[0]}{hit[1]}" if hit else None
    return out


def _on_device(model, device, rl: dict, data: dict, rows: list) -> dict:
    """The kernel on this device: measured where the anchor was measured; elsewhere a prediction per M:
    the path this architecture runs there (the H200's measured path where arch.py allows it), and the
    device's floor (the model's MoE bytes per step / the profile's bandwidth) divided by that path's
    measured H200 fraction of the roofline."""
    arch = _arch_paths(device)
    if device.name == data.get("device"):
        return {**arch, "measured": True, "device": device.name, "rows": []}
    floors = {r["M"]: r for r in rl["rows"]}
    bw = rl["bandwidth_tbs"] * 1e12
    out = []
    for r in sorted(rows, key=lambda r: r["M"]):
        f = floors.get(r["M"])
        if f is None:
            continue
        h200_path = (r.get("config") or {}).get("path", "dot")
        row = {"M": r["M"], "h200_path": h200_path, "step_bytes": f["step_bytes"], "layer_bytes": f["layer_bytes"]}
        if not arch["supported"]:
            row.update(path=None, why_not=arch["why_not"])
        elif h200_path in arch["paths"]:
            eff = r["frac_roofline"]
            row.update(path=h200_path, prediction=True, h200_efficiency=round(eff, 4), h200_pct_roofline=round(100 * eff, 1),
                       floor_step_ms=round(f["step_bytes"] / bw * 1e3, 4),
                       predicted_step_ms=round(f["step_bytes"] / bw * 1e3 / eff, 4),
                       predicted_layer_ms=round(f["layer_bytes"] / bw * 1e3 / eff, 4))
        else:
            fallback = "dot"  # every architecture's row has the tl.dot kernels; they take what it cannot run
            row.update(path=fallback, why_not=(f"the H200 ran `{h200_path}` here, which {device.sm} cannot run; "
                                               f"the `{fallback}` path it would run instead has no H200 measurement at this shape in the anchor"))
        out.append(row)
    return {**arch, "measured": False, "device": device.name, "rows": out,
            "efficiency_from": f"measured on {data.get('device')} with its tuned configs, `{REFERENCE_SOURCE}`; this device has no tuned file and gets the heuristic defaults",
            "bandwidth_tbs": rl["bandwidth_tbs"]}



def _reference_kernel(model, device, rl: dict) -> dict:
    """recon's grouped kernel (reference_impl/) as measured on the H200, and scaled to this device."""
    try:
        data = roofline._anchor(REFERENCE_RESULTS)
    except (OSError, ValueError):
        return {"available": False}
    rows = [r for r in data.get("rows", []) if (r.get("E"), r.get("H"), r.get("I"), r.get("topk")) == (model.num_experts, model.hidden_size, model.moe_intermediate_size, model.top_k)]
    bw_meas = data.get("copy_bw_Bps", 0) / 1e12
    floors = {r["M"]: r for r in rl["rows"]}
    out = []
    for r in sorted(rows, key=lambda r: r["M"]):
        row = {"M": r["M"], "ms": round(r["ms"], 4), "roofline_ms": round(r["roofline_ms"], 4), "pct_roofline": round(100 * r["frac_roofline"], 1),
               "slot_ms": round(r["slot_ms"], 3) if r.get("slot_ms") else None, "x_slot": round(r["x_slot"], 1) if r.get("x_slot") else None}
        if r["M"] in floors and device.name != data.get("device"):
            # same fraction of the floor on this device: an estimate, not a measurement
            row["est_device_ms"] = round(floors[r["M"]]["layer_floor_ms"] / r["frac_roofline"], 4)
        out.append(row)
    decode = [r["pct_roofline"] for r in out if r["M"] <= 64]
    return {"available": bool(out), "device": data.get("device"), "copy_bw_tbs": round(bw_meas, 2), "timing": data.get("timing"), "rows": out,
            "decode_pct": (min(decode), max(decode)) if decode else None, "source": f"{REFERENCE_SOURCE} (bench/reference_impl/bench_moe.py)",
            "on_device": _on_device(model, device, rl, data, rows) if out else None}


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
    scale = 1.0 if device.name == data.get("device") else (data["copy_bw_Bps"] / 1e12) / device.mem_bandwidth_tbs
    rows = []
    for p in sorted(shape.get("points", []), key=lambda p: p["M"]):
        t = tuned.get(p["M"])
        ref, peer = (t or p)["reference_impl_us"], (t["flashinfer_autotuned_us"] if t else p["flashinfer_default_tactic_us"])
        rows.append({"M": p["M"], "ref_us": round(ref * scale, 1), "peer_us": round(peer * scale, 1), "ratio": round(peer / ref, 2),
                     "tactic": "autotuned" if t else "default tactic"})
    return {"device": data.get("device"), "rows": rows, "estimate": scale != 1.0, "source": f"recon/data/anchors/{FLASHINFER_ANCHOR}"}


def _plan(ctx: dict, model, device) -> list[dict]:
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
        return _plan_for_grouped(ctx, gop, model, device, rl, medium)
    if not slot_found:
        for p in plan:
            p["note"] = "no slot kernel on this device's MoE path in this tree: compare with the path that runs before acting"
    return plan


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
