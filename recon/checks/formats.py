"""quant-format-mismatch: grouped low-precision GEMM entry points against the model's expert format.

An in-tree grouped GEMM (``cutlass_fp4_group_mm``, a DeepGEMM grouped FP8 GEMM, an MXFP8 grouped
GEMM, ...) is the natural replacement for a per-expert fallback, but only if it takes the format the
checkpoint's experts are stored in. Entry points are found by name (``*group*mm*``, ``*grouped*``);
the format each requires is read from hints in its name, its file's path and its own source (for
example ``nvfp4`` in the module path, ``float8_e4m3fn`` scales), and compared with
``ctx.model.expert_quant`` / ``expert_group_size`` / ``expert_scale_dtype``. Each mismatch names
what would adapt one to the other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..findings import Evidence, Finding
from . import check

# What each format means: element type, elements per scale, scale dtype (OCP MX spec; NVIDIA NVFP4).
FORMATS = {
    "mxfp4": {"element": "e2m1", "group_size": 32, "scale_dtype": "e8m0"},
    "nvfp4": {"element": "e2m1", "group_size": 16, "scale_dtype": "e4m3"},
    "mxfp8": {"element": "e4m3", "group_size": 32, "scale_dtype": "e8m0"},
    "fp8": {"element": "e4m3", "group_size": 128, "scale_dtype": "fp32"},
}
_DEFAULT_HINTS = [  # (format, regex) tried in order on the name, then the path, then the body
    ["mxfp4", r"mxfp4|mx_fp4"],
    ["nvfp4", r"nvfp4|nv_fp4|modelopt_fp4"],
    ["mxfp8", r"mxfp8|mx_fp8"],
    ["fp8", r"(^|[^a-z])(fp8|f8f8|w8a8|float8)"],
]
_BODY_HINTS = [["nvfp4", r"float8_e4m3fn.*(blockscale|block_scale)|(blockscale|block_scale).*float8_e4m3fn|\b16\b.*fp4|nvfp4"],
               ["mxfp4", r"e8m0|ue8m0"]]
_ADAPT = {
    ("nvfp4", "mxfp4"): [
        "re-quantize the experts to NVFP4 at load time: dequantize MXFP4 (E8M0 scale per 32) and requantize with "
        "group 16, E4M3 scales and a per-tensor global scale (alphas); numerics change slightly",
        "add an MXFP4 variant of the grouped kernel: CUTLASS block-scaled MMA on sm_100/sm_120 supports UE8M0 scale "
        "factors, so change ElementSF (float_ue4m3_t -> float_ue8m0_t), the scale vector size (16 -> 32) and the "
        "scale-factor layout/offsets; the e2m1 weight packing is the same",
    ],
    ("mxfp4", "nvfp4"): ["add an NVFP4 variant (E4M3 scales, group 16, global scale) or re-quantize the experts to MXFP4 at load time"],
    ("fp8", "mxfp4"): ["dequantize the MXFP4 experts to FP8 block-scaled [128,128] at load time (2x the expert bytes; decode is memory-bound)"],
    ("mxfp8", "mxfp4"): ["an MXFP4 variant: same E8M0 scales and group 32, only the element type changes (e2m1 instead of e4m3)",
                         "or upcast the experts to MXFP8 at load time (2x the expert bytes)"],
    ("nvfp4", "fp8"): ["re-quantize the FP8 experts to NVFP4 at load time, or use an FP8 grouped GEMM"],
    ("fp8", "nvfp4"): ["dequantize the NVFP4 experts to FP8 block-scaled at load time, or use an NVFP4 grouped GEMM"],
}


def _format_of(name: str, path: str, body: str, hints, body_hints):
    for text, where in ((name, "name"), (path, "path")):
        for fmt, rx in hints:
            if re.search(rx, text, re.I):
                return fmt, where
    if re.search(r"fp4", name + " " + path, re.I):
        for fmt, rx in body_hints:
            if re.search(rx, body, re.I | re.S):
                return fmt, "source"
    return None, None


@dataclass
class FormatMismatchData:
    """A grouped low-precision GEMM entry point and the format it needs against the model's."""

    entry: str
    qualname: str
    requires: dict  # {format, element, group_size, scale_dtype}
    model: dict  # {format, group_size, scale_dtype}
    adapt: list
    format_from: str  # name | path | body
    device_native: bool
    callers: list  # [[qualname, path, line]]

