"""recon's grouped kernel (reference_impl/) on a device: what its per-architecture table allows there
(``reference_impl/arch.py``, read as data) and its time, measured (the anchor) or predicted. The one
answer the spec, the kernel map and the step budget all read."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Optional

from . import roofline

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



_measuring_bandwidth = roofline.measuring_bandwidth  # the one bandwidth of the device an anchor was measured on


def _reference_kernel(model, device, rl: dict) -> dict:
    """recon's grouped kernel (reference_impl/) as measured on the H200, and scaled to this device."""
    try:
        data = roofline._anchor(REFERENCE_RESULTS)
    except (OSError, ValueError):
        return {"available": False}
    shape = (model.num_experts, model.hidden_size, model.moe_intermediate_size, model.top_k)
    measured = [r for r in data.get("rows", []) if (r.get("E"), r.get("H"), r.get("I"), r.get("topk")) == shape]
    # one bandwidth per device: the floor of the measuring device is its profile's (measured) bandwidth,
    # and the slot kernel it is compared with is the one baseline, the E8M0-scale anchor
    bw_meas = _measuring_bandwidth(data)
    slot = {r["M"]: r["slot_ms"] for r in roofline.anchor_rows(model, SLOT_ANCHOR)}
    rows = []
    for r in measured:
        floor = r["bytes"] / (bw_meas * 1e12) * 1e3 if r.get("bytes") else r["roofline_ms"]
        rows.append({**r, "roofline_ms": floor, "frac_roofline": floor / r["ms"]})
    floors = {r["M"]: r for r in rl["rows"]}
    out = []
    for r in sorted(rows, key=lambda r: r["M"]):
        s = slot.get(r["M"])
        row = {"M": r["M"], "ms": round(r["ms"], 4), "roofline_ms": round(r["roofline_ms"], 4), "pct_roofline": round(100 * r["frac_roofline"], 1),
               "slot_ms": round(s, 3) if s else None, "x_slot": round(s / r["ms"], 1) if s else None}
        if r["M"] in floors and device.name != data.get("device"):
            # same fraction of the floor on this device: an estimate, not a measurement
            row["est_device_ms"] = round(floors[r["M"]]["layer_floor_ms"] / r["frac_roofline"], 4)
        out.append(row)
    decode = [r["pct_roofline"] for r in out if r["M"] <= 64]
    return {"available": bool(out), "device": data.get("device"), "copy_bw_tbs": round(bw_meas, 2), "slot_anchor": SLOT_ANCHOR, "timing": data.get("timing"), "rows": out,
            "decode_pct": (min(decode), max(decode)) if decode else None, "source": f"{REFERENCE_SOURCE} (bench/reference_impl/bench_moe.py)",
            "on_device": _on_device(model, device, rl, data, rows) if out else None}
