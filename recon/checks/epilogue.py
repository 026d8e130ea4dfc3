"""Eager torch work around kernels: elementwise epilogues and per-call weight dtype conversions.

eager-epilogue: in a function that launches a Triton kernel (graph ``launches`` edges) or calls a
native op, the chain of elementwise torch ops applied to the kernel's output buffers afterwards,
with the bytes each op reads and writes at the model's decode shapes (a small shape interpreter
over the function's statements; sizes bound as in :mod:`recon.engine.shapes`).

per-call-weight-conversion: ``.to(torch.float32)`` / ``.float()`` of weight- or scale-named tensors
inside forward/apply functions, with the bytes converted per call at the model's shapes.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Optional

from ..facts import Call
from ..findings import Evidence, Finding
from ..tritonast import file_summary, params_key, parse_expr, per_file_memo
from . import CheckContext, check, params_dict
from ..engine.asts import tree_memo
from ..engine.dtypes import DTYPE_BYTES, SCALE_BYTES
from ..engine.shapes import DEFAULT_SYMBOLS, ShapeEval, Unresolved
from .. import astwalk

ELEMENTWISE = {
    "silu", "gelu", "relu", "sigmoid", "tanh", "exp", "clamp", "clamp_", "clip", "mul", "mul_", "add", "add_",
    "sub", "div", "sum", "mean", "index_add", "index_add_", "to", "float", "half", "bfloat16", "where",
    "masked_fill", "softmax", "scatter_add", "scatter_add_", "neg", "square", "pow",
}
COMPUTE_OPS = ["silu", "gelu", "relu", "sigmoid", "tanh", "clamp", "clamp_", "clip", "mul", "mul_", "*", "sum", "mean", "softmax", "exp", "index_add", "index_add_", "scatter_add", "scatter_add_"]
FREE = {"view", "reshape", "unsqueeze", "squeeze", "contiguous", "expand", "flatten", "permute", "transpose", "t"}
_ALLOC = {"empty", "zeros", "empty_like", "zeros_like", "new_empty", "new_zeros", "full"}
_BINOPS = {ast.Mult: "*", ast.Add: "+", ast.Sub: "-", ast.Div: "/"}


def _dtype_bytes(node, ev: Optional[ShapeEval], line: int, act_bytes: int) -> Optional[int]:
    """Bytes per element of a dtype expression (``torch.float32``, a local ``dtype = x.dtype``)."""
    if node is None:
        return None
    src = ast.unparse(node)
    last = src.rsplit(".", 1)[-1]
    if last in DTYPE_BYTES and (src.startswith("torch.") or "." not in src):
        return DTYPE_BYTES[last]
    if isinstance(node, ast.Name) and ev is not None:
        b = ev.binding(node.id, line)
        if b is not None and b[0]["src"].endswith(".dtype"):
            return act_bytes  # the activations' dtype: bf16 in the decode path
    if src.endswith(".dtype") or last == "dtype":
        return act_bytes
    return None


class Shapes:
    """Shapes and element sizes of tensors in one function at one decode batch."""

    def __init__(self, ev: ShapeEval, act_bytes: int):
        self.ev = ev
        self.act = act_bytes
        self.vars: dict[str, tuple[list[int], int]] = {}

    def dim(self, node, line):
        try:
            return int(self.ev.eval(node, line))
        except (OverflowError, ValueError):  # inf, nan: not a size
            raise Unresolved("not a size") from None

    def shape_of(self, node, line: int, ops: list) -> Optional[tuple[list[int], int]]:
        """:meth:`shape`, or None when the code's values make no shape (``unsqueeze(1.5)``,
        a negative or astronomically large size, an expression nested too deep)."""
        try:
            return self.shape(node, line, ops)
        except (Unresolved, ArithmeticError, TypeError, ValueError, IndexError, MemoryError, RecursionError):
            ops.clear()
            return None

    def alloc(self, call: ast.Call, line: int) -> Optional[tuple[list[int], int]]:
        args = call.args
        if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
            args = args[0].elts
        try:
            dims = [self.dim(a, line) for a in args]
        except (Unresolved, ZeroDivisionError, TypeError, ValueError):
            return None
        dt = next((kw.value for kw in call.keywords if kw.arg == "dtype"), None)
        return dims, (_dtype_bytes(dt, self.ev, line, self.act) or self.act)

    def shape(self, node, line: int, ops: list) -> Optional[tuple[list[int], int]]:
        """Shape of ``node``; every elementwise op met is appended to ``ops`` as (name, bytes)."""
        t = type(node)
        if t is ast.Name:
            return self.vars.get(node.id)
        if t is ast.Subscript:
            base = self.shape(node.value, line, ops)
            if base is None:
                return None
            idx = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            dims, out = list(base[0]), []
            try:
                for i, s in enumerate(idx):
                    if i >= len(dims):
                        return None
                    if isinstance(s, ast.Slice):
                        lo = self.dim(s.lower, line) if s.lower is not None else 0
                        hi = self.dim(s.upper, line) if s.upper is not None else dims[i]
                        out.append(max(0, min(hi, dims[i]) - lo))
                    elif isinstance(s, ast.Constant) and s.value is None:
                        out.append(1)
                    else:
                        continue  # an integer index drops the dim
            except (Unresolved, ZeroDivisionError, TypeError, ValueError):
                return None
            return out + dims[len(idx):], base[1]
        if t is ast.BinOp and type(node.op) in _BINOPS:
            a, b = self.shape(node.left, line, ops), self.shape(node.right, line, ops)
            if a is None and b is None:
                return None
            shp = _broadcast(a, b)
            ops.append((_BINOPS[type(node.op)], _nbytes(a) + _nbytes(b) + _nbytes(shp)))
            return shp
        if t is ast.UnaryOp:
            return self.shape(node.operand, line, ops)
        if t is ast.Call:
            fn = ast.unparse(node.func)
            last = fn.rsplit(".", 1)[-1]
            if isinstance(node.func, ast.Attribute) and (node.func.value is not None) and not fn.startswith(("torch.", "F.", "nn.")):
                base = self.shape(node.func.value, line, ops)
                if base is None:
                    return None
                dims, nb = base
                if last in FREE:
                    if last in ("view", "reshape") and node.args:
                        try:
                            new = [self.dim(a, line) for a in node.args]
                        except (Unresolved, ZeroDivisionError, TypeError, ValueError):
                            return base
                        return new, nb
                    if last == "unsqueeze" and node.args and isinstance(node.args[0], ast.Constant):
                        d = node.args[0].value
                        d = d if d >= 0 else len(dims) + d + 1
                        return dims[:d] + [1] + dims[d:], nb
                    return base
                if last in ("float", "half", "bfloat16", "to"):
                    if last == "to":
                        target = node.args[0] if node.args else next((kw.value for kw in node.keywords if kw.arg == "dtype"), None)
                        nb2 = _dtype_bytes(target, self.ev, line, self.act)
                    else:
                        nb2 = DTYPE_BYTES[last]
                    if nb2 is None or nb2 == nb:
                        return base  # same dtype (or a device move): no conversion kernel
                    out = (dims, nb2)
                    ops.append((f".{last}()", _nbytes(base) + _nbytes(out)))
                    return out
                if last in ("sum", "mean"):
                    d = next((kw.value for kw in node.keywords if kw.arg == "dim"), node.args[0] if node.args else None)
                    if isinstance(d, ast.Constant) and isinstance(d.value, int):
                        i = d.value if d.value >= 0 else len(dims) + d.value
                        out = (dims[:i] + dims[i + 1:], nb)
                    else:
                        out = ([1], nb)
                    ops.append((f".{last}()", _nbytes(base) + _nbytes(out)))
                    return out
                if last in ELEMENTWISE:
                    ops.append((f".{last}()", 2 * _nbytes(base)))
                    return base
                return None
            if last in ELEMENTWISE and node.args:
                base = self.shape(node.args[0], line, ops)
                if base is None:
                    return None
                out = base
                if last == "sum":
                    d = next((kw.value for kw in node.keywords if kw.arg == "dim"), node.args[1] if len(node.args) > 1 else None)
                    if isinstance(d, ast.Constant) and isinstance(d.value, int):
                        i = d.value if d.value >= 0 else len(base[0]) + d.value
                        out = (base[0][:i] + base[0][i + 1:], base[1])
                others = [self.shape(a, line, []) for a in node.args[1:]]
                ops.append((f"{fn}()", _nbytes(base) + sum(_nbytes(o) for o in others) + _nbytes(out)))
                return out
        return None


def _nbytes(s) -> int:
    if s is None:
        return 0
    n = s[1]
    for d in s[0]:
        n *= d
    return n


def _broadcast(a, b):
    if a is None:
        return b
    if b is None:
        return a
    da, db = a[0][::-1], b[0][::-1]
    dims = [max(da[i] if i < len(da) else 1, db[i] if i < len(db) else 1) for i in range(max(len(da), len(db)))]
    return dims[::-1], max(a[1], b[1])


def _names(node) -> set:
    return {n.id for n in astwalk.walk(node) if isinstance(n, ast.Name)}


def _kernel_sites(ctx: CheckContext) -> dict[str, dict[str, list[int]]]:
    """{path: {function qualname: [lines of Triton launches and native-op calls]}} from the graph;
    device-independent, so kept on the loaded tree (``tree_memo``) for every scenario of it."""
    memo = tree_memo(ctx.tree)
    if "kernel_sites" not in memo:
        G = ctx.tree.graph
        out: dict[str, dict[str, list[int]]] = {}
        for u, v, d in G.edges(data=True):
            kind = d.get("kind")
            if kind == "launches" or (kind == "calls" and G.nodes[v].get("kind") == "native_op"):
                ud = G.nodes[u]
                if ud.get("kind") not in ("function", "triton_kernel") or not d.get("path"):
                    continue
                q = ud.get("qualname") or ud.get("name")
                out.setdefault(d["path"], {}).setdefault(q, []).append(d["line"])
        memo["kernel_sites"] = out
    return memo["kernel_sites"]


def exclusive(ifs: list, a: int, b: int) -> bool:
    """Whether lines ``a`` and ``b`` sit in the two branches of one ``if`` (its body and its
    ``else``/``elif``): one never runs after the other in the same call."""
    def side(i, x):
        return "body" if i["line"] < x <= i["body_end"] else ("else" if i["body_end"] < x <= i["end_line"] else None)
    return any({side(i, a), side(i, b)} == {"body", "else"} for i in ifs)


def _chain(rule, fsum: dict, site_lines: list[int]):
    """(outputs, allocations, chain statements, ops per line) of a function, from its code alone."""
    stmts = fsum["stmts"]
    sites = sorted(set(site_lines))
    first = sites[0]
    # kernel outputs: buffers allocated here and passed to a launch, or results of a native call
    outputs: set[str] = set()
    allocs: dict[str, dict] = {}
    for st in stmts:
        node = parse_expr(st["src"]) if st.get("src") else None
        if st.get("k") == "assign" and isinstance(node, ast.Call) and ast.unparse(node.func).rsplit(".", 1)[-1] in _ALLOC and st["targets"][0]:
            allocs[st["targets"][0]] = st
        if st["line"] in sites or any(st["line"] <= s <= st["end_line"] for s in sites):
            if st.get("launch"):
                outputs |= {a for a in st["launch"]["args"] if a in allocs}
            elif isinstance(node, ast.Call):
                outputs |= {ast.unparse(a) for a in node.args if isinstance(a, ast.Name) and a.id in allocs}
                if st.get("k") == "assign":
                    outputs |= {t for t in st["targets"] if t}
    if not outputs:
        return None
    chain = []
    ast_ops: dict[int, list[str]] = {}
    tainted = set(outputs)
    ifs = [st for st in stmts if st.get("k") == "if" and st.get("body_end")]
    for st in stmts:
        if st["line"] <= first or st.get("launch") or st.get("k") not in ("assign", "aug", "expr", "return"):
            continue
        if all(exclusive(ifs, st["line"], s) for s in sites):
            continue  # in the other branch of an `if` holding every launch: it runs instead of them, not after
        node = parse_expr(st["src"])
        if node is None or not (_names(node) & tainted):
            continue
        ops = _ops_on(node, tainted)
        if st.get("k") == "aug" and st["targets"][0] in tainted:
            ops.append(st.get("op", "aug"))
        if ops:
            chain.append(st)
            ast_ops[st["line"]] = ops
        if st.get("k") in ("assign", "aug"):
            tainted |= {t for t in st["targets"] if t}
    n_ops = sum(len(v) for v in ast_ops.values())
    compute = set(rule.params.compute_ops)
    if n_ops < rule.params.min_ops or not any(o.strip(".()").rsplit(".", 1)[-1] in compute for v in ast_ops.values() for o in v):
        return None  # index bookkeeping (+1, .add_) is not an epilogue
    return outputs, allocs, chain, ast_ops


def _epilogue(ctx: CheckContext, rule, path: str, summary: dict, fsum: dict, site_lines: list[int]) -> Optional[Finding]:
    found = _chain(rule, fsum, site_lines)
    if found is None:
        return None
    outputs, allocs, chain, ast_ops = found
    stmts = fsum["stmts"]
    sites = sorted(set(site_lines))
    act = rule.params.activation_bytes
    symbols = rule.params.symbols or DEFAULT_SYMBOLS
    n_ops = sum(len(v) for v in ast_ops.values())
    # bytes at each decode batch, op by op
    per_batch, per_line = [], {}
    for M in ctx.model.decode_batches:
        ev = ShapeEval(fsum, summary["consts"], symbols, ctx.model, M)
        sh = Shapes(ev, act)
        total = 0
        for st in stmts:
            node = parse_expr(st["src"]) if st.get("src") else None
            if node is None:
                continue
            if st.get("k") == "assign" and st["targets"][0] in allocs and allocs[st["targets"][0]] is st:
                r = sh.alloc(node, st["line"])
                if r:
                    sh.vars[st["targets"][0]] = r
                continue
            ops: list = []
            shp = sh.shape_of(node, st["line"], ops) if st.get("k") != "if" else None
            if st in chain:
                b = sum(x[1] for x in ops)
                if st.get("k") == "aug" and shp is not None:
                    b += 2 * _nbytes(shp)
                    ops.append((st.get("op", "aug"), 2 * _nbytes(shp)))
                total += b
                per_line.setdefault(st["line"], {"ops": [o for o, _ in ops], "bytes": {}})["bytes"][M] = b
            if st.get("k") == "assign" and not st.get("unpack") and st["targets"][0] and shp is not None:
                sh.vars[st["targets"][0]] = shp
        per_batch.append({"M": M, "bytes": total})
    for l, v in per_line.items():
        if not v["ops"]:
            v["ops"] = ast_ops.get(l, [])
    bw = getattr(ctx.device, "bandwidth_tbs", None)
    for row in per_batch:
        row["us_at_bandwidth"] = round(row["bytes"] / (bw * 1e12) * 1e6, 2) if bw and row["bytes"] else None
    b1, bl = per_batch[0], per_batch[-1]
    ops_txt = ", ".join(dict.fromkeys(o for v in per_line.values() for o in v["ops"])) or "elementwise ops"
    msg = (
        f"`{fsum['name']}` runs {n_ops} eager torch ops ({ops_txt}) on the output of its kernel launch{'es' if len(sites) > 1 else ''} "
        f"({', '.join(sorted(outputs))}) over {len(chain)} statements"
    )
    if b1["bytes"]:
        msg += f": {_mb(b1['bytes'])} extra traffic per call at batch {b1['M']}, {_mb(bl['bytes'])} at batch {bl['M']}"
        if bw:
            msg += f" ({b1['us_at_bandwidth']} us / {bl['us_at_bandwidth']} us at {bw} TB/s), each op a separate kernel launch"
    ev = [Evidence(path, st["line"], st["end_line"] if st["end_line"] != st["line"] else None, "eager op on the kernel output" + (f": {', '.join(per_line[st['line']]['ops'])}" if st["line"] in per_line and per_line[st["line"]]["ops"] else ""), ctx.snippet(path, st["line"])) for st in chain]
    for s in sites:
        ev.append(Evidence(path, s, None, "the kernel launch / native op whose output it post-processes", ctx.snippet(path, s)))
    data = {
        "function": fsum["name"],
        "path": path,
        "line": fsum["line"],
        "kernel_sites": sites,
        "outputs": sorted(outputs),
        "ops": [{"line": l, "ops": v["ops"], "bytes": v["bytes"]} for l, v in sorted(per_line.items())],
        "per_batch": per_batch,
        "activation_bytes": act,
        "assumptions": [f"activations {act} bytes per element (bf16) where the code uses the input's dtype", "TP=1"],
    }
    return Finding(rule.id, msg, rule.severity, ev, data)


def _ops_on(node, tainted: set) -> list[str]:
    """Elementwise ops in ``node`` that consume a kernel output (or a value computed from one)."""
    out = []
    # sizes computed for an allocation or read back to the host are bookkeeping, not an epilogue
    skip = {id(x) for c in astwalk.walk(node) if isinstance(c, ast.Call) and ast.unparse(c.func).rsplit(".", 1)[-1] in _ALLOC | {"item", "tolist", "cpu"} for x in astwalk.walk(c)}
    for n in astwalk.walk(node):
        if id(n) in skip:
            continue
        if isinstance(n, ast.Call):
            fn = ast.unparse(n.func)
            last = fn.rsplit(".", 1)[-1]
            if last not in ELEMENTWISE or not (_names(n) & tainted):
                continue
            if last == "to" and not any(("dtype" in ast.unparse(a) or ast.unparse(a).startswith("torch.")) for a in list(n.args) + [k.value for k in n.keywords]):
                continue  # .to(device)
            out.append(f".{last}()" if isinstance(n.func, ast.Attribute) and not fn.startswith(("torch.", "F.")) else f"{fn}()")
        elif isinstance(n, ast.BinOp) and type(n.op) in _BINOPS and (_names(n) & tainted) and not _scalar_only(n):
            out.append(_BINOPS[type(n.op)])
    return out


def _scalar_only(n: ast.BinOp) -> bool:
    """``num_correct_drafts + 1`` on an int tensor is still elementwise; ``x.shape[0] + 1`` is not."""
    return "shape" in ast.unparse(n) or "size(" in ast.unparse(n)


def _mb(b: int) -> str:
    return f"{b / 1e6:.2f} MB" if b < 1e9 else f"{b / 1e9:.2f} GB"


@dataclass
class EpilogueData:
    """Eager elementwise ops on a kernel's output, with their bytes at each decode batch."""

    function: str
    path: str
    line: int
    kernel_sites: list
    outputs: list
    ops: list  # [{line, ops, bytes}]
    per_batch: list
    activation_bytes: int
    assumptions: list


