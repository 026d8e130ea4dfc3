"""The step budget: one row per piece of work a decode step runs, its floor, its time, and the total.

Built from the kernel map (what runs, how many launches; the path costs beside the launches) and
the profiles (bytes, FLOPs), and read by ``recon kernels`` and ``recon spec`` alike, so both print
the same numbers. A row's floor is the larger of its memory roofline (bytes / the device's one
bandwidth: measured where recon has a measurement, else the datasheet's) and its compute roofline
(FLOPs / the tensor rate its math runs at), at M=1, M=64 and the prefill M. Its time is measured
where an anchor was measured for that kernel on this device, predicted (the measurement scaled by
bandwidth) on another device, and absent otherwise: then the floor stands in, marked "at least".

The MoE slot path has one baseline, the anchor the model's weights take (E8M0 scales): its time is
split into the two slot GEMVs (the float32-scale anchor: the kernels alone) and the per-call scale
conversion (the difference), so the rows add up to that one measurement.
"""

from __future__ import annotations

from typing import Optional

from .. import roofline
from ..engine.dtypes import ELEMENT_BITS

DECODE_M = (1, 64)
DEFAULT_PREFILL_M = 4096  # the prefill M a budget shows when none is asked for (--prefill-m)
SLOT_E8M0 = "h200_slot_gemv_e8m0_scales.json"  # the slot kernel with the scales as stored: the one baseline
SLOT_F32 = "h200_slot_gemv_f32_scales.json"  # the same kernel with the scales already float32


def bandwidth(device) -> dict:
    return {"tbs": device.bandwidth_tbs, "basis": device.bandwidth_basis, "datasheet_tbs": device.mem_bandwidth_tbs}


def tensor_rate(device, math: str) -> float:
    """FLOP/s of the tensor cores for ``math`` (bf16, or fp8 at twice the bf16 rate where the device
    has FP8 tensor cores: the ratio of every FP8-capable NVIDIA part)."""
    r = device.bf16_tflops * 1e12
    return 2 * r if math == "fp8" and device.fp8 else r


def floor_point(m: int, nbytes: Optional[float], flops: Optional[float], device, math: str) -> dict:
    bw = device.bandwidth_tbs * 1e12
    mem = nbytes / bw * 1e6 if nbytes is not None else None
    comp = flops / tensor_rate(device, math) * 1e6 if flops else (0.0 if flops == 0 else None)
    floor = max(x for x in (mem, comp) if x is not None) if mem is not None or comp is not None else None
    return {"M": m, "bytes": int(nbytes) if nbytes is not None else None, "flops": int(flops) if flops is not None else None,
            "memory_us": _r(mem), "compute_us": _r(comp), "floor_us": _r(floor),
            "bound": None if floor is None else ("compute" if comp is not None and mem is not None and comp > mem else "memory")}


def _r(x):
    return None if x is None else round(x, 2)


def _ops(lay: dict) -> list[str]:
    return list(dict.fromkeys(o["name"].rsplit(".", 1)[-1] if "/" not in o["name"] and "(" not in o["name"] else o["name"]
                              for o in lay.get("ops", [])))


def _row(kind: str, op: str, launches, points: list[dict], **extra) -> dict:
    return {"kind": kind, "op": op, "launches_per_step": launches, "points": points, "tensor_cores": None, "config": None,
            "time": {}, **extra}


# --- bytes and FLOPs per layer kind -----------------------------------------------------------------
def dense_floor_inputs(model, m: int):
    if not model.dense_gemm_shapes:
        return None, None
    bits = ELEMENT_BITS.get(model.dense_quant, 16)
    blk = model.dense_block_shape
    b = f = 0
    for s in model.dense_gemm_shapes:
        n, k = s[0], s[1]
        # every weight (and block scale) read once: the bytes the map's dense roofline counts
        b += n * k * bits // 8 + ((n // blk[0]) * (k // blk[1]) * 4 if blk else 0)
        f += 2 * m * n * k
    return b * model.num_layers, f * model.num_layers


def moe_floor_inputs(model, m: int):
    eb = roofline.model_expert_bytes(model)
    uniq = roofline.unique_experts(m, model.top_k, model.num_experts)
    b = uniq * eb.total  # each touched expert read once: the bytes recon.roofline's floor counts
    f = 2 * m * model.top_k * 3 * model.hidden_size * model.moe_intermediate_size
    return b * model.num_moe_layers, f * model.num_moe_layers