@dataclass(frozen=True)
class QuantFormatParams:
    entry_pattern: str = r"group(ed)?_?(mm|gemm|matmul)|gemm\w*group(?!wise)"  # grouped low-precision GEMM entry points
    exclude_names: str = r"quant|topk|norm|rope|config|metadata|select|probe"
    exclude_paths: str = r"(^|/)(tests?|benchmark|bench)(/|_)"
    format_hints: list[list[str]] = tuple(_DEFAULT_HINTS)  # [format, regex] tried on the name, the path, the body


@check("quant_format_mismatch", params=QuantFormatParams, payload=(FormatMismatchData,))
def quant_format_mismatch(ctx, rule) -> list[Finding]:
    params: QuantFormatParams = rule.params
    model, dev = ctx.model, ctx.device
    mformat = (model.expert_quant or "").lower()
    if mformat not in FORMATS:
        return []  # bf16 experts: no low-precision format to mismatch
    entry_re = re.compile(params.entry_pattern, re.I)
    not_entry = re.compile(params.exclude_names, re.I)
    exclude = re.compile(params.exclude_paths)
    hints = params.format_hints
    G = ctx.tree.graph
    mreq = {"format": mformat, "group_size": model.expert_group_size or FORMATS[mformat]["group_size"],
            "scale_dtype": model.expert_scale_dtype or FORMATS[mformat]["scale_dtype"]}
    findings = []
    for q, d in sorted(G.nodes(data=True)):
        if d.get("kind") not in ("function", "native_op") or not d.get("path"):
            continue
        name = d.get("name", "")
        if name.startswith("_") or not entry_re.search(name) or not_entry.search(name) or exclude.search(d["path"]) or "." in d.get("qualname", ""):
            continue
        lines = ctx.tree.lines(d["path"]) if d["path"].endswith(".py") else []
        body = "\n".join(lines[d["line"] - 1 : d.get("end_line", d["line"])]) if lines else ""
        fmt, where = _format_of(name, d["path"], body, hints, _BODY_HINTS)
        if fmt is None or fmt == mformat:
            continue
        if fmt == "fp8" and mformat == "fp8":
            continue
        req = dict(FORMATS[fmt], format=fmt)
        adapt = list(_ADAPT.get((fmt, mformat), [f"convert the experts from {mformat} to {fmt} at load time, or add a {mformat} variant of {name}"]))
        native = fmt in (dev.block_scaled_formats or []) or (fmt == "fp8" and getattr(dev, "fp8", False))
        callers = []
        for src, _dst, ed in sorted(G.in_edges(q, data=True), key=lambda e: (e[2].get("path", ""), e[2].get("line", 0))):
            p, ln = ed.get("path"), ed.get("line")
            if ed.get("kind") == "calls" and p and ln and not exclude.search(p):
                text = ctx.tree.lines(p)[ln - 1] if ln <= len(ctx.tree.lines(p)) else ""
                if name in text:
                    callers.append((src, p, ln))
        msg = (f"{name} requires {fmt.upper()} (group {req['group_size']}, {req['scale_dtype'].upper()} scales, format read from its {where}) "
               f"but {model.name} experts are {mformat.upper()} (group {mreq['group_size']}, {str(mreq['scale_dtype']).upper()} scales)"
               f"{'' if native else f'; {dev.short} has no native {fmt} tensor cores'}; to use it: {adapt[0]}")
        ev = [Evidence(d["path"], d["line"], d.get("end_line"), f"grouped GEMM entry {name} ({fmt})", ctx.snippet(d["path"], d["line"]))]
        for src, p, ln in [c for c in callers if (c[1], c[2]) != (d["path"], d["line"])][:3]:
            ev.append(Evidence(p, ln, None, f"called from {src.rsplit('.', 1)[-1]}", ctx.snippet(p, ln)))
        findings.append(Finding(rule.id, msg, rule.severity, ev, {
            "entry": name, "qualname": q, "requires": req, "model": mreq, "adapt": adapt, "format_from": where,
            "device_native": native, "callers": [list(c) for c in callers]}))
    return findings