@dataclass
class WeightConversionData:
    """A weight-sized tensor converted on every call."""

    function: str
    tensor: str
    target: str
    target_bytes: Optional[int]
    shape: Optional[list]
    stored: Optional[str]
    stored_bytes: Optional[int]
    bytes_per_call: Optional[int]
    layers: Optional[int]
    bytes_per_step: Optional[int]
    guard: Optional[str]
    anchor: Optional[dict]

@dataclass(frozen=True)
class EagerEpilogueParams:
    min_ops: int = 3  # elementwise ops on kernel outputs before it is reported
    activation_bytes: int = 2  # bf16 activations where the code uses the input's dtype
    exclude_paths: str = r"(^|/)(tests?|benchmark|benchmarks)/|(^|/)test_[^/]*\.py$"
    compute_ops: list[str] = tuple(COMPUTE_OPS)  # at least one of these makes it an epilogue, not bookkeeping
    symbols: Optional[list[dict]] = None  # names bound to model sizes; None: runtime.shapes.DEFAULT_SYMBOLS


@check("eager_epilogue", params=EagerEpilogueParams, payload=(EpilogueData,))
def eager_epilogue(ctx: CheckContext, rule) -> list[Finding]:
    findings = []
    sites = {p: f for p, f in _kernel_sites(ctx).items() if not re.search(rule.params.exclude_paths, p)}

    def candidates(path):  # content-only, so kept per file digest: a warm scan reads no summaries
        summary = file_summary(ctx.tree, path)
        return [q for q, lines in sorted(sites[path].items()) if q in summary["functions"] and _chain(rule, summary["functions"][q], lines)]

    cands = per_file_memo(ctx.tree, f"eager-{params_key(params_dict(rule.params))}", sites, candidates, ctx.cache)
    for path, qs in sorted(cands.items()):
        if not qs:
            continue
        summary = file_summary(ctx.tree, path, ctx.cache)
        for q in qs:
            f = _epilogue(ctx, rule, path, summary, summary["functions"][q], sites[path][q])
            if f is not None:
                findings.append(f)
    return findings


