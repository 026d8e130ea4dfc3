"""Where the grouped kernel goes: the swap-in point, found from the dispatch graph.

The swap-in point is a call, inside an MXFP4 MoE quant method's ``apply``, to a host function that
launches a Triton kernel reducing on CUDA cores (``tl.sum`` over a product, no ``tl.dot``): the
per-(token, expert) slot GEMV. Which part of ``apply`` runs on the device is decided by a backend
string set under arch gates at load time (:func:`recon.runtime.selections.resolve_selections`), so
only calls on the lines the device really runs count. Nothing here is named by file: a release
that moved or renamed the files is read the same way, and one without the slot path is refused
with the path its device takes instead.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Optional

from ..checks import CheckContext
from ..runtime.selections import resolve_selections
from ..engine.kernelfacts import kernel_summary
from ..errors import NothingToDo, ReconError
from ..names import short

# apply() of a quant method for MXFP4 MoE experts (Mxfp4MarlinMoEMethod, Mxfp4MoEMethod, ...)
METHOD_PATTERN = re.compile(r"(?i)mxfp4\w*moe\w*\.apply$")
BUNDLE_PACKAGE = "grouped_mxfp4_moe"  # the package recon apply writes beside the slot kernel
WRAPPER = "mxfp4_moe_forward_grouped"  # its entry point, called where the slot host function was
PREPACK = "mxfp4_moe_prepack_layer"  # its load-time hook, called in process_weights_after_loading


class NoSwapPoint(NothingToDo):
    """The tree has no slot-GEMV MXFP4 MoE path on this device (or it does not fit the kernel)."""


@dataclass
class SwapPoint:
    method: str  # qualname of the quant method's apply
    path: str  # the file holding it (target-relative): the dispatch file the codemod rewrites
    call_line: int  # the call of the host function inside apply
    host: str  # qualname of the slot host function (mxfp4_moe_forward_triton)
    host_path: str
    kernel: str  # the slot kernel it launches
    kernel_path: str
    kernel_line: int
    selection: Optional[str] = None  # e.g. "layer._dsv4_mxfp4_backend == 'sm120_triton'"
    chain: list = field(default_factory=list)  # (qualname, path, line) from apply to the kernel

    @property
    def host_name(self) -> str:
        return self.host.rsplit(".", 1)[1]

    @property
    def method_scope(self) -> str:
        """``Class.method`` as written in the dispatch file."""
        return ".".join(self.method.split(".")[-2:])

    @property
    def bundle_module(self) -> str:
        """Dotted name of the package recon writes: a sibling of the slot kernel's module."""
        return self.host.rsplit(".", 2)[0] + "." + BUNDLE_PACKAGE

    @property
    def bundle_dir(self) -> str:
        """Target-relative folder of that package."""
        return self.host_path.rsplit("/", 1)[0] + "/" + BUNDLE_PACKAGE


def _cuda_core_kernel(ctx: CheckContext, node: str) -> bool:
    k = kernel_summary(ctx, node)
    return bool(k and k.get("sums") and not k.get("dots"))


def _ranges(ctx: CheckContext, device) -> dict[str, list[tuple]]:
    """{apply method: [(lo, hi, selection text)]}: the lines of each MXFP4 MoE apply the device runs."""
    G = ctx.tree.graph
    out: dict[str, list[tuple]] = {}
    for s in resolve_selections(ctx, None, device):
        if s["range"] and METHOD_PATTERN.search(s["taken_in"]):
            text = f"{s['attribute']} {s['op']} {s['const']!r} ({s['value']!r} on {device.short})"
            out.setdefault(s["taken_in"], []).append((s["range"][0], s["range"][1], text, bool(s["taken"])))
    for n, d in G.nodes(data=True):  # an apply with no backend string runs all of its body
        if d.get("kind") == "function" and METHOD_PATTERN.search(n) and n not in out:
            out[n] = [(d.get("line", 0), d.get("end_line", 10**9), None, True)]
    return out


