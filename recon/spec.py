"""The optimization spec: one context object built from the tree, the findings, the device and the model.

:func:`build_context` assembles plain data (dicts, lists, numbers, strings) — the JSON output is that
object, and the Markdown output renders it with the Jinja2 templates in ``templates/``, so the two
never disagree. Everything is sorted and nothing depends on the clock, so the same input gives the
same bytes and two specs diff cleanly.

The spec reads facts the checks already found (``Finding.data``); it never re-parses the tree. The
one exception is the quant method's ``create_weights``: that single file is parsed with stdlib
``ast`` to read the weight shapes and dtypes as SGLang creates them, evaluated at the model's sizes.
Findings are cached per (tree content, device, model, rules, checks code), so a warm spec is fast.
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path
from typing import Any, Optional

from . import bounded, notanalyzed, roofline
from .errors import ReconError
from .resources import resource_dir
from .runtime.dtypes import DTYPE_BYTES
from .runtime.handoffs import describe as describe_handoff
from .runtime.shapes import int_arith, model_size

TEMPLATES_DIR = resource_dir("templates")
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
TYPICAL_BATCH = 16  # the concurrency the seed scenario decoded at
REFERENCE_DEVICES = ("h200", "b200", "rtx-pro-6000")
REFERENCE_RESULTS = "h200_grouped_reference_impl.json"  # copy of bench/reference_impl/results.json
SLOT_ANCHOR = "h200_slot_gemv_e8m0_scales.json"
FLASHINFER_ANCHOR = "h200_flashinfer_cutlass_moe.json"  # FlashInfer's CUTLASS fused MoE beside reference_impl, one run  # the slot kernel with E8M0 scales, as the real path stores them

# Rules whose findings explain the MoE kernel's time, in the order they cost (the spec ranks by it).
ROOT_CAUSE_ORDER = [
    "triton-cuda-core-reduction",
    "slot-reread",  # computed here from the roofline, not a rule
    "triton-inner-loop-dequant",
    "per-call-weight-conversion",
    "eager-epilogue",
    "low-occupancy-launch",
]


# --- findings, cached ---------------------------------------------------------------------------


def scan(tree, device, model, rules=None, server_flags=None, env=None):
    """The findings the spec is built from: ``recon.scan.run_rules``, whose results are cached on
    disk by the tree's content, recon's code, the rules, the device and the model."""
    from .rules import load_rules
    from .scan import run_rules

    return run_rules(tree, device, model, load_rules() if rules is None else rules, server_flags=server_flags, env=env)


# --- small helpers ------------------------------------------------------------------------------


def _short(qualname: Optional[str]) -> str:
    """``pkg.mod.Class.method`` -> ``Class.method`` (or ``mod.func`` for a module-level function)."""
    if not qualname:
        return ""
    parts = qualname.split(".")
    tail = parts[-2:] if len(parts) >= 2 else parts
    return ".".join(tail)


def _at(path: Optional[str], line: Optional[int]) -> str:
    return f"{path}:{line}" if path else ""


def _node(G, qual: Optional[str]) -> dict:
    return dict(G.nodes[qual]) if qual and qual in G else {}


def _ev(f) -> list[dict]:
    return [{"at": _at(e.path, e.line), "path": e.path, "line": e.line, "end_line": e.end_line, "note": e.note, "snippet": e.snippet} for e in f.evidence]


def _fd(f) -> dict:
    return {"rule": f.rule_id, "severity": f.severity, "message": f.message, "evidence": _ev(f), "fingerprint": f.fingerprint,
            "on_moe_path": f.data.get("on_moe_path")}


def _mb(b: float) -> float:
    return round(b / 1e6, 2)


# --- weights as created -------------------------------------------------------------------------

_ALLOC = {"empty", "ones", "zeros", "full"}


def _alloc_call(node) -> Optional[ast.Call]:
    """The ``torch.empty/ones/zeros(...)`` inside ``Parameter(...)`` (or bare)."""
    if not isinstance(node, ast.Call):
        return None
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    if name in _ALLOC:
        return node
    if name == "Parameter" and node.args:
        return _alloc_call(node.args[0])
    return None


def _dtype_of(call: ast.Call) -> Optional[str]:
    for kw in call.keywords:
        if kw.arg == "dtype":
            return ast.unparse(kw.value).replace("torch.", "")
    return None


def weights_as_created(tree, quant_class: Optional[str], model) -> dict:
    """Shapes and dtypes of the expert tensors ``quant_class.create_weights`` registers, evaluated at
    the model's sizes (num_experts=E, hidden_size=H, intermediate_size*=I), each with its file:line."""
    G = tree.graph
    qual = f"{quant_class}.create_weights" if quant_class else None
    d = _node(G, qual)
    if not d:
        return {"found": False, "method": qual, "tensors": []}
    path, line = d.get("path"), d.get("line")
    try:
        mod = bounded.parse(tree.read_text(path))
    except (SyntaxError, OSError, ValueError):
        return {"found": False, "method": qual, "at": _at(path, line), "tensors": []}
    fn = next((n for n in ast.walk(mod) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "create_weights" and n.lineno == line), None)
    if fn is None:
        return {"found": False, "method": qual, "at": _at(path, line), "tensors": []}
    env: dict = {}
    for a in fn.args.args + fn.args.kwonlyargs:
        v = model_size(a.arg, model)
        if v is not None:
            env[a.arg] = v
    allocs: dict[str, tuple[ast.Call, int]] = {}
    registered: list[tuple[str, str, int]] = []
    for st in ast.walk(fn):
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            name = st.targets[0].id
            v = int_arith(st.value, env)
            if v is not None:
                env[name] = v
            call = _alloc_call(st.value)
            if call is not None:
                allocs[name] = (call, st.lineno)
        if isinstance(st, ast.Call) and isinstance(st.func, ast.Attribute) and st.func.attr == "register_parameter" and len(st.args) == 2:
            key, var = st.args
            if isinstance(key, ast.Constant) and isinstance(var, ast.Name):
                registered.append((str(key.value), var.id, st.lineno))
    tensors = []
    for pname, var, reg_line in registered:
        if var not in allocs:
            continue
        call, alloc_line = allocs[var]
        dims = [a for a in call.args if not isinstance(a, ast.Starred)]
        if len(dims) == 1 and isinstance(dims[0], (ast.Tuple, ast.List)):
            dims = list(dims[0].elts)
        vals = [int_arith(x, env) for x in dims]
        dtype = _dtype_of(call)
        size = DTYPE_BYTES.get(dtype or "")
        per_expert = math.prod(vals[1:]) * size if vals and all(v is not None for v in vals) and size else None
        tensors.append({
            "name": pname,
            "shape_expr": [ast.unparse(x) for x in dims],
            "shape": vals,
            "dtype": dtype,
            "bytes_per_expert": per_expert,
            "at": _at(path, alloc_line),
            "registered_at": _at(path, reg_line),
        })
    return {"found": True, "method": qual, "at": _at(path, line), "tensors": tensors}