# ── per-call-weight-conversion ──

DEFAULT_TENSORS = [
    {"pattern": r"^(w13|w1|gate_up)\w*scale\w*$", "shape": "[num_experts, 2 * moe_intermediate_size, hidden_size // expert_group_size]", "stored": "scale"},
    {"pattern": r"^(w2|down)\w*scale\w*$", "shape": "[num_experts, hidden_size, moe_intermediate_size // expert_group_size]", "stored": "scale"},
    {"pattern": r"^(w13|w1|gate_up)\w*(weight|packed)\w*$", "shape": "[num_experts, 2 * moe_intermediate_size, hidden_size // 2]", "stored": "packed"},
    {"pattern": r"^(w2|down)\w*(weight|packed)\w*$", "shape": "[num_experts, hidden_size, moe_intermediate_size // 2]", "stored": "packed"},
]
_CONVERT = re.compile(r"^(?P<recv>[A-Za-z_][\w.]*)\.(?P<m>to|float|half|bfloat16)$")


def _stored_bytes(model, stored: str) -> Optional[int]:
    if stored == "scale":
        return SCALE_BYTES.get(str(getattr(model, "expert_scale_dtype", "") or "").lower())
    if stored == "packed":
        return 1
    return DTYPE_BYTES.get(stored)


@dataclass(frozen=True)
class WeightConversionParams:
    function_pattern: str = r"^(forward\w*|apply\w*|\w*_forward\w*|\w*_apply|__call__|run_moe\w*)$"  # per-call functions
    tensor_pattern: str = r"(weight|scale|^w\d+|^w13|^w2)"  # tensors that are weights
    report_unknown_shapes: bool = False
    anchor: Optional[dict] = None  # a measured cost of the conversion, shown with the finding
    tensors: Optional[list[dict]] = None  # {pattern, shape, stored}; None: DEFAULT_TENSORS


