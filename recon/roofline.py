"""The memory roofline of MoE decode: bytes a step must move, the floor time at a device's bandwidth.

Decode at small batch is memory-bound: every expert a token is routed to must have its weights read
at least once per step. A kernel that reads each touched expert once (the grouped path) moves
``unique_experts(M) x bytes_per_expert`` per MoE layer; a slot kernel that re-reads an expert for
every (token, expert) slot moves ``M x top_k x bytes_per_expert``. The floor is bytes / bandwidth.

Measured anchors (``recon/data/anchors/*.json``: the slot kernel and recon's grouped kernel on an
H200) turn the floor into the gap the findings explain. On another device the anchors are scaled
by the bandwidth ratio — an estimate, and the spec says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from .engine.dtypes import ELEMENT_BITS, SCALE_BYTES

ANCHORS_DIR = Path(__file__).resolve().parent / "data" / "anchors"



@dataclass(frozen=True)
class ExpertBytes:
    """Bytes one expert holds in its stored format (weights + block scales)."""

    w13: int  # gate+up weight [2I, H]
    w13_scale: int
    w2: int  # down weight [H, I]
    w2_scale: int

    @property
    def w13_total(self) -> int:
        return self.w13 + self.w13_scale

    @property
    def w2_total(self) -> int:
        return self.w2 + self.w2_scale

    @property
    def total(self) -> int:
        return self.w13_total + self.w2_total


def expert_bytes(hidden: int, inter: int, quant: str, group: Optional[int], scale_dtype: Optional[str]) -> ExpertBytes:
    """w13 is [2I, H] and w2 is [H, I] per expert; scales are one per ``group`` elements along K."""
    bits = ELEMENT_BITS.get(quant, 16)
    sb = SCALE_BYTES.get(scale_dtype, 4) if group else 0
    w13_elems, w2_elems = 2 * inter * hidden, hidden * inter
    return ExpertBytes(
        w13=w13_elems * bits // 8,
        w13_scale=(2 * inter * (hidden // group) * sb) if group else 0,
        w2=w2_elems * bits // 8,
        w2_scale=(hidden * (inter // group) * sb) if group else 0,
    )


def unique_experts(m: int, top_k: int, num_experts: int) -> float:
    """Expected distinct experts touched by ``m`` tokens, each routed to ``top_k`` of ``num_experts``
    uniformly: E * (1 - (1 - k/E)^M)."""
    if num_experts <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** m)


def model_expert_bytes(model) -> ExpertBytes:
    return expert_bytes(model.hidden_size, model.moe_intermediate_size, model.expert_quant, model.expert_group_size, model.expert_scale_dtype)


def moe_roofline(model, device, batches: Optional[list[int]] = None) -> dict:
    """Per decode batch M: experts touched, bytes per layer and per step, floor time, and the bytes a
    slot kernel (one expert read per token-expert slot) moves instead."""
    eb = model_expert_bytes(model)
    bw = device.bandwidth_tbs * 1e12
    rows = []
    for m in sorted(set(batches or model.decode_batches)):
        uniq = unique_experts(m, model.top_k, model.num_experts)
        layer_bytes = uniq * eb.total
        step_bytes = layer_bytes * model.num_moe_layers
        slot_layer = m * model.top_k * eb.total
        rows.append({
            "M": m,
            "unique_experts": round(uniq, 2),
            "layer_bytes": int(round(layer_bytes)),
            "step_bytes": int(round(step_bytes)),
            "layer_floor_ms": round(layer_bytes / bw * 1e3, 5),
            "step_floor_ms": round(step_bytes / bw * 1e3, 4),
            "slot_layer_bytes": int(slot_layer),
            "slot_reread_factor": round(slot_layer / layer_bytes, 2) if layer_bytes else None,
        })
    return {
        "bandwidth_tbs": device.bandwidth_tbs,
        "num_moe_layers": model.num_moe_layers,
        "expert_bytes": {"w13": eb.w13, "w13_scale": eb.w13_scale, "w2": eb.w2, "w2_scale": eb.w2_scale,
                         "w13_total": eb.w13_total, "w2_total": eb.w2_total, "total": eb.total},
        "all_experts_layer_bytes": eb.total * model.num_experts,
        "rows": rows,
    }


# --- measured anchors ---------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _anchor(name: str) -> dict:
    return json.loads((ANCHORS_DIR / name).read_text(encoding="utf-8"))


def anchor_rows(model, name: str) -> list[dict]:
    """Rows of one anchor file measured at this model's MoE shape (E, H, I, top-k), by M."""
    try:
        data = _anchor(name)
    except (OSError, ValueError):
        return []
    key = (model.num_experts, model.hidden_size, model.moe_intermediate_size, model.top_k)
    return sorted((r for r in data.get("rows", []) if (r.get("E"), r.get("H"), r.get("I"), r.get("topk")) == key), key=lambda r: r["M"])


def anchor_bandwidth_tbs(name: str) -> Optional[float]:
    try:
        data = _anchor(name)
    except (OSError, ValueError):
        return None
    if "bw_TBps" in data:
        return float(data["bw_TBps"])
    for k in ("bw", "copy_bw_Bps"):
        if k in data:
            return float(data[k]) / 1e12
    return None


def measuring_bandwidth(data: dict) -> float:
    """The bandwidth of the device an anchor was measured on, as its profile gives it (the one number
    every floor on that device uses); the anchor's own copy figure where no profile names the device."""
    from .profiles import ProfileError, load_device

    try:
        return load_device(data.get("device") or "").bandwidth_tbs
    except ProfileError:
        return data.get("copy_bw_Bps", 0) / 1e12


def slot_gap(model, device, anchor: str = "h200_slot_gemv_e8m0_scales.json") -> dict:
    """The slot kernel's measured time per MoE layer at this model's shape, scaled to ``device`` by
    bandwidth when the device is not the one measured; with its fraction of the floor."""
    rows = anchor_rows(model, anchor)
    if not rows or not anchor_bandwidth_tbs(anchor):
        return {"anchor": anchor, "available": False, "rows": []}
    measured_on = _anchor(anchor).get("device", "NVIDIA H200")
    bw_meas = measuring_bandwidth({"device": measured_on, "copy_bw_Bps": anchor_bandwidth_tbs(anchor) * 1e12})
    same = device.name == measured_on
    scale = 1.0 if same else bw_meas / device.bandwidth_tbs
    eb = model_expert_bytes(model)
    bw = device.bandwidth_tbs * 1e12
    out = []
    for r in rows:
        uniq = unique_experts(r["M"], model.top_k, model.num_experts)
        floor_ms = uniq * eb.total / bw * 1e3
        ms = r["slot_ms"] * scale
        out.append({
            "M": r["M"],
            "slot_layer_ms": round(ms, 4),
            "slot_step_ms": round(ms * model.num_moe_layers, 2),
            "floor_layer_ms": round(floor_ms, 5),
            "floor_step_ms": round(floor_ms * model.num_moe_layers, 4),
            "fraction_of_roofline": round(floor_ms / ms, 4) if ms else None,
            "gap_x": round(ms / floor_ms, 1) if floor_ms else None,
        })
    return {
        "anchor": anchor,
        "available": True,
        "measured_on": measured_on,
        "measured_bandwidth_tbs": round(bw_meas, 3),
        "estimate": not same,
        "scale": round(scale, 4),
        "rows": out,
    }