# --- the MoE path -------------------------------------------------------------------------------


def _moe_backends(findings) -> list:
    """backend-selection findings about MoE quant methods (their class or chain names MoE)."""
    out = []
    for f in findings:
        if f.rule_id != "backend-selection":
            continue
        d = f.data
        cls = (d.get("taken_in") or [""])[0]
        if "moe" in cls.lower() or any("moe" in (h[0] or "").lower() for h in d.get("chain", [])):
            out.append(f)
    return out


def _pick_moe(findings, view=None) -> tuple[Optional[Any], Optional[Any]]:
    """(cuda-graph MoE-path finding, backend-selection finding) for the MoE quant method that runs.
    With a runtime view, a backend choice counts only inside the method it resolved (or its bases)."""
    cg = [f for f in findings if f.rule_id == "cuda-graph-host-sync" and f.data.get("quant_method")]
    cg.sort(key=lambda f: (not f.data.get("selected_for_device"), not f.data.get("kernels"), f.data["quant_method"]))
    backends = _moe_backends(findings)
    if view is not None and view.moe.get("apply"):
        owners = set(view.moe.get("mro") or [view.moe_method])
        backends = [b for b in backends if (b.data.get("taken_in") or [""])[0].rsplit(".", 1)[0] in owners]
    primary_cg = cg[0] if cg else None
    apply_q = primary_cg.data["quant_method"] if primary_cg else None

    def rank(f):
        d = f.data
        taken_in = (d.get("taken_in") or [""])[0]
        return (taken_in != apply_q, not d.get("taken"), not taken_in.endswith(".apply"), not d.get("kernels"), taken_in, str(d.get("value")))

    backends.sort(key=rank)
    primary_b = backends[0] if backends else None
    if primary_b and apply_q and (primary_b.data.get("taken_in") or [""])[0].rsplit(".", 1)[0] != apply_q.rsplit(".", 1)[0]:
        primary_b = None if any((b.data.get("taken_in") or [""])[0] == apply_q for b in backends) else primary_b
    return primary_cg, primary_b


