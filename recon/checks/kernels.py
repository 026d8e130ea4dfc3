"""Checks on Triton kernel bodies: CUDA-core reductions and per-element dequant inside the K loop.

Candidates come from the graph (nodes of kind ``triton_kernel``); only their files are summarized
(:mod:`recon.tritonast`, cached by content), never the whole tree.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from collections import defaultdict
from typing import Optional

from ..findings import Evidence, Finding
from ..engine.kernelfacts import kernels_by_file
from ..tritonast import file_summary
from . import CheckContext, check


def tile_report(k: dict) -> dict:
    """Tile sizes of a kernel's literal autotune configs: every value and the range of each key."""
    cfgs = k.get("configs") or []
    tiles: dict[str, list] = defaultdict(list)
    for c in cfgs:
        for key, v in c["meta"].items():
            if isinstance(v, (int, float)) and v not in tiles[key]:
                tiles[key].append(v)
        for key in ("num_warps", "num_stages"):
            if key in c and c[key] not in tiles[key]:
                tiles[key].append(c[key])
    return {
        "configs": [dict(c["meta"], **{x: c[x] for x in ("num_warps", "num_stages") if x in c}) for c in cfgs],
        "ranges": {key: [min(v), max(v)] for key, v in sorted(tiles.items())},
        "autotune_line": k.get("autotune_line"),
        "configs_source": k.get("configs_src") or None,  # configs built by code we do not evaluate
    }


def row_shape(k: dict, acc: Optional[str]) -> dict:
    """Does each program compute one row (1-D accumulator, a program id that is not tiled)?"""
    acc_info = k["accumulators"].get(acc) if acc else None
    single = [p for p in k["program_ids"] if not p["tiled"]]
    return {
        "accumulator": acc,
        "accumulator_shape": acc_info["shape"] if acc_info else None,
        "accumulator_line": acc_info["line"] if acc_info else None,
        "single_row_program_ids": [{"name": p["name"], "axis": p["axis"], "line": p["line"]} for p in single],
        "tiled_program_ids": [{"name": p["name"], "axis": p["axis"], "line": p["line"]} for p in k["program_ids"] if p["tiled"]],
        "one_row_per_program": bool(acc_info and len(acc_info["shape"]) == 1 and single),
    }


def _ranges_text(tiles: dict) -> str:
    parts = [f"{k} {a}" if a == b else f"{k} {a}-{b}" for k, (a, b) in tiles["ranges"].items() if k.startswith("BLOCK") or k in ("num_warps",)]
    return ", ".join(parts)


@dataclass
class CudaCoreReductionData:
    """A Triton kernel that reduces a product with tl.sum in a loop and never calls tl.dot."""

    kernel: str
    qualname: str
    path: str
    line: int
    sum_lines: list
    sum_exprs: list
    loop_lines: list
    tiles: dict  # {configs, ranges, autotune_line, configs_source}
    shape: dict  # {accumulator, ..., one_row_per_program}
    step: Optional[dict] = None  # whether the kernel is on the mapped decode step (recon kernels)


@dataclass
class InnerLoopDequantData:
    """A Triton kernel that decodes packed elements inside its loop."""

    kernel: str
    qualname: str
    path: str
    line: int
    unpack_lines: list
    helpers: list
    uses_dot: bool
    tiles: dict

@dataclass(frozen=True)
class CudaCoreReductionParams:
    min_sums: int = 1  # tl.sum reductions over a product inside a loop before a kernel is reported


@dataclass(frozen=True)
class InnerLoopDequantParams:
    decode_functions: list[str] = ("exp2", "where")  # per-element calls that decode packed values
    require_one_of: list[str] = ("exp2", "ldexp")  # "where" alone selects; a decode also rebuilds the exponent


def _factors(e: ast.AST) -> list:
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        return _factors(e.left) + _factors(e.right)
    return [e]


def _broadcast(e: ast.AST) -> bool:
    """A factor indexed with ``None`` (``x[None, :]``, ``w[:, None]``), also through casts on it
    (``x[None, :].to(tl.float32)``): a vector spread over the other axis of the tile."""
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute):
        e = e.func.value
    if isinstance(e, ast.Subscript):
        sl = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
        return any(isinstance(x, ast.Constant) and x.value is None for x in sl)
    return False