@check("per_call_weight_conversion", params=WeightConversionParams, payload=(WeightConversionData,))
def per_call_weight_conversion(ctx: CheckContext, rule) -> list[Finding]:
    fn_pat = re.compile(rule.params.function_pattern)
    tensor_pat = re.compile(rule.params.tensor_pattern)
    report_unknown = rule.params.report_unknown_shapes
    tensors = rule.params.tensors or DEFAULT_TENSORS
    G = ctx.tree.graph
    by_file: dict[str, set] = {}
    for n, d in G.nodes(data=True):
        if d.get("kind") == "function" and fn_pat.search(d.get("name", "")) and d.get("path"):
            by_file.setdefault(d["path"], set()).add(d.get("qualname") or d["name"])
    findings = []
    layers = getattr(ctx.model, "num_moe_layers", None) or getattr(ctx.model, "num_layers", None)
    bw = getattr(ctx.device, "bandwidth_tbs", None)
    def conversions(path):  # content-only, kept per file digest
        facts = ctx.tree.index.facts(path)
        hits = []
        for c in facts.calls:
            m = _CONVERT.match(c.func)
            if not m or c.scope not in by_file[path]:
                continue
            recv = m.group("recv")
            if recv.endswith(".data"):
                recv = recv[: -len(".data")]
            leaf = recv.rsplit(".", 1)[-1]
            if not tensor_pat.search(leaf):
                continue
            if m.group("m") == "to":
                target = (c.args[0] if c.args else dict(c.kwargs).get("dtype", "")) or ""
                dst = DTYPE_BYTES.get(target.rsplit(".", 1)[-1]) if target.startswith("torch.") else None
                if dst is None:
                    continue  # a device move or a dtype we cannot name
            else:
                target = f".{m.group('m')}()"
                dst = DTYPE_BYTES[m.group("m")]
            hits.append((tuple(c), recv, leaf, target, dst))
        return hits

    memo = per_file_memo(ctx.tree, f"conv-{params_key({k: getattr(rule.params, k) for k in ('function_pattern', 'tensor_pattern')})}", by_file, conversions, ctx.cache)
    for path in sorted(memo):
        hits = memo[path]
        if not hits:
            continue
        summary = file_summary(ctx.tree, path, ctx.cache)
        for c, recv, leaf, target, dst in hits:
            c = Call._make(c)
            fsum = summary["functions"].get(c.scope)
            if fsum is None:
                continue
            guard = next((st for st in fsum["stmts"] if st.get("k") == "if" and st["line"] < c.line <= st["body_end"] and leaf in st["src"] and "dtype" in st["src"]), None)
            spec = next((t for t in tensors if re.search(t["pattern"], leaf)), None)
            elems = src_b = None
            dims = None
            if spec is not None:
                ev = ShapeEval(fsum, {}, [], ctx.model, 1)
                try:
                    dims = [int(x) for x in ev.model_expr(spec["shape"])]
                    elems = 1
                    for x in dims:
                        elems *= x
                except (TypeError, ValueError):
                    dims = None
                src_b = _stored_bytes(ctx.model, spec["stored"])
            if spec is None and not report_unknown:
                continue  # not a tensor recon can size at the model's shapes (norm weights, activations)
            if src_b is not None and src_b == dst:
                continue  # stored in the target dtype already: the conversion is a no-op for this model
            per_call = elems * (src_b + dst) if elems and src_b else None
            msg = f"`{fsum['name']}` converts `{recv}` with `{target if target.startswith('.') else '.to(' + target + ')'}` on every call"
            if guard is not None:
                msg += f" (guarded by `if {guard['src']}`, which holds on every call for this model's {getattr(ctx.model, 'expert_scale_dtype', '?')} scales)" if spec and spec["stored"] == "scale" else f" (guarded by `if {guard['src']}`)"
            if per_call:
                msg += f": {dims} {spec['stored'] if spec['stored'] != 'scale' else getattr(ctx.model, 'expert_scale_dtype', '')} -> {dst}-byte, {_mb(per_call)} read+written per call"
                if layers:
                    msg += f", {_mb(per_call * layers)} per decode step over {layers} MoE layers"
                if bw:
                    msg += f" ({round(per_call * (layers or 1) / (bw * 1e12) * 1e3, 2)} ms at {bw} TB/s)"
            else:
                msg += "; the tensor's size at the model's shapes is not known to recon"
            ev_ = [Evidence(path, c.line, c.end_line if c.end_line != c.line else None, "dtype conversion of a weight-sized tensor inside the forward path", ctx.snippet(path, c.line))]
            if guard is not None:
                ev_.append(Evidence(path, guard["line"], None, "guard: true whenever the stored dtype differs", ctx.snippet(path, guard["line"])))
            ev_.append(Evidence(path, fsum["line"], None, "the forward/apply function it runs in", ctx.snippet(path, fsum["line"])))
            data = {
                "function": fsum["name"], "tensor": recv, "target": target, "target_bytes": dst,
                "shape": dims, "stored": spec["stored"] if spec else None, "stored_bytes": src_b,
                "bytes_per_call": per_call, "layers": layers,
                "bytes_per_step": per_call * layers if per_call and layers else None,
                "guard": guard["src"] if guard else None,
                "anchor": rule.params.anchor,
            }
            findings.append(Finding(rule.id, msg, rule.severity, ev_, data))
    return findings