def _chain(G, cg, backend) -> list[dict]:
    """Every hop from the capture site to the kernel, each with the file:line that makes it."""
    hops: list[dict] = []
    if cg:
        for h in cg.data.get("capture_chain", []):
            hops.append({"symbol": h["what"], "at": _at(h["path"], h["line"]), "how": "capture", "inferred": bool(h.get("inferred"))})
        for h in cg.data.get("path_to_apply", []):
            hops.append({"symbol": _short(h["node"]), "qualname": h["node"], "at": _at(h["path"], h["line"]), "how": h.get("how", "calls"), "inferred": bool(h.get("inferred"))})
    seen = {h.get("qualname") for h in hops}
    if backend:
        d = backend.data
        for i, (q, p, ln) in enumerate(d.get("chain", [])):
            if q in seen:
                continue
            how = f"takes `{d.get('attribute')} == {d.get('value')!r}`" if i == 0 else ("launches" if _node(G, q).get("kind") == "triton_kernel" else "calls")
            hops.append({"symbol": _short(q), "qualname": q, "at": _at(p, ln), "how": how, "inferred": False})
            seen.add(q)
    elif cg:
        for l in cg.data.get("launches", []):
            if l["kernel"] not in seen:
                hops.append({"symbol": _short(l["kernel"]), "qualname": l["kernel"], "at": _at(l["path"], l["line"]), "how": "launches", "inferred": False})
                seen.add(l["kernel"])
    for h in hops:
        h.setdefault("qualname", None)
        d = _node(G, h.get("qualname"))
        h["defined_at"] = _at(d.get("path"), d.get("line")) if d else ""
        h["kind"] = d.get("kind", "") if d else ""
    return hops


def _mermaid(hops: list[dict]) -> str:
    lines = ["flowchart TD"]
    for i, h in enumerate(hops):
        label = h["symbol"].replace('"', "'")
        lines.append(f'    n{i}["{label}<br/><small>{h["at"]}</small>"]')
    for i in range(1, len(hops)):
        style = "-.->" if hops[i].get("inferred") else "-->"
        lines.append(f"    n{i - 1} {style} n{i}")
    return "\n".join(lines)


def _kernels_of(cg, backend) -> list[str]:
    ks = set()
    if cg:
        ks.update(cg.data.get("kernels", []))
    if backend:
        ks.update(backend.data.get("kernels", []))
    return sorted(ks)