def is_contraction(expr: str) -> bool:
    """Whether ``tl.sum(a * b, ...)`` is a matrix-vector product written by hand: one factor is a
    vector spread over the tile (``x[None, :] * w``), so the sum contracts a shared axis, which
    ``tl.dot`` would run on tensor cores. A sum of squares (``x * x``, a norm), a product with a
    mask (``v * (idx == k)``, a one-hot pick) or two whole tiles multiplied element by element
    (a weighted pooling) is a reduction no tensor core does: not one."""
    try:
        call = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return True  # not read: kept as the summary reported it
    if not isinstance(call, ast.Call) or not call.args:
        return True
    fs = _factors(call.args[0])
    if len(fs) < 2 or len({ast.dump(f) for f in fs}) < 2:
        return False
    if any(isinstance(f, ast.Compare) for f in fs):
        return False
    return any(_broadcast(f) for f in fs)


@check("triton_cuda_core_reduction", params=CudaCoreReductionParams, payload=(CudaCoreReductionData,))
def triton_cuda_core_reduction(ctx: CheckContext, rule) -> list[Finding]:
    """``tl.sum`` over an elementwise product inside a loop, in a kernel with no ``tl.dot``."""
    min_sums = rule.params.min_sums
    findings = []
    for path, nodes in kernels_by_file(ctx).items():
        summary = file_summary(ctx.tree, path, ctx.cache)
        for node, d in nodes:
            k = summary["kernels"].get(d.get("qualname") or d.get("name"))
            if not k or k["dots"]:
                continue
            # only the sums that contract an axis (a GEMV by hand) are work tensor cores would do
            k = {**k, "sums": [x for x in k["sums"] if is_contraction(x["expr"])]}
            if len(k["sums"]) < min_sums:
                continue
            tiles = tile_report(k)
            accs = [s["acc"] for s in k["sums"] if s["acc"]]
            shape = row_shape(k, accs[0] if accs else None)
            loops = sorted({s["loop_line"] for s in k["sums"]})
            ev = [Evidence(path, s["line"], s["end_line"] if s["end_line"] != s["line"] else None, "tl.sum over an elementwise product inside the loop", ctx.snippet(path, s["line"])) for s in k["sums"]]
            ev += [Evidence(path, l, None, "the loop the reduction runs in", ctx.snippet(path, l)) for l in loops]
            ev.append(Evidence(path, k["line"], None, "kernel defined here; no tl.dot / tl.dot_scaled in its body", ctx.snippet(path, k["line"])))
            if tiles["autotune_line"]:
                ev.append(Evidence(path, tiles["autotune_line"], None, "autotune configs (tile sizes)", ctx.snippet(path, tiles["autotune_line"])))
            msg = f"`{k['name']}` reduces an elementwise product with tl.sum inside its loop ({len(k['sums'])} line{'s' if len(k['sums']) > 1 else ''}) and never calls tl.dot: CUDA-core FMAs, not tensor cores"
            if tiles["configs"]:
                msg += f"; autotune tiles {_ranges_text(tiles)} ({len(tiles['configs'])} configs)"
            if shape["one_row_per_program"]:
                pid = shape["single_row_program_ids"][0]
                msg += f"; one row per program: accumulator `{shape['accumulator']}` is 1-D [{', '.join(shape['accumulator_shape'])}] and program_id({pid['axis']}) (`{pid['name']}`) picks a single row"
            from ..kernels.annotate import on_step, suffix
            step = on_step(ctx, node)
            msg += suffix(step)
            findings.append(
                Finding(
                    rule.id,
                    msg,
                    rule.severity,
                    ev,
                    {
                        "kernel": k["name"],
                        "qualname": node,
                        "path": path,
                        "line": k["line"],
                        "sum_lines": [s["line"] for s in k["sums"]],
                        "sum_exprs": [s["expr"] for s in k["sums"]],
                        "loop_lines": loops,
                        "tiles": tiles,
                        "shape": shape,
                        "step": step,
                    },
                )
            )
    return findings