def _norm(model, m: int, instances: int):
    return instances * (2 * m * model.hidden_size * 2 + model.hidden_size * 2), 0


def _logits(model, m: int):
    v = (model.hf_config or {}).get("vocab_size")
    if not isinstance(v, int) or v <= 0:
        return None, None
    return v * model.hidden_size * 2 + m * v * 4, 2 * m * v * model.hidden_size


# --- measured anchors -------------------------------------------------------------------------------
def _anchor_ms(model, name: str, kernel: str) -> tuple[dict, Optional[dict]]:
    """{M: ms per layer} of an anchor measured for ``kernel`` at this model's shape, with the anchor."""
    try:
        data = roofline._anchor(name)
    except (OSError, ValueError):
        return {}, None
    if data.get("kernel") != kernel:
        return {}, None
    return {r["M"]: r["slot_ms"] for r in roofline.anchor_rows(model, name)}, data


def _timed(ms_layer: Optional[float], layers: int, data: dict, device, name: str) -> Optional[dict]:
    if ms_layer is None:
        return None
    same = device.name == data.get("device")
    # scaled by the one bandwidth of each device (the measuring device's profile, as every floor on it)
    scale = 1.0 if same else roofline.measuring_bandwidth({**data, "copy_bw_Bps": (roofline.anchor_bandwidth_tbs(name) or 0) * 1e12}) / device.bandwidth_tbs
    return {"us": round(ms_layer * scale * layers * 1e3, 1), "how": "measured" if same else "predicted",
            "source": f"recon/data/anchors/{name}" + ("" if same else f" ({data.get('device')}, scaled by bandwidth x{scale:.3f})")}


def _moe_rows(lay: dict, model, device, ms: list[int], costs: dict) -> list[dict]:
    ops = _ops(lay)
    per_step = (lay.get("per_step") or {}).get("launches")
    L = model.num_moe_layers
    kern = next((o for o in lay.get("ops", []) if o["kind"] == "triton_kernel"), None)
    short = kern["name"].rsplit(".", 1)[-1] if kern else None
    main = _row("moe", ", ".join(ops) or "(no named op)", per_step, [floor_point(m, *moe_floor_inputs(model, m), device, "bf16") for m in ms],
                part="kernels", tensor_cores=lay.get("tensor_cores"), config=_config(costs.get("config")))
    rows = [main]
    e8, d8 = _anchor_ms(model, SLOT_E8M0, short) if short else ({}, None)
    f32, d32 = _anchor_ms(model, SLOT_F32, short) if short else ({}, None)
    conv = costs.get("conversions") or []
    if conv:
        per_call = sum(c["bytes_per_call"] for c in conv)
        names = " and ".join(c["tensor"].rsplit(".", 1)[-1] for c in conv)
        r = _row("moe", f"{names} {conv[0]['target']} per call", len(conv) * L,
                 [floor_point(m, per_call * L, 0, device, "bf16") for m in ms], part="conversion", tensor_cores=False,
                 at=f"{conv[0]['path']}:{conv[0]['line']}", fix="convert once at load (process_weights_after_loading)")
        rows.append(r)
    epi = costs.get("epilogue")
    if epi and epi.get("per_batch"):
        pb = {p["M"]: p["bytes"] for p in epi["per_batch"]}
        top = max(pb)
        # the epilogue's bytes grow with M (one row per slot): past the largest batch it was sized at, linearly
        pts = [floor_point(m, (pb[m] if m in pb else pb[top] * m / top) * L, 0, device, "bf16") for m in ms]
        rows.append(_row("moe", f"eager epilogue ({', '.join(epi['ops'])})", epi["launches"] * L, pts, part="epilogue", tensor_cores=False,
                         at=f"{epi['path']}:{epi['line']}"))
    rk = lay.get("recon_kernel")
    if rk:
        # recon's grouped kernel, put on this path by `recon apply`: its own measurement, not the slot
        # kernel's (the slot anchors time a kernel that no longer runs here)
        from ..refkernel import layer_times

        main["recon_kernel"] = rk
        for m, t in layer_times(model, device, ms).items():
            main["time"][str(m)] = {"us": round(t["ms"] * L * 1e3, 1), "how": t["how"], "source": t["source"],
                                    **({"path": t["path"]} if t.get("path") else {})}
        return rows
    for m in ms:
        if d8 and e8.get(m) is not None:
            if conv and d32 and f32.get(m) is not None:
                main["time"][str(m)] = _timed(f32[m], L, d32, device, SLOT_F32)
                rows[1]["time"][str(m)] = _timed(e8[m] - f32[m], L, d8, device, SLOT_E8M0)
                rows[1]["time"][str(m)]["source"] += f" minus {SLOT_F32}"
            else:
                main["time"][str(m)] = _timed(e8[m], L, d8, device, SLOT_E8M0)
    return rows