def _root_causes(findings, kernels: list[str], path_files: set[str], rl: dict, model) -> list[dict]:
    """Findings that explain the MoE kernel's time, ranked by ROOT_CAUSE_ORDER, with evidence."""
    kset = set(kernels)
    names = {k.rsplit(".", 1)[-1] for k in kernels}
    causes = []
    for f in findings:
        if f.rule_id not in ROOT_CAUSE_ORDER:
            continue
        d = f.data
        q = d.get("qualname") or d.get("kernel")
        hit = q in kset or d.get("kernel") in names or d.get("kernel_name") in names
        if not hit and f.rule_id in ("per-call-weight-conversion", "eager-epilogue"):
            hit = bool(f.primary and f.primary.path in path_files)
        if hit:
            causes.append({"rule": f.rule_id, "title": "", "message": f.message, "evidence": _ev(f), "data": _slim(d)})
    slot = [c for c in causes if c["rule"] == "triton-cuda-core-reduction" and (c["data"].get("shape") or {}).get("one_row_per_program")]
    if slot:
        rows = {r["M"]: r for r in rl["rows"]}
        shown = [rows[m] for m in sorted({TYPICAL_BATCH, max(rows)}) if m in rows] or rl["rows"][-1:]
        ev = [e for e in slot[0]["evidence"] if "loop" not in e["note"]][-1:]
        causes.append({
            "rule": "slot-reread",
            "title": "Every (token, expert) slot streams its expert's whole weight",
            "message": "one program row per (token, expert) slot, so an expert is read once per slot, not once per step: " + "; ".join(
                f"at M={r['M']} {r['M'] * model.top_k} expert reads per layer where {r['unique_experts']:.0f} distinct experts are touched "
                f"({r['slot_reread_factor']}x the bytes of a kernel that reads each expert once)" for r in shown),
            "evidence": ev,
            "data": {"rows": [{"M": r["M"], "slot_reads": r["M"] * model.top_k, "unique_experts": r["unique_experts"], "factor": r["slot_reread_factor"]} for r in shown]},
        })
    causes.sort(key=lambda c: (ROOT_CAUSE_ORDER.index(c["rule"]), c["message"]))
    for i, c in enumerate(causes, 1):
        c["rank"] = i
    return causes


def _slim(d: dict) -> dict:
    """The parts of a finding's data the spec shows (drop long lists such as scanned functions)."""
    return {k: v for k, v in d.items() if k not in ("scanned", "functions", "reached_by")}


# --- the context --------------------------------------------------------------------------------


def _target(tree, reason: Optional[str]) -> dict:
    t = tree.target
    return {"label": t.label, "kind": t.kind, "version": t.version, "revision": t.revision, "reason": reason or t.reason}


def _gates(findings) -> list[dict]:
    """Gate definitions evaluated for the device, with the devices each is true on."""
    out = []
    for f in findings:
        if f.rule_id == "arch-gate" and "gate" in f.data:
            d = f.data
            out.append({"gate": d["gate"], "value": d.get("value"), "true_on": sorted(d.get("true_on") or []), "at": _at(f.primary.path, f.primary.line) if f.primary else "", "predicate": d.get("predicate", "")})
    out.sort(key=lambda g: (g["gate"], g["at"]))
    return out


def _gated_sites(findings, files: set[str]) -> list[dict]:
    """Gated branches on the MoE path's files: which way each goes on this device and the others."""
    out = []
    for f in findings:
        if f.rule_id == "arch-gate" and "site" in f.data and f.primary and f.primary.path in files:
            d = f.data
            out.append({"site": _short(d["site"]), "test": d.get("test"), "value": d.get("value"), "reference": dict(sorted((d.get("reference") or {}).items())), "at": _at(f.primary.path, f.primary.line), "patches": d.get("patches", [])})
    out.sort(key=lambda s: s["at"])
    return out


def _tensor_core_paths(findings, device) -> list[dict]:
    out = []
    for f in findings:
        if f.rule_id != "quant-format-mismatch":
            continue
        d = f.data
        req = d.get("requires") or {}
        blockers = [f"needs {str(req.get('format', '?')).upper()} (group {req.get('group_size')}, {str(req.get('scale_dtype', '?')).upper()} scales); the model's experts are {str(d['model']['format']).upper()} (group {d['model']['group_size']}, {str(d['model']['scale_dtype']).upper()} scales)"]
        if not d.get("device_native"):
            blockers.append(f"{device.short} has no native {req.get('format')} tensor-core path")
        if "sm100" in d.get("entry", "") and device.compute_capability[0] != 10:
            blockers.append(f"named for sm_100; {device.short} is {device.sm}")
        out.append({
            "entry": d.get("entry"), "qualname": d.get("qualname"), "format": req.get("format"), "element": req.get("element"),
            "group_size": req.get("group_size"), "scale_dtype": req.get("scale_dtype"), "format_from": d.get("format_from"),
            "device_native": d.get("device_native"), "at": _at(f.primary.path, f.primary.line) if f.primary else "",
            "callers": [{"symbol": _short(c[0]), "at": _at(c[1], c[2])} for c in d.get("callers", [])],
            "blockers": blockers, "adapt": list(d.get("adapt", [])),
        })
    # the closest to the model's format first: same scale dtype and group, then by name
    out.sort(key=lambda p: (p["format"] not in ("nvfp4", "mxfp4", "mxfp8"), p["entry"] or ""))
    return out