def _helper(ctx: CheckContext, kernel_node: str, path: str, summary: dict, name: str, line: int) -> Optional[tuple[str, dict]]:
    """The @triton.jit helper called as ``name`` at ``line``: same file first, else the graph's call edge."""
    local = summary["kernels"].get(name)
    if local is not None:
        return path, local
    G = ctx.tree.graph
    for _, target, e in G.out_edges(kernel_node, data=True):
        if e.get("kind") == "calls" and e.get("line") == line and G.nodes[target].get("kind") == "triton_kernel":
            t = G.nodes[target]
            s = file_summary(ctx.tree, t["path"], ctx.cache)
            k = s["kernels"].get(t.get("qualname") or t.get("name"))
            if k is not None:
                return t["path"], k
    return None


@check("triton_inner_loop_dequant", params=InnerLoopDequantParams, payload=(InnerLoopDequantData,))
def triton_inner_loop_dequant(ctx: CheckContext, rule) -> list[Finding]:
    """Bit-unpacking decoded per element (exp2/where) inside a kernel's loop, also through a jit helper."""
    decode_fns = set(rule.params.decode_functions)
    # "where" alone selects (masks, clamps); a decode also rebuilds the value's exponent
    required = set(rule.params.require_one_of)
    findings = []
    for path, nodes in kernels_by_file(ctx).items():
        summary = file_summary(ctx.tree, path, ctx.cache)
        for node, d in nodes:
            k = summary["kernels"].get(d.get("qualname") or d.get("name"))
            if not k or not k["loop_flows"]:
                continue
            ev: list[Evidence] = []
            helpers: list[dict] = []
            unpack_lines: list[int] = []
            decoded: set[str] = set()
            for flow in k["loop_flows"]:
                direct = [(ln, fn) for ln, fn in flow["decodes"] if fn in decode_fns]
                sites = []
                for ln, callee, hot in flow["helper_calls"]:
                    h = _helper(ctx, node, path, summary, callee.rsplit(".", 1)[-1], ln)
                    if h is None:
                        continue
                    hpath, hk = h
                    fed = [x for i in hot for x in hk["decodes_if_fed"].get(i, [])]
                    dec = sorted({(l, fn) for l, fn in hk["decodes_raw"] + fed if fn in decode_fns})
                    if dec:
                        sites.append((ln, hpath, hk, dec))
                if not direct and not sites:
                    continue
                decoded.update(fn for _, fn in direct)
                decoded.update(fn for *_, dec in sites for _, fn in dec)
                # the bit-unpacking itself, in this loop
                bits = [l for l in k["bit_lines"] if flow["line"] <= l <= flow["end_line"]]
                unpack_lines += bits
                for l in bits:
                    ev.append(Evidence(path, l, None, "bits unpacked per element inside the loop", ctx.snippet(path, l)))
                for ln, fn in direct:
                    ev.append(Evidence(path, ln, None, f"{fn} decode per element inside the loop", ctx.snippet(path, ln)))
                seen = set()
                for ln, hpath, hk, dec in sites:
                    if ln not in bits:
                        ev.append(Evidence(path, ln, None, f"calls the decode helper `{hk['name']}` inside the loop", ctx.snippet(path, ln)))
                    if (hpath, hk["name"]) in seen:
                        continue
                    seen.add((hpath, hk["name"]))
                    helpers.append({"name": hk["name"], "path": hpath, "line": hk["line"], "decode_lines": [l for l, _ in dec], "decode_functions": sorted({f for _, f in dec})})
                    for l, fn in dec:
                        ev.append(Evidence(hpath, l, None, f"{fn} decode in helper `{hk['name']}`", ctx.snippet(hpath, l)))
                ev.append(Evidence(path, flow["line"], None, "the loop that dequantizes on every iteration", ctx.snippet(path, flow["line"])))
            fns = sorted({fn for fn in decoded})
            if not ev or not (set(fns) & required):
                continue
            via = f" through `{helpers[0]['name']}`" if helpers else ""
            tiles = tile_report(k)
            msg = f"`{k['name']}` unpacks packed bits and decodes every element with {'/'.join(fns)} inside its loop{via}: every packed element is decoded again on every pass"
            if not k["dots"]:
                msg += ", and feeds CUDA-core math (no tl.dot)"
            findings.append(
                Finding(
                    rule.id,
                    msg,
                    rule.severity,
                    ev,
                    {
                        "kernel": k["name"],
                        "qualname": node,
                        "path": path,
                        "line": k["line"],
                        "unpack_lines": sorted(set(unpack_lines)),
                        "helpers": helpers,
                        "uses_dot": bool(k["dots"]),
                        "tiles": tiles,
                    },
                )
            )
    return findings