def _config(c: Optional[dict]) -> Optional[str]:
    if not c:
        return None
    if c["tuned"]:
        return "tuned"
    return f"default ({c['missing']} of {c['of']} shapes untuned on this device)"


def step_budget(kmap: dict, model, device, prefill_m: Optional[int] = None) -> dict:
    """The budget of one step of ``kmap`` (decode at M=1 and M=64, prefill at ``prefill_m``)."""
    ms = sorted({*DECODE_M, prefill_m or DEFAULT_PREFILL_M})
    costs = kmap.get("path_costs") or {}
    rows = []
    for lay in kmap["layers"]:
        kind = lay["kind"]
        launches = (lay.get("per_step") or {}).get("launches")
        op = ", ".join(_ops(lay)) or "(no named op)"
        if kind == "moe":
            rows += _moe_rows(lay, model, device, ms, costs.get("moe", {}))
            continue
        if kind == "dense_gemm":
            pts = [floor_point(m, *dense_floor_inputs(model, m), device, "fp8" if model.dense_quant == "fp8" else "bf16") for m in ms]
        elif kind == "norm":
            pts = [floor_point(m, *_norm(model, m, (lay.get("per_step") or {}).get("instances") or 0), device, "bf16") for m in ms]
        elif kind == "embedding":
            pts = [floor_point(m, m * model.hidden_size * 2, 0, device, "bf16") for m in ms]
        elif kind == "logits":
            pts = [floor_point(m, *_logits(model, m), device, "bf16") for m in ms]
        elif kind == "attention":
            pts = []
            for m in ms:
                a = next((r for r in lay.get("roofline", []) if r["M"] == m), None)
                pts.append(floor_point(m, a["bytes"] if a else None, None, device, "bf16"))
        else:
            pts = [floor_point(m, None, None, device, "bf16") for m in ms]
        if not launches and all(p["floor_us"] is None for p in pts):
            continue
        rows.append(_row(kind, op, launches, pts, tensor_cores=lay.get("tensor_cores"),
                         config=_config((costs.get(kind) or {}).get("config"))))
    total = {}
    for i, m in enumerate(ms):
        floor = sum(r["points"][i]["floor_us"] or 0 for r in rows)
        today = sum(_today(r, m) or 0 for r in rows)
        total[str(m)] = {"M": m, "floor_us": round(floor, 1), "today_us": round(today, 1),
                         "timed_rows": sum(1 for r in rows if r["time"].get(str(m)))}
    for r in rows:
        r["share"] = {str(m): (round(_today(r, m) / total[str(m)]["today_us"], 4) if total[str(m)]["today_us"] and _today(r, m) else None) for m in ms}
    from ..refkernel import arch_paths

    arch = arch_paths(device)  # reference_impl/arch.py's own per-architecture table, as the spec reads it
    return {"M": ms, "decode_M": list(DECODE_M), "prefill_M": ms[-1], "bandwidth": bandwidth(device),
            "recon_kernel": {k: arch.get(k) for k in ("arch", "source", "supported", "paths", "compiled_in_ci", "compiled_as", "why_not")},
            "rates": {"bf16_tflops": device.bf16_tflops, "fp8_tflops": tensor_rate(device, "fp8") / 1e12 if device.fp8 else None},
            "rows": rows, "total": total,
            "basis": ("today = the measured or predicted time where an anchor exists, else the floor (at least); "
                      "floor = max(bytes / bandwidth, FLOPs / tensor rate)")}


def _today(row: dict, m: int) -> Optional[float]:
    t = row["time"].get(str(m))
    if t:
        return t["us"]
    p = next((p for p in row["points"] if p["M"] == m), None)
    return p["floor_us"] if p else None


def ranked(budget: dict, m: int = 1) -> list[dict]:
    """Rows by their share of the step at ``m``, largest first."""
    return sorted((r for r in budget["rows"] if r["share"].get(str(m))), key=lambda r: -r["share"][str(m)])