def _dense(findings, device) -> list[dict]:
    out = []
    for f in findings:
        if f.rule_id != "missing-device-config":
            continue
        d = f.data
        out.append({
            "message": f.message, "kind": d.get("kind"), "template": d.get("template"), "template_at": d.get("template_at"),
            "lookup": d.get("lookup"), "folder": d.get("folder"), "folder_at": d.get("folder_at"),
            "device_config_name": d.get("device_config_name"), "device_files": d.get("device_files"),
            "existing_devices": dict(sorted((d.get("existing_devices") or {}).items())),
            "missing": list(d.get("missing", [])), "present": list(d.get("present", [])),
            "default": d.get("default"), "default_at": d.get("default_at"),
            "tuning_script": d.get("tuning_script"), "tuning_script_in_tree": d.get("tuning_script_in_tree"),
            "commands": list(d.get("commands", [])),
        })
    out.sort(key=lambda x: (x["template_at"] or "", x["kind"] or ""))
    return out


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
            "decode_pct": (min(decode), max(decode)) if decode else None, "source": "bench/reference_impl/results.json"}


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
        if est:
            parts.append("on " + device.short + " at the same fraction of its floor (an estimate): " + ", ".join(f"{r['est_device_ms']} ms/layer at M={r['M']}" for r in est))
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


