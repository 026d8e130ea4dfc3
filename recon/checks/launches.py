"""low-occupancy-launch: Triton grids evaluated at the model's decode shapes against the SM count.

Candidates are the graph's ``launches`` edges (they carry the grid's source). For each one the
launching function's summary (:mod:`recon.tritonast`) gives the statements that bind the grid's
names; :class:`ShapeEval` evaluates them at each decode batch with the model's sizes, and
``meta["BLOCK_*"]`` with every literal autotune config of the kernel. A name it cannot bind is
reported as unresolved, never guessed; a grid that cannot be evaluated is not judged.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Optional

from .. import bounded
from ..findings import Evidence, Finding
from ..tritonast import file_summary, parse_expr
from . import CheckContext, check
from ..engine.asts import tree_memo
from ..engine.kernelfacts import kernel_summary
from ..engine.shapes import DEFAULT_SYMBOLS, ShapeEval, Unresolved

TRITON_DEFAULT_WARPS = 4


def _grid_expr(fsum: dict, functions: dict, scope: str, grid_src: str, line: int) -> tuple[Optional[ast.AST], Optional[str], list[int]]:
    """(grid expression, meta parameter name, lines that define it) for a launch's ``[grid]``."""
    node = parse_expr(grid_src)
    lines: list[int] = []
    for _ in range(4):
        if isinstance(node, ast.Name):
            name = node.id
            b = None
            for st in fsum["stmts"]:
                if st["line"] >= line:
                    break
                if st.get("k") == "assign" and st.get("targets") == [name] and not st.get("unpack"):
                    b = st
            if b is not None:
                lines.append(b["line"])
                node = parse_expr(b["src"])
                continue
            inner = functions.get(f"{scope}.{name}")
            if inner is not None:  # def grid(META): return (...)
                ret = [s for s in inner["stmts"] if s.get("k") == "return"]
                if ret:
                    lines.append(inner["line"])
                    return parse_expr(ret[-1]["src"]), (inner["params"][0] if inner["params"] else None), lines
            return None, None, lines
        if isinstance(node, ast.Lambda):
            p = node.args.args[0].arg if node.args.args else None
            return node.body, p, lines
        return node, None, lines
    return None, None, lines