def _calls_in(G, meth: str, lo: int, hi: int) -> list[tuple[int, str]]:
    return sorted({(d.get("line", 0), v) for _, v, d in G.out_edges(meth, data=True)
                   if d.get("kind") in ("calls", "calls_dynamic") and lo <= d.get("line", 0) <= hi})


def applied_sites(tree) -> list[tuple[str, str, int]]:
    """(caller, path, line) of every call to a bundle recon apply already wrote."""
    G = tree.graph
    sites = []
    for n in G.nodes:
        if n.endswith(f".{BUNDLE_PACKAGE}.{WRAPPER}"):
            for u, _, d in G.in_edges(n, data=True):
                if d.get("kind") in ("calls", "calls_dynamic"):
                    sites.append((u, d.get("path", ""), d.get("line", 0)))
    return sorted(set(sites))


def grouped_params(source: str) -> set[str]:
    """Parameter names of ``grouped_mxfp4_moe`` in the kernel's host module (parsed, not imported)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "grouped_mxfp4_moe":
            a = node.args
            return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    raise ReconError("reference_impl/moe.py has no grouped_mxfp4_moe: recon is installed incompletely")


def _from_view(ctx: CheckContext, view) -> list[SwapPoint]:
    """Swap points on the path the runtime view resolved: a CUDA-core Triton kernel on the primary
    path, launched by a host function that the resolved ``apply`` calls."""
    G = ctx.tree.graph
    apply = view.moe.get("apply")
    out = []
    for lf in view.primary_leaves():
        if lf["kind"] != "triton_kernel" or lf["name"] not in G or not _cuda_core_kernel(ctx, lf["name"]):
            continue
        via = lf["via"]
        if len(via) < 2 or via[0]["node"] != apply or via[-1]["node"] not in G:
            continue
        host = via[-1]["node"]
        md, hd, kd = G.nodes[apply], G.nodes[host], G.nodes[lf["name"]]
        conds = " and ".join(lf["when"]) or None
        out.append(SwapPoint(apply, md["path"], via[0]["line"], host, hd["path"], lf["name"], kd["path"], kd.get("line", 0), conds,
                             [(apply, md["path"], md.get("line", 0)), (host, md["path"], via[0]["line"]), (lf["name"], lf["path"], lf["line"])]))
    return out


def _view_runs(view, device, tree) -> str:
    ver = f"SGLang {tree.target.version}" if tree.target.version else tree.target.label
    ops = [lf for lf in view.primary_leaves()]
    gop = view.grouped_op()
    what = (f"{gop['name']} ({gop['what']}, a grouped tensor-core kernel already)" if gop else
            ", ".join(dict.fromkeys(lf["name"].rsplit(".", 1)[-1] for lf in ops[:4])) or "nothing recon can follow")
    return (f"no slot-GEMV MXFP4 MoE path to swap on {device.short} in {ver}: SGLang's get_quant_method gives "
            f"{short(view.moe_method)} there, whose apply runs {what}")


def find_swap_point(tree, device, model=None, accepted_params: Optional[set] = None, server_flags: Optional[dict] = None,
                    env: Optional[dict] = None) -> SwapPoint:
    """The one swap-in point on ``device``; raises :class:`NoSwapPoint` saying what runs instead.

    The runtime view decides which MoE method runs and which of its branches; only when it cannot
    resolve the method does this fall back to the MXFP4 MoE ``apply`` methods of the graph."""
    from ..runtime import runtime_view

    ctx = CheckContext(tree, device, model, server_flags=dict(server_flags or {}), env=dict(env or {}))
    G = tree.graph
    # the scenario's view, the one `recon runtime` and the spec read (from the cache when it is there)
    view = runtime_view(ctx) if model is not None and getattr(model, "num_experts", 0) else None
    if view is not None and view.moe.get("apply"):
        found = _from_view(ctx, view)
        if not found:
            raise NoSwapPoint(_view_runs(view, device, tree))
        return _one(found, G, accepted_params, device)
    ranges = _ranges(ctx, device)
    found: list[SwapPoint] = []
    for meth, spans in sorted(ranges.items()):
        for lo, hi, text, taken in spans:
            if not taken and text is not None and any(t for *_, t in spans):
                continue  # the else-part of a comparison when another comparison is taken
            for line, host in _calls_in(G, meth, lo, hi):
                for _, k, e in G.out_edges(host, data=True):
                    if e.get("kind") == "launches" and G.nodes[k].get("kind") == "triton_kernel" and _cuda_core_kernel(ctx, k):
                        kd, hd, md = G.nodes[k], G.nodes[host], G.nodes[meth]
                        found.append(SwapPoint(meth, md["path"], line, host, hd["path"], k, kd["path"], kd.get("line", 0), text,
                                               [(meth, md["path"], md.get("line", 0)), (host, md["path"], line), (k, e.get("path", ""), e.get("line", 0))]))
    if not found:
        raise NoSwapPoint(_what_runs_instead(tree, device, ranges))
    return _one(found, G, accepted_params, device)


def _one(found: list, G, accepted_params: Optional[set], device) -> SwapPoint:
    uniq = {(s.method, s.call_line): s for s in found}
    points = sorted(uniq.values(), key=lambda s: (s.method, s.call_line))
    if len(points) > 1:
        raise NoSwapPoint("more than one slot-GEMV call to swap on " + device.short + ": "
                          + "; ".join(f"{short(p.method)} -> {short(p.host)} ({p.path}:{p.call_line})" for p in points)
                          + " — recon apply changes exactly one")
    sp = points[0]
    if accepted_params is not None:
        host_params = [p for p in (G.nodes[sp.host].get("params") or []) if p not in ("self",)]
        extra = [p for p in host_params if p.lstrip("*") not in accepted_params and not p.startswith("*")]
        if extra:
            raise NoSwapPoint(f"{short(sp.host)} ({sp.host_path}) takes {', '.join(extra)}, which the grouped kernel does not: its contract differs, refusing to swap")
    return sp


def _what_runs_instead(tree, device, ranges: dict) -> str:
    """One line: the MXFP4 MoE apply methods of this tree and what each runs on ``device``."""
    G = tree.graph
    ver = f"SGLang {tree.target.version}" if tree.target.version else tree.target.label
    parts = []
    vendor = (getattr(device, "vendor", "") or "").lower()
    for meth, spans in ranges.items():
        md = G.nodes[meth]
        hw = re.search(r"hardware_backend/(\w+)/", md.get("path", ""))
        if hw and hw.group(1).lower() != vendor:
            continue  # another vendor's backend (npu, hpu, ...) never runs on this device
        taken = [s for s in spans if s[3]] or spans
        lo, hi, text, _ = taken[0]
        callees = list(dict.fromkeys(short(v) for _, v in _calls_in(G, meth, lo, hi) if G.nodes[v].get("kind") == "function"))
        runs = callees[0] + (f" (+{len(callees) - 1} more)" if len(callees) > 1 else "") if callees else "nothing in the tree"
        line = f"{short(meth)} → {runs}" + (f" (where {text})" if text else "")
        parts.append((text is None, meth, line))
    parts = [p[2] for p in sorted(parts)]  # methods whose backend string is resolved for the device first
    if not parts:
        return f"no MXFP4 MoE quant method (…Mxfp4…MoE…Method.apply) in {ver}: nothing for recon apply to swap"
    # one line a terminal can show: the two methods that matter most; `recon spec` has the rest
    more = f"; +{len(parts) - 2} more MXFP4 MoE methods" if len(parts) > 2 else ""
    return (f"no slot-GEMV MXFP4 MoE path to swap on {device.short} in {ver}, nothing for recon apply to do; "
            f"it runs {'; '.join(parts[:2])}{more} (`recon spec --device {device.short}` shows the chain)")