def build_context(tree, device, model, findings, errors=(), target_reason: Optional[str] = None, rules=None, view=None) -> dict:
    """The one object the spec is made of (JSON as is; Markdown through the templates)."""
    G = tree.graph
    titles = {r.id: r.title for r in (rules or [])}
    rl = roofline.moe_roofline(model, device)
    gap = roofline.slot_gap(model, device, SLOT_ANCHOR)
    cg, backend = _pick_moe(findings, view)
    hops = _chain(G, cg, backend)
    kernels = _kernels_of(cg, backend)
    apply_q = (cg.data["quant_method"] if cg else None) or ((backend.data.get("taken_in") or [None])[0] if backend else None)
    quant_class = apply_q.rsplit(".", 1)[0] if apply_q else None
    apply_node = _node(G, apply_q)
    path_files = {h["at"].rsplit(":", 1)[0] for h in hops if h.get("qualname")} | {h["defined_at"].rsplit(":", 1)[0] for h in hops if h.get("defined_at")}
    causes = _root_causes(findings, kernels, path_files, rl, model)
    for c in causes:
        c["title"] = c["title"] or titles.get(c["rule"], c["rule"])
    slot = next((c for c in causes if c["rule"] == "triton-cuda-core-reduction" and (c["data"].get("shape") or {}).get("one_row_per_program")), None)
    slot_kernel = None
    if slot:
        d = slot["data"]
        tiles = d.get("tiles") or {}
        slot_kernel = {"name": d.get("kernel"), "qualname": d.get("qualname"), "at": _at(d.get("path"), d.get("line")),
                       "sum_lines": [_at(d.get("path"), l) for l in d.get("sum_lines", [])], "sum_exprs": d.get("sum_exprs", []),
                       "autotune_at": _at(d.get("path"), tiles.get("autotune_line")) if tiles.get("autotune_line") else "",
                       "tiles": tiles.get("ranges", {})}
    arch_names = [n for n in model.architectures if any(G.nodes[q].get("kind") == "class" for q in _by_name(G, n))]
    model_class = sorted(q for n in model.architectures for q in _by_name(G, n) if G.nodes[q].get("kind") == "class")
    backends = []
    for f in _moe_backends(findings):
        d = f.data
        backends.append({"attribute": d.get("attribute"), "value": d.get("value"), "taken": d.get("taken"), "compared_with": d.get("compared_with"),
                         "set_in": _short((d.get("set_in") or [None])[0]), "set_at": _at(*(d.get("set_in") or [None, None, None])[1:3]),
                         "taken_in": _short((d.get("taken_in") or [None])[0]), "taken_at": _at(*(d.get("taken_in") or [None, None, None])[1:3]),
                         "others": {k: v.get("value") for k, v in sorted((d.get("reference") or {}).items())}})
    backends.sort(key=lambda b: (b["taken_in"], b["attribute"] or "", str(b["compared_with"])))
    cg_warn = next((f for f in findings if f.rule_id == "cuda-graph-host-sync" and "reachable_functions" in f.data), None)
    cg_note = next((f for f in findings if f.rule_id == "cuda-graph-host-sync" and f.data.get("unresolved_quant_methods")), None)
    cg_unresolved = cg_note.data["unresolved_quant_methods"] if cg_note else []
    cg_handoffs = sorted({describe_handoff({**h, "when": []}) for q in cg_unresolved
                          for h in (cg_note.data.get("handoffs") or {}).get(q, [])}) if cg_note else []
    rows = {r["M"]: r for r in rl["rows"]}
    r1, rt = rows.get(1, rl["rows"][0]), rows.get(TYPICAL_BATCH, rl["rows"][-1])
    gap_rows = {g["M"]: g for g in gap.get("rows", [])}
    summary = {
        "expert_mb": _mb(rl["expert_bytes"]["total"]),
        "batch1": {"M": r1["M"], "experts": r1["unique_experts"], "layer_mb": _mb(r1["layer_bytes"]), "step_mb": _mb(r1["step_bytes"]), "floor_ms": r1["step_floor_ms"]},
        "typical": {"M": rt["M"], "experts": rt["unique_experts"], "layer_mb": _mb(rt["layer_bytes"]), "step_mb": _mb(rt["step_bytes"]), "floor_ms": rt["step_floor_ms"]},
        "gap": None,
    }
    if slot_kernel and gap.get("available") and 1 in gap_rows:
        g1 = gap_rows[1]
        gt = gap_rows.get(TYPICAL_BATCH)
        summary["gap"] = {"kind": "slot kernel measured on " + gap["measured_on"] + (", scaled by bandwidth (an estimate)" if gap["estimate"] else ""),
                          "batch1": g1, "typical": gt}
    ctx: dict = {
        "sections": list(SECTIONS),
        "target": _target(tree, target_reason),
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
            "quant_method_at": _at(apply_node.get("path"), apply_node.get("line")),
            "backend": ({"attribute": backend.data.get("attribute"), "value": backend.data.get("value"), "taken": backend.data.get("taken"),
                         "set_at": _at(*(backend.data.get("set_in") or [None, None, None])[1:3]), "taken_at": _at(*(backend.data.get("taken_in") or [None, None, None])[1:3])}
                        if backend else None),
            "backends": backends,
            "chain": hops,
            "mermaid": _mermaid(hops) if hops else "",
            "kernels": kernels,
            "slot_kernel": slot_kernel,
            "unresolved_in_capture": [] if apply_q else [_short(q) for q in cg_unresolved],
            "unresolved_handoffs": [] if apply_q else cg_handoffs,
            "weights": weights_as_created(tree, quant_class, model),
            "root_causes": causes,
            "gated_sites": _gated_sites(findings, path_files | {p.rsplit(":", 1)[0] for p in [apply_node.get("path", "")] if p}),
        },
        "gates": _gates(findings),
        "tensor_core_paths": _tensor_core_paths(findings, device),
        "dense_fp8": _dense(findings, device),
        "integration": {
            "swap_in": {"symbol": _short(apply_q), "qualname": apply_q, "at": _at(apply_node.get("path"), apply_node.get("line"))} if apply_q else None,
            "in_capture": cg.data.get("in_capture") if cg else None,
            "capture_safe": cg.data.get("capture_safe") if cg else None,
            "capture_site": cg.data.get("capture_chain", [{}])[0] and _at(cg.data["capture_chain"][0].get("path"), cg.data["capture_chain"][0].get("line")) if cg else (cg_warn.data.get("capture_site") if cg_warn else None),
            "constraints": list(cg.data.get("constraints", [])) if cg else [],
            "hazards_on_path": list(cg.data.get("hazards", [])) if cg else [],
            "forward_hazards": ({"message": cg_warn.message, "count": max(0, len(cg_warn.evidence) - 1), "at": _at(cg_warn.primary.path, cg_warn.primary.line)} if cg_warn else None),
        },
        "errors": [{"rule": r, "error": e} for r, e in sorted(errors)],
        "findings": [dict(_fd(f), title=titles.get(f.rule_id, f.rule_id)) for f in findings],
        "finding_counts": _counts(findings),
    }
    ctx["runtime"] = _runtime(view)
    gop = view.grouped_op() if view is not None else None
    ctx["moe_path"]["grouped_op"] = ({"name": gop["name"], "what": gop["what"], "at": _at(gop["path"], gop["line"]), "kind": gop["kind"]}
                                     if gop else None)
    if view is not None and ctx["moe_path"]["found"] and not kernels:
        # a chain that ends in a library op (FlashInfer, DeepGEMM, ...): its hops as the view walked them
        lib = next((lf for lf in view.primary_leaves() if lf["kind"] in ("library", "native_op")), None)
        if lib:
            seen_at = {h["at"] for h in hops}
            for h in lib["via"]:
                if _at(h["path"], h["line"]) not in seen_at:
                    hops.append({"symbol": h["what"], "qualname": None, "at": _at(h["path"], h["line"]), "how": "calls", "inferred": False, "defined_at": "", "kind": ""})
            hops.append({"symbol": lib["name"], "qualname": None, "at": _at(lib["path"], lib["line"]), "how": f"{lib['kind'].replace('_', ' ')} (outside the tree)", "inferred": False, "defined_at": "", "kind": lib["kind"]})
            ctx["moe_path"]["mermaid"] = _mermaid(hops)
    tests = " ".join(g["test"] or "" for g in ctx["moe_path"]["gated_sites"])
    ctx["moe_path"]["gates"] = [g for g in ctx["gates"] if g["gate"] in tests] or [g for g in ctx["gates"] if g["gate"].startswith("is_sm")]
    ctx["reference_kernel"] = _reference_kernel(model, device, rl)
    ctx["plan"] = _plan(ctx, model, device)
    ctx["not_found"] = _not_found(ctx)
    # plain JSON types throughout (tuples from finding data become lists), so the JSON output and
    # the object the templates render are the same data
    return json.loads(json.dumps(ctx, sort_keys=True))