def _count(v) -> int:
    """A grid dimension or a warp count as an int; Unresolved for what the code's values make
    of it that is none (``None``, ``inf``, a string, a size past :mod:`recon.bounded`'s bound)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Unresolved(repr(v)[:40])
    try:
        n = int(v)
    except (OverflowError, ValueError):
        raise Unresolved(repr(v)[:40]) from None
    if n.bit_length() > bounded.MAX_INT_BITS:
        raise Unresolved("too large")
    return n


def evaluate_launch(ctx: CheckContext, rule, caller: str, kernel: str, edge: dict) -> Optional[dict]:
    """Programs and warps of one launch at every decode batch, or a record of what stayed unresolved."""
    G = ctx.tree.graph
    cd = G.nodes[caller]
    path = edge["path"]
    s = file_summary(ctx.tree, path, ctx.cache)
    scope = cd.get("qualname") or cd.get("name")
    fsum = s["functions"].get(scope)
    if fsum is None:
        return None
    launch = next((st["launch"] for st in fsum["stmts"] if st.get("launch") and st["launch"]["line"] == edge["line"]), None)
    if launch is None:
        return None
    grid, meta_name, grid_lines = _grid_expr(fsum, s["functions"], scope, launch["grid"], launch["line"])
    k = kernel_summary(ctx, kernel) or {}
    symbols = rule.params.symbols or DEFAULT_SYMBOLS
    # the configs the autotuner chooses among; else the launch's own keyword arguments
    configs = [dict(c["meta"], num_warps=c.get("num_warps", TRITON_DEFAULT_WARPS)) for c in (k.get("configs") or [])]
    assumptions = []
    base = ShapeEval(fsum, s["consts"], symbols, ctx.model, 1)
    kw_meta = {}
    for key, src in launch["kwargs"].items():
        if key.isupper() or key in ("num_warps",):
            try:
                kw_meta[key] = base.eval(parse_expr(src), launch["line"])
            except (Unresolved, ArithmeticError, TypeError, ValueError):
                pass
    if not configs:
        configs = [dict(kw_meta)]
        if "num_warps" not in kw_meta:
            configs[0]["num_warps"] = TRITON_DEFAULT_WARPS
            assumptions.append(f"num_warps={TRITON_DEFAULT_WARPS} (Triton's default; the launch does not set it)")
    else:
        for c in configs:
            c.update({x: v for x, v in kw_meta.items() if x not in c})
    rows, unresolved, used, dims_at1, missing = [], [], {}, None, {}
    if grid is None:
        unresolved.append(launch["grid"])
    else:
        for M in ctx.model.decode_batches:
            progs, warps = [], []
            for c in configs:
                ev = ShapeEval(fsum, s["consts"], symbols, ctx.model, M)
                ev.meta, ev.meta_name = c, meta_name
                try:
                    dims = ev.eval(grid, launch["line"])
                    dims = [_count(d) for d in (dims if isinstance(dims, tuple) else (dims,))]
                    nw = _count(c.get("num_warps", TRITON_DEFAULT_WARPS))
                except (Unresolved, ArithmeticError, TypeError, ValueError) as e:
                    unresolved.append(getattr(e, "name", str(e)))
                    missing.update(ev.missing)
                    used.update({n: u for n, u in ev.used.items() if n not in used})
                    break
                n = 1
                for d in dims:
                    n *= d
                progs.append(n)
                warps.append(n * nw)
                if M == ctx.model.decode_batches[0] and dims_at1 is None:
                    dims_at1 = dims
                for name, u in ev.used.items():
                    used.setdefault(name, u)
            if unresolved:
                break
            rows.append({"M": M, "programs": [min(progs), max(progs)], "warps": [min(warps), max(warps)]})
    if any(u["from"] in ("num_attention_heads", "moe_intermediate_size", "num_experts") for u in used.values()):
        assumptions.append("TP=1 and no expert parallelism: every head / expert / intermediate column on one GPU (with TP=t the per-GPU grid shrinks by t)")
    return {
        "path": path,
        "line": launch["line"],
        "end_line": launch["end_line"],
        "caller": caller,
        "kernel": kernel,
        "kernel_name": G.nodes[kernel].get("name"),
        "grid_source": launch["grid"],
        "grid_expr": ast.unparse(grid) if grid is not None else None,
        "grid_lines": grid_lines,
        "dims_at_first_batch": dims_at1,
        "configs": configs,
        "rows": rows,
        "symbols": used,
        "unresolved": sorted(set(unresolved)),
        "missing": {n: a for n, a in missing.items() if n in unresolved},  # names the model profile cannot bind
        "assumptions": assumptions,
        "kernel_loops": k.get("loops") or [],
        "kernel_path": G.nodes[kernel].get("path"),
        "kernel_line": G.nodes[kernel].get("line"),
    }


def launch_edges(ctx: CheckContext) -> list[tuple[str, str, dict]]:
    """The graph's launch edges in file order. They depend on the tree alone, so they are kept on
    the loaded tree (``tree_memo``) and a second device or model does not scan the graph again."""
    memo = tree_memo(ctx.tree)
    if "launch_edges" not in memo:
        out = [(u, v, d) for u, v, d in ctx.tree.graph.edges(data=True) if d.get("kind") == "launches"]
        memo["launch_edges"] = sorted(out, key=lambda e: (e[2]["path"], e[2]["line"]))
    return memo["launch_edges"]


def evaluated_launches(ctx: CheckContext, rule) -> list[dict]:
    """Every launch evaluated once per run (the spec reads the unresolved ones from here too)."""
    key = ("launches", "evaluated", rule.id)
    if key not in ctx.cache:
        out = []
        for u, v, d in launch_edges(ctx):
            r = evaluate_launch(ctx, rule, u, v, d)
            if r is not None:
                out.append(r)
        ctx.cache[key] = out
    return ctx.cache[key]


@dataclass
class LowOccupancyData:
    """A launch whose grid leaves SMs idle at decode batches."""

    kernel_name: str
    kernel: str
    caller: str
    grid_source: str
    grid_expr: str
    configs: list
    symbols: dict  # name -> {value, from, line, source}
    assumptions: list
    unresolved: list
    sm_count: int
    per_batch: list
    low_up_to_batch: int
    min_warps_per_sm: float
    bindings: str
    step: Optional[dict] = None  # whether the kernel is on the mapped decode step (recon kernels)


@dataclass
class UnjudgedLaunchData:
    """A decode-shaped grid that needs model sizes the profile lacks: not judged."""

    kernel_name: str
    kernel: str
    caller: str
    grid_source: str
    grid_expr: str
    configs: list
    symbols: dict
    unresolved: list
    missing: dict  # name -> the model attribute it needs
    judged: bool

@dataclass(frozen=True)
class LowOccupancyParams:
    min_warps_per_sm: float = 4  # one wave with fewer warps per SM than this cannot hide memory latency
    require_loop: bool = True  # only kernels whose programs loop (serial work per program)
    require_batch_dim: bool = True  # the grid must grow with the decode batch
    require_model_dim: bool = True  # and involve a model size (heads, hidden, experts ...), not requests only
    exclude_paths: str = r"(^|/)(tests?|benchmark|benchmarks)/|(^|/)test_[^/]*\.py$"
    symbols: Optional[list[dict]] = None  # names bound to model sizes; None: runtime.shapes.DEFAULT_SYMBOLS


@check("low_occupancy_launch", params=LowOccupancyParams, payload=(LowOccupancyData, UnjudgedLaunchData))
def low_occupancy_launch(ctx: CheckContext, rule) -> list[Finding]:
    sms = getattr(ctx.device, "sm_count", None)
    if not sms:
        return []
    min_warps = rule.params.min_warps_per_sm
    require_loop = rule.params.require_loop
    require_batch = rule.params.require_batch_dim
    require_model = rule.params.require_model_dim
    exclude = re.compile(rule.params.exclude_paths)
    findings = []
    for r in evaluated_launches(ctx, rule):
        if r["unresolved"] and not exclude.search(r["path"]):
            f = _unjudged(ctx, rule, r, require_loop)
            if f is not None:
                findings.append(f)
            continue
        if not r["rows"] or (require_loop and not r["kernel_loops"]) or exclude.search(r["path"]):
            continue
        sources = {u["from"] for u in r["symbols"].values()}
        if require_batch and "M" not in sources:
            continue  # a grid that does not grow with the batch is sized on purpose
        if require_model and not (sources - {"M", "code", "module constant"}):
            continue  # a grid of requests only (metadata kernels) does little work per program
        low = [x for x in r["rows"] if x["programs"][1] < sms or x["warps"][1] / sms < min_warps]
        if not low or low[0]["M"] != r["rows"][0]["M"]:
            continue  # judged at the smallest decode batch: that is where decode spends its steps
        first = r["rows"][0]
        for x in r["rows"]:
            x["sm_fraction"] = round(min(1.0, x["programs"][1] / sms), 3)
            x["warps_per_sm"] = [round(x["warps"][0] / sms, 2), round(x["warps"][1] / sms, 2)]
            x["low"] = x in low
        upto = low[-1]["M"] if all(x["low"] for x in r["rows"][: len(low)]) else low[0]["M"]
        progs = first["programs"]
        ptxt = f"{progs[0]}" if progs[0] == progs[1] else f"{progs[0]}-{progs[1]}"
        dims = ", ".join(str(d) for d in (r["dims_at_first_batch"] or []))
        binds = ", ".join(f"{n} = {u['value']}" + (f" ({'batch' if u['from'] == 'M' else u['from']})" if u["from"] != "code" else "") for n, u in sorted(r["symbols"].items()))
        reason = f"{first['programs'][1]} < {sms} SMs" if first["programs"][1] < sms else f"{first['warps_per_sm'][1]} warps per SM < {min_warps:g}"
        msg = (
            f"`{r['kernel_name']}[{_grid_text(r['grid_source'])}]` launches {ptxt} programs at batch {first['M']} "
            f"(grid ({r['grid_expr']}) = ({dims})) on {sms} SMs: {reason}; "
            f"{round(100 * first['sm_fraction'])}% of SMs get a program, and the grid stays low up to batch {upto} "
            f"(at batch {first['M']}: {binds})"
        )
        ev = [Evidence(r["path"], r["line"], r["end_line"], "the launch", ctx.snippet(r["path"], r["line"]))]
        for gl in r["grid_lines"]:
            ev.append(Evidence(r["path"], gl, None, "the grid", ctx.snippet(r["path"], gl)))
        for n, u in sorted(r["symbols"].items()):
            if u.get("line") and u["source"] != "parameter" and u["line"] not in r["grid_lines"]:
                ev.append(Evidence(r["path"], u["line"], None, f"binds {n} = {u['value']} at batch {first['M']} ({u['from']})", ctx.snippet(r["path"], u["line"])))
        if r["kernel_loops"] and r["kernel_path"]:
            ev.append(Evidence(r["kernel_path"], r["kernel_loops"][0][0], None, "each program runs this loop serially", ctx.snippet(r["kernel_path"], r["kernel_loops"][0][0])))
        data = {k: r[k] for k in ("kernel_name", "kernel", "caller", "grid_source", "grid_expr", "configs", "symbols", "assumptions", "unresolved")}
        data.update(sm_count=sms, per_batch=r["rows"], low_up_to_batch=upto, min_warps_per_sm=min_warps, bindings=binds)
        from ..kernels.annotate import on_step, suffix
        data["step"] = on_step(ctx, r["kernel"]) if r.get("kernel") else None
        msg += suffix(data["step"])
        findings.append(Finding(rule.id, msg, rule.severity, ev, data))
    return findings


def _grid_text(src: str) -> str:
    return src if len(src) <= 24 else "grid"


def _unjudged(ctx: CheckContext, rule, r: dict, require_loop: bool) -> Optional[Finding]:
    """A decode-shaped grid (batch bound) blocked only by sizes the model profile lacks: say so, as a note."""
    if not r["missing"] or set(r["unresolved"]) - set(r["missing"]) or (require_loop and not r["kernel_loops"]):
        return None
    if "M" not in {u["from"] for u in r["symbols"].values()}:
        return None
    bound = ", ".join(f"{n} = {u['value']}" + (" (batch)" if u["from"] == "M" else f" ({u['from']})" if u["from"] != "code" else "") for n, u in sorted(r["symbols"].items()))
    lack = ", ".join(f"{n} needs the model's {a}" for n, a in sorted(r["missing"].items()))
    msg = (
        f"`{r['kernel_name']}[{_grid_text(r['grid_source'])}]` grid ({r['grid_expr']}) cannot be evaluated for {getattr(ctx.model, 'name', 'the model')}: "
        f"{lack}, which the model profile does not give; at batch 1 {bound}. Not judged for occupancy."
    )
    ev = [Evidence(r["path"], r["line"], r["end_line"], "the launch", ctx.snippet(r["path"], r["line"]))]
    ev += [Evidence(r["path"], gl, None, "the grid", ctx.snippet(r["path"], gl)) for gl in r["grid_lines"]]
    data = {k: r[k] for k in ("kernel_name", "kernel", "caller", "grid_source", "grid_expr", "configs", "symbols", "unresolved", "missing")}
    data["judged"] = False
    return Finding(rule.id, msg, "note", ev, data)
