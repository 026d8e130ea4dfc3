"""low-occupancy-launch: Triton grids evaluated at the model's decode shapes against the SM count.

Candidates are the graph's ``launches`` edges (they carry the grid's source). For each one the
launching function's summary (:mod:`recon.tritonast`) gives the statements that bind the grid's
names; :class:`ShapeEval` evaluates them at each decode batch with the model's sizes, and
``meta["BLOCK_*"]`` with every literal autotune config of the kernel. A name it cannot bind is
reported as unresolved, never guessed; a grid that cannot be evaluated is not judged.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any, Optional

from .. import bounded
from ..findings import Evidence, Finding
from ..tritonast import file_summary, parse_expr
from . import CheckContext, check
from .kernels import kernel_summary

TRITON_DEFAULT_WARPS = 4
STEP_BUDGET = 20_000  # names one ShapeEval may look up (SGLang 0.5.5-0.5.23 need at most 47)

# Names bound to model sizes when the code does not compute them itself. A rule may override these
# (params.symbols); ``value`` is an expression over M (the decode batch) and the model profile's
# attributes. ``shape_of``/``dim`` bind a name unpacked from ``tensor.shape`` only when the tensor matches.
DEFAULT_SYMBOLS = [
    {"names": r"^(M|B|b|bs|bsz|batch|batch_size|num_tokens|n_tokens|num_seqs|num_reqs)$", "value": "M"},
    {"names": r"^(topk|top_k|num_topk|n_topk|topk_num|num_experts_per_tok)$", "value": "top_k"},
    {"shape_of": r"^(topk_ids|topk_weights|topk_idx|topk_indices)$", "dim": 1, "value": "top_k"},
    {"names": r"^(hidden_size|hidden_dim|hidden)$", "value": "hidden_size"},
    {"names": r"^(K|H|D|hidden)$", "shape_of": r"^(hidden_states|x|hidden|a|inp|input|input_tensor)$", "dim": 1, "value": "hidden_size"},
    {"names": r"^(intermediate_size|moe_intermediate_size|intermediate_size_per_partition|I)$", "value": "moe_intermediate_size"},
    {"names": r"^(E|num_experts|n_experts|num_local_experts|n_routed_experts)$", "value": "num_experts"},
    {"names": r"^(num_heads|n_heads|num_q_heads|num_local_heads|nheads|num_attention_heads|num_qo_heads)$", "value": "num_attention_heads"},
    {"names": r"^(H|h|nh|n_h)$", "shape_of": r"^(q|query|q_\w+|\w+_q|q\d|q_nope|q_pe|q3)$", "value": "num_attention_heads"},
]
MODEL_ATTRS = ("top_k", "hidden_size", "moe_intermediate_size", "num_experts", "num_attention_heads", "num_heads", "num_layers", "expert_group_size")
_CDIV = {"cdiv", "ceil_div", "div_up", "ceildiv", "ceil_divide", "_ceil_div", "triton_cdiv"}
_POW2 = {"next_power_of_2", "next_power_of_two", "next_pow2"}


class Unresolved(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def model_value(model, attr: str) -> Optional[int]:
    if attr == "num_attention_heads":  # profiles name it either way
        return getattr(model, "num_attention_heads", None) or getattr(model, "num_heads", None)
    v = getattr(model, attr, None)
    return v if isinstance(v, int) else None


class ShapeEval:
    """Integer evaluation of host expressions in one function, at one decode batch ``M``.

    Names resolve to the function's own assignments before ``line`` (re-parsed from the summary),
    then to the symbol table (model sizes), then to module constants. ``used`` records how each
    name was bound (for the finding), ``unresolved`` the names that could not be.
    """

    def __init__(self, fsum: dict, consts: dict, symbols: list[dict], model, M: int, functions: Optional[dict] = None):
        self.fsum = fsum
        self.consts = consts
        self.symbols = symbols
        self.model = model
        self.M = M
        self.functions = functions or {}
        self.used: dict[str, dict] = {}
        self.unresolved: list[str] = []
        self.missing: dict[str, str] = {}  # name -> model attribute the profile lacks
        self.meta: dict[str, Any] = {}
        self.meta_name: Optional[str] = None
        self.steps = STEP_BUDGET

    def _step(self, name: str) -> None:
        """Names looked up by this evaluator: each binding may name several others, so a chain of
        them grows exponentially with the depth limit alone."""
        self.steps -= 1
        if self.steps < 0:
            raise Unresolved(name)

    # -- bindings --
    def binding(self, name: str, line: int) -> Optional[tuple[dict, int]]:
        """The last statement before ``line`` that binds ``name``, and the position in an unpack."""
        best = None
        for st in self.fsum["stmts"]:
            if st["line"] >= line:
                break
            if st.get("k") == "assign" and name in (st.get("targets") or []):
                best = (st, st["targets"].index(name))
        return best

    def symbol(self, name: Optional[str], tensor: Optional[str] = None, dim: Optional[int] = None) -> Optional[tuple[int, str]]:
        for s in self.symbols:
            if "names" not in s and "shape_of" not in s:
                continue
            if "names" in s and not (name and re.search(s["names"], name)):
                continue
            if "shape_of" in s and not (tensor and re.search(s["shape_of"], tensor)):
                continue
            if "dim" in s and s["dim"] != dim and not (dim is not None and dim < 0):
                continue
            v = self.model_expr(s["value"])
            if v is not None:
                return v, s["value"]
            if name:
                self.missing.setdefault(name, s["value"])
        return None

    def model_expr(self, expr: str) -> Optional[int]:
        env = {"M": self.M}
        for a in MODEL_ATTRS:
            v = model_value(self.model, a)
            if v is not None:
                env[a] = v
        node = parse_expr(expr)
        try:
            return _arith(node, lambda n: env[n] if n in env else (_ for _ in ()).throw(Unresolved(n)))
        except (Unresolved, ArithmeticError, TypeError, ValueError):
            return None

    def name(self, name: str, line: int, depth: int = 0) -> int:
        self._step(name)
        if depth > 12:
            raise Unresolved(name)
        if self.meta_name and name == self.meta_name:
            raise Unresolved(name)
        b = self.binding(name, line)
        if b is not None:
            st, pos = b
            src = parse_expr(st["src"])
            tensor, dim = _shape_source(src, pos if st.get("unpack") else None)
            if st.get("unpack") and isinstance(src, (ast.Tuple, ast.List)) and pos < len(src.elts):
                v = self._try(src.elts[pos], st["line"], depth)
            elif st.get("unpack") or tensor:
                v = None
            else:
                v = self._try(src, st["line"], depth)
            if v is None:
                sym = self.symbol(name, tensor, dim)
                if sym is None:
                    raise Unresolved(name)
                v, how = sym
                self.used.setdefault(name, {"value": v, "from": how, "line": st["line"], "source": st["src"]})
            else:
                self.used.setdefault(name, {"value": v, "from": "code", "line": st["line"], "source": st["src"]})
            return v
        sym = self.symbol(name)
        if sym is not None:
            v, how = sym
            self.used.setdefault(name, {"value": v, "from": how, "line": self.fsum["line"], "source": "parameter"})
            return v
        if name in self.consts:
            v = self._try(parse_expr(self.consts[name]), 0, depth, module=True)
            if v is not None:
                self.used.setdefault(name, {"value": v, "from": "module constant", "line": None, "source": self.consts[name]})
                return v
        raise Unresolved(name)

    def _try(self, node, line: int, depth: int, module: bool = False) -> Optional[int]:
        try:
            return self.eval(node, line, depth + 1, module)
        except (Unresolved, ArithmeticError, TypeError, ValueError):
            return None

    def eval(self, node, line: int, depth: int = 0, module: bool = False):
        def lookup(n):
            if module:
                self._step(n)
                if n in self.consts and depth <= 12:  # `A = B`, `B = A` at module level: a cycle
                    return self.eval(parse_expr(self.consts[n]), 0, depth + 1, True)
                raise Unresolved(n)
            return self.name(n, line, depth)

        def meta(key):
            if key in self.meta:
                return self.meta[key]
            raise Unresolved(f"meta[{key!r}]")

        tensor, dim = _shape_source(node, None)
        if tensor is not None:  # x.shape[i] inline
            sym = self.symbol(None, tensor, dim)
            if sym is None:
                raise Unresolved(f"{tensor}.shape[{dim}]")
            return sym[0]
        return _arith(node, lookup, meta, self.meta_name)


def _shape_source(node, pos: Optional[int]) -> tuple[Optional[str], Optional[int]]:
    """(tensor, dim) when ``node`` is ``t.shape`` (unpacked at ``pos``), ``t.shape[i]`` or ``t.size(i)``."""
    if node is None:
        return None, None
    if pos is not None and isinstance(node, ast.Attribute) and node.attr == "shape":
        return ast.unparse(node.value), pos
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
            return ast.unparse(node.value.value), node.slice.value
        if isinstance(node.slice, ast.UnaryOp) and isinstance(node.slice.operand, ast.Constant):
            return ast.unparse(node.value.value), -node.slice.operand.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size" and len(node.args) == 1 and isinstance(node.args[0], ast.Constant):
        return ast.unparse(node.func.value), node.args[0].value
    return None, None


def _arith(node, lookup, meta=None, meta_name=None):
    """Integer arithmetic over names, cdiv/next_power_of_2/min/max, and ``meta["KEY"]``.

    What cannot be computed is :class:`Unresolved`, whatever the reason: an unknown name, a
    division by zero, an infinity, a result too large to be a size (:mod:`recon.bounded`), an
    expression nested too deep."""
    try:
        return _arith_node(node, lookup, meta, meta_name)
    except Unresolved:
        raise
    except (ArithmeticError, TypeError, ValueError, MemoryError, RecursionError) as e:
        raise Unresolved(f"{type(e).__name__}") from None


def _arith_node(node, lookup, meta=None, meta_name=None):
    t = type(node)
    if node is None:
        raise Unresolved("?")
    if t is ast.Constant:
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise Unresolved(repr(node.value))
        return node.value
    if t is ast.Name:
        return lookup(node.id)
    if t in (ast.Tuple, ast.List):
        return tuple(_arith_node(e, lookup, meta, meta_name) for e in node.elts)
    if t is ast.UnaryOp and isinstance(node.op, ast.USub):
        return -_arith_node(node.operand, lookup, meta, meta_name)
    if t is ast.BinOp:
        a, b = _arith_node(node.left, lookup, meta, meta_name), _arith_node(node.right, lookup, meta, meta_name)
        op = type(node.op)
        if op is ast.Add:
            return bounded.add(a, b)
        if op is ast.Sub:
            return a - b
        if op is ast.Mult:
            return bounded.mul(a, b)
        if op is ast.FloorDiv:
            return a // b
        if op is ast.Div:
            return a / b
        if op is ast.Mod:
            return a % b
        if op is ast.Pow:
            return bounded.pow_(a, b)
        raise Unresolved(ast.unparse(node))
    if t is ast.Subscript and meta is not None and isinstance(node.value, ast.Name) and (node.value.id == meta_name or node.value.id.lower() == "meta"):
        key = node.slice.value if isinstance(node.slice, ast.Constant) else None
        return meta(key)
    if t is ast.Call:
        fn = ast.unparse(node.func).rsplit(".", 1)[-1]
        args = [_arith_node(a, lookup, meta, meta_name) for a in node.args]
        if fn in _CDIV and len(args) == 2:
            return -(-int(args[0]) // int(args[1]))
        if fn in _POW2 and len(args) == 1:
            return bounded.lshift(1, max(0, math.ceil(math.log2(max(1, args[0])))))
        if fn in ("max", "min") and args:
            return (max if fn == "max" else min)(args)
        if fn == "int" and len(args) == 1:
            return int(args[0])
        if fn == "ceil" and len(args) == 1:
            return math.ceil(args[0])
        raise Unresolved(f"{fn}()")
    raise Unresolved(ast.unparse(node)[:40])


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
    symbols = rule.params.get("symbols") or DEFAULT_SYMBOLS
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
    key = ("launches", "edges")
    if key not in ctx.cache:
        out = [(u, v, d) for u, v, d in ctx.tree.graph.edges(data=True) if d.get("kind") == "launches"]
        ctx.cache[key] = sorted(out, key=lambda e: (e[2]["path"], e[2]["line"]))
    return ctx.cache[key]


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


@check("low_occupancy_launch")
def low_occupancy_launch(ctx: CheckContext, rule) -> list[Finding]:
    sms = getattr(ctx.device, "sm_count", None)
    if not sms:
        return []
    min_warps = float(rule.params.get("min_warps_per_sm", 4))
    require_loop = bool(rule.params.get("require_loop", True))
    require_batch = bool(rule.params.get("require_batch_dim", True))
    require_model = bool(rule.params.get("require_model_dim", True))
    exclude = re.compile(rule.params.get("exclude_paths", r"(^|/)(tests?|benchmark|benchmarks)/|(^|/)test_[^/]*\.py$"))
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
            f"`{r['kernel_name']}[{_short(r['grid_source'])}]` launches {ptxt} programs at batch {first['M']} "
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


def _short(src: str) -> str:
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
        f"`{r['kernel_name']}[{_short(r['grid_source'])}]` grid ({r['grid_expr']}) cannot be evaluated for {getattr(ctx.model, 'name', 'the model')}: "
        f"{lack}, which the model profile does not give; at batch 1 {bound}. Not judged for occupancy."
    )
    ev = [Evidence(r["path"], r["line"], r["end_line"], "the launch", ctx.snippet(r["path"], r["line"]))]
    ev += [Evidence(r["path"], gl, None, "the grid", ctx.snippet(r["path"], gl)) for gl in r["grid_lines"]]
    data = {k: r[k] for k in ("kernel_name", "kernel", "caller", "grid_source", "grid_expr", "configs", "symbols", "unresolved", "missing")}
    data["judged"] = False
    return Finding(rule.id, msg, "note", ev, data)