def _runtime(view) -> Optional[dict]:
    """What decided the MoE path: resolved server arguments, the quant method and its outcomes, the
    library ops the chain ends in, and what was assumed."""
    if view is None:
        return None
    moe = view.moe or {}
    ops = []
    for lf in view.primary_leaves():
        if lf["kind"] != "triton_kernel":
            ops.append({"kind": lf["kind"], "name": lf["name"], "at": _at(lf["path"], lf["line"]), "when": lf["when"]})
    rs = moe.get("registry_site") or {}
    return {
        "flags": view.flags,
        "env": view.env,
        "server_args": [{"field": k, "value": d["value"], "source": d["source"], "test": d.get("test") or ""}
                        for k, d in sorted(view.server_args.items())],
        "forks": [" and ".join(f"`{a['test'][:120]}`" for a in f["assumptions"]) + ": " + ", ".join(f"`{k} = {v}`" for k, v in f["changes"].items())
                  for f in view.forks[:4]],
        "quant_method": moe.get("quant_method"),
        "quant_source": moe.get("source"),
        "config_class": moe.get("config_class"),
        "registry_at": _at(rs.get("path"), rs.get("line")) if rs else "",
        "method": moe.get("method"),
        "outcomes": [_outcome(o, i == 0) for i, o in enumerate(moe.get("outcomes", []))],
        "switches": "; ".join(f"`self.{x['attr']} = {x['value']}` (`{_at(x['path'], x['line'])}`)" for x in moe.get("construction", []) + moe.get("switches", [])),
        "library_ops": ops,
        "note": moe.get("note", ""),
        "alternatives": [" and ".join(f"`{x['test'][:100]}`" for x in a["assumptions"]) + ": " + ", ".join(f"`{k} = {v}`" for k, v in a["changes"].items())
                         + f", and the MoE runs `{(a['method'] or '?').rsplit('.', 1)[-1]}`" + (" → " + ", ".join(f"`{o}`" for o in a["ops"]) if a["ops"] else "")
                         for a in getattr(view, "alternatives", [])],
        "assumed": list(view.notes),
        "diagnostics": list(view.diagnostics),
    }


def _outcome(o: dict, first: bool) -> str:
    what = f"`{o['method'].rsplit('.', 1)[-1]}`" if o["method"] else ("an error" if o["raises"] else "nothing")
    if first:
        what = f"**{what}**"
    when = ", ".join(f"`{('' if a['holds'] else 'not ') + a['test'][:110]}`" for a in o["assumptions"])
    return f"{what} (`{_at(o['path'], o['line'])}`)" + (f" when {when}" if when else "")


def _by_name(G, name: str) -> list[str]:
    idx = G.graph.get("_by_name")
    if idx is None:
        from .query import _name_index

        idx = _name_index(G)
    return sorted(idx.get(name, ()))


def _counts(findings) -> dict:
    c: dict = {}
    for f in findings:
        c[f.rule_id] = c.get(f.rule_id, 0) + 1
    return dict(sorted(c.items()))


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
    if not mp["slot_kernel"]:
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


# --- rendering ----------------------------------------------------------------------------------


def to_json(ctx: dict) -> str:
    return json.dumps(ctx, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render_markdown(ctx: dict, templates_dir: Optional[Path] = None) -> str:
    import jinja2

    d = Path(templates_dir or TEMPLATES_DIR)
    if not (d / "spec.md.j2").is_file():
        raise ReconError(f"spec template not found: {d / 'spec.md.j2'}")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(d)), undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters["mb"] = lambda b: f"{b / 1e6:,.2f} MB" if b is not None else "?"
    env.filters["ms"] = lambda x: "?" if x is None else (f"{x:.4f}" if x < 0.1 else f"{x:.3f}" if x < 10 else f"{x:.1f}")
    env.filters["code"] = lambda s: f"`{s}`" if s else "—"
    text = env.get_template("spec.md.j2").render(**ctx)
    # headings set off by one blank line, one blank line between blocks, one newline at the end
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        line = line.rstrip()
        if line.startswith("```"):
            fenced = not fenced
        heading = not fenced and line.startswith("#")
        if heading and out and out[-1]:
            out.append("")
        if not line and out and not out[-1]:
            continue
        if out and out[-1].startswith("#") and line and not fenced:
            out.append("")
        out.append(line)
    return "\n".join(out).strip("\n") + "\n"


def render(ctx: dict, fmt: str = "md") -> str:
    if fmt == "json":
        return to_json(ctx)
    if fmt == "md":
        return render_markdown(ctx)
    raise ReconError(f"unknown spec format {fmt!r}; known: md, json")


def spec_target(path=None, rev=None, sglang=None) -> tuple[Optional[str], Optional[str]]:
    """(the --sglang version to read, the reason) for ``recon spec``'s target options.

    With no options the spec is the seed scenario's: a folder holding SGLang is read as
    :func:`recon.target.resolve` would (the current folder comes first); otherwise the released
    SGLang 0.5.13.post1, named explicitly — an installed sglang package is read only when given
    with ``--path``, so a spec without options is the same on every machine.
    """
    from .target import DEFAULT_VERSION, _layout

    if path or rev or sglang:
        return sglang, None
    if _layout(Path.cwd()) is not None:
        return None, "no target options; the current folder holds SGLang"
    return DEFAULT_VERSION, f"no target options and no SGLang in the current folder: the seed scenario's released sglang=={DEFAULT_VERSION}"


def spec_for(tree, device, model, rules=None, target_reason: Optional[str] = None, server_flags=None, env=None) -> dict:
    """Scan (cached) and build the context: the whole spec as data."""
    from .rules import load_rules

    rules = load_rules() if rules is None else rules
    res = scan(tree, device, model, rules, server_flags, env)
    view = _view_of(res)
    return build_context(tree, device, model, res.findings, res.errors, target_reason, rules, view)


def _view_of(res):
    """The runtime view the findings were made with (kept with them, or in its own cache entry)."""
    ctx = res.context
    if ctx is None or not getattr(ctx.model, "num_experts", 0):
        return None
    v = ctx.cache.get(("runtime_view", ctx.flags_key))
    if v is None:
        from .runtime.cached import view_for
        v = view_for(ctx)
    return v
