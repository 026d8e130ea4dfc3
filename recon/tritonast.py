"""What the index does not hold about Triton kernels and their host wrappers, from one file's ``ast``.

The facts keep the lines of calls; the kernel checks need the shape of expressions: which
``tl.sum`` reduces a product inside a loop, which loop unpacks bits and decodes them with
``exp2``/``where``, the literal ``triton.Config`` tiles of an autotune decorator, how a launcher
binds the names its grid uses. :func:`file_summary` re-parses ONE file and reduces it to plain data
(dicts, lists, source strings), cached on disk by the file's content digest, so a warm scan never
parses the file again. Host-side expressions are kept as source strings: a check re-parses the few
it evaluates (``ast.parse(src, mode="eval")`` of one line costs microseconds).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import re
from typing import Any, Optional

from . import bounded
from .bounded import MAX_INT_BITS
from .cache import cache_dir, load_pickle, save_pickle
from .pyfacts import dotted, internal_error  # one rendering of dotted names for facts and kernel summaries
from . import astwalk

SUMMARY_VERSION = 6  # bump when the summary layout changes: old cache entries are then ignored

_KERNEL_DECO = re.compile(r"(^|\.)(jit|autotune|heuristics)$")
_DOT = {"dot", "dot_scaled"}
_BITOPS = (ast.RShift, ast.BitAnd)  # unpacking; << and | pack (seeds, indices)
DECODE_FUNCS = {"exp2", "where", "ldexp", "bitcast"}  # per-element decode of unpacked bits


def _src(node: ast.AST) -> str:
    """Source of an expression; "?" (unknown to every evaluator) for one ``ast.unparse`` cannot
    render: a huge int literal (repr's digit limit) or an expression nested too deep."""
    try:
        return ast.unparse(node)
    except (ValueError, RecursionError):
        return "?"


def _deco_name(d: ast.AST) -> str:
    return dotted(d.func) if isinstance(d, ast.Call) else dotted(d)


def is_kernel_decorators(names: list[str]) -> bool:
    return any(_KERNEL_DECO.search(n) for n in names)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in astwalk.walk(node) if isinstance(n, ast.Name)}


def _small_int(n: ast.AST) -> bool:
    return isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool) and 0 <= n.value <= 0xFF


def _has_bitop(node: ast.AST) -> bool:
    """Unpacking packed bits: a shift or a mask by a small integer constant (``b >> 4``, ``b & 0x0F``).

    Shifts and masks by names (``idx >> page_shift``) are index arithmetic, not unpacking.
    """
    for n in astwalk.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, _BITOPS):
            if isinstance(n.op, ast.BitAnd):
                if _small_int(n.left) or _small_int(n.right):
                    return True
            elif _small_int(n.right):
                return True
    return False


def _has_mult(node: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) for n in astwalk.walk(node))


def _last(name: str) -> str:
    return name.rsplit(".", 1)[-1].rstrip("()")


# ── Autotune configs ──


def _literal(node: ast.AST, consts: dict[str, ast.AST], depth: int = 0) -> Any:
    """A Python literal, following module-level constant names; raises ValueError when not one."""
    if isinstance(node, ast.Name) and node.id in consts and depth < 4:
        return _literal(consts[node.id], consts, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.FloorDiv, ast.Sub)):
        a, b = _literal(node.left, consts, depth + 1), _literal(node.right, consts, depth + 1)
        if isinstance(a, int) and isinstance(b, int):  # bounded: a chain of products of literals doubles the digits
            op = type(node.op)
            return bounded.mul(a, b) if op is ast.Mult else bounded.add(a, b) if op is ast.Add else a - b if op is ast.Sub else a // b if b else 0
    return bounded.check(ast.literal_eval(node))


def _config(call: ast.AST, consts: dict[str, ast.AST]) -> Optional[dict]:
    """``triton.Config({"BLOCK_N": 64}, num_warps=4, num_stages=2)`` as plain data, else None."""
    if not (isinstance(call, ast.Call) and _last(dotted(call.func)) == "Config"):
        return None
    try:
        meta = _literal(call.args[0], consts) if call.args else {}
        if not isinstance(meta, dict):
            return None
        out = {"meta": {str(k): v for k, v in meta.items()}, "line": call.lineno}
        for i, key in enumerate(("num_warps", "num_stages"), start=1):
            if len(call.args) > i:
                out[key] = _literal(call.args[i], consts)
        for kw in call.keywords:
            if kw.arg in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
                out[kw.arg] = _literal(kw.value, consts)
        if not _modest(out):
            return None  # a tile of 2**5000 is no config: texts and arithmetic over it would fail
        return out
    except (ValueError, TypeError, SyntaxError, IndexError, MemoryError, RecursionError, ArithmeticError):
        return None


def _modest(v) -> bool:
    """No int in ``v`` (nested dicts, lists, tuples) larger than :data:`recon.bounded.MAX_INT_BITS`."""
    if isinstance(v, int):
        return v.bit_length() <= MAX_INT_BITS
    if isinstance(v, dict):
        return all(_modest(k) and _modest(x) for k, x in v.items())
    if isinstance(v, (list, tuple, set)):
        return all(_modest(x) for x in v)
    return True


def _autotune(fn: ast.FunctionDef, consts: dict[str, ast.AST]) -> tuple[Optional[list], Optional[int], str]:
    """(configs or None, decorator line, configs source when not literal)."""
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and _last(_deco_name(d)) == "autotune":
            node = next((kw.value for kw in d.keywords if kw.arg == "configs"), d.args[0] if d.args else None)
            if isinstance(node, ast.Name) and node.id in consts:
                node = consts[node.id]
            if isinstance(node, (ast.List, ast.Tuple)):
                cfgs = [_config(e, consts) for e in node.elts]
                if cfgs and all(cfgs):
                    return cfgs, d.lineno, ""
            return None, d.lineno, _src(node) if node is not None else ""
    return None, None, ""


# ── Kernel bodies ──


def _loops(fn: ast.FunctionDef) -> list[ast.AST]:
    return [n for n in astwalk.walk(fn) if isinstance(n, (ast.For, ast.While))]


def _in_any(line: int, spans: list[tuple[int, int]]) -> Optional[int]:
    for a, b in spans:
        if a <= line <= b:
            return a
    return None


_STOP = {"sum", "max", "min", "dot", "dot_scaled", "load", "store", "atomic_add", "cumsum", "reduce"}
MAX_HOPS = 2  # a decode this many assignments away from the unpacking still belongs to it


def _stops(node: ast.AST) -> bool:
    """Reductions, loads and matmuls end a value's link to the bits it was unpacked from."""
    return any(isinstance(n, ast.Call) and _last(dotted(n.func)) in _STOP for n in astwalk.walk(node))


def _expr_info(node: ast.AST) -> tuple[set, bool, bool]:
    """(names, unpacks bits, ends the link to bits) of an expression, in one walk."""
    names, bitop, stop = set(), False, False
    for n in astwalk.walk(node):
        t = type(n)
        if t is ast.Name:
            names.add(n.id)
        elif t is ast.BinOp and isinstance(n.op, _BITOPS) and not bitop:
            bitop = _small_int(n.right) or (isinstance(n.op, ast.BitAnd) and _small_int(n.left))
        elif t is ast.Call and not stop:
            stop = _last(dotted(n.func)) in _STOP
    return names, bitop, stop


def _flow_records(fn: ast.AST, nodes: Optional[list] = None) -> tuple[list, list]:
    """Assignments and calls of a function body, reduced once to what the taint flow needs."""
    assigns, calls = [], []
    for n in nodes if nodes is not None else astwalk.walk(fn):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            tnames = {x.id for t in targets for x in astwalk.walk(t) if isinstance(x, ast.Name)}
            assigns.append((n.lineno, tnames, *_expr_info(n.value)))
        elif isinstance(n, ast.Call):
            args = [_expr_info(a) for a in n.args]
            helper = isinstance(n.func, ast.Name) or (isinstance(n.func, ast.Attribute) and not dotted(n.func).startswith(("tl.", "triton.")))
            calls.append((n.lineno, dotted(n.func), _last(dotted(n.func)), args, helper))
    assigns.sort(key=lambda r: r[0])
    calls.sort(key=lambda r: r[0])
    return assigns, calls


def _taint_flow(records: tuple[list, list], fed: set[str], span: Optional[tuple[int, int]] = None) -> tuple[dict, list, list]:
    """Values unpacked from bits, decode calls on them, and helper calls fed with them.

    ``fed`` names hold unpacked bits on entry (a helper's parameters). A name assigned from a
    bit operation is unpacked (0 hops); one computed from unpacked names is too, up to
    :data:`MAX_HOPS` assignments and never through a reduction, load or dot. ``span`` limits
    the flow to a loop's lines. Returns ({name: hops}, [(line, decode fn)],
    [(line, callee, indexes of unpacked args)]). Two passes, so values carried around a loop are seen.
    """
    lo, hi = span or (0, 1 << 30)
    assigns = [r for r in records[0] if lo <= r[0] <= hi]
    calls = [r for r in records[1] if lo <= r[0] <= hi]
    tainted: dict[str, int] = {n: 0 for n in fed}
    for _ in range(2):
        for _line, tnames, vnames, bitop, stop in assigns:
            if stop:
                continue
            if bitop:
                hops = 0
            else:
                hit = [tainted[n] for n in vnames if n in tainted]
                if not hit or min(hit) + 1 > MAX_HOPS:
                    continue
                hops = min(hit) + 1
            for t in tnames:
                if tainted.get(t, 99) > hops:
                    tainted[t] = hops
    decodes: dict[tuple[int, str], None] = {}
    helper_calls: dict[tuple[int, str], list[int]] = {}
    for line, name, last, args, helper in calls:
        hot = [i for i, (names, bitop, stop) in enumerate(args) if not stop and (bitop or names & tainted.keys())]
        if last in DECODE_FUNCS and hot:
            decodes[(line, last)] = None
        elif helper:
            helper_calls[(line, name)] = hot
    return tainted, sorted(decodes), [(ln, name, hot) for (ln, name), hot in sorted(helper_calls.items())]


def _kernel_summary(fn: ast.FunctionDef, consts: dict[str, ast.AST]) -> dict:
    configs, at_line, configs_src = _autotune(fn, consts)
    params = [a.arg for a in fn.args.args]
    constexpr = [a.arg for a in fn.args.args if a.annotation is not None and "constexpr" in _src(a.annotation)]
    loops = _loops(fn)
    spans = [(l.lineno, l.end_lineno) for l in loops]
    dots, sums, bit_lines = [], [], []
    zeros: dict[str, dict] = {}
    pids: list[dict] = []
    nodes = list(astwalk.walk(fn))
    for n in nodes:
        if isinstance(n, ast.Call):
            name = _last(dotted(n.func))
            if name in _DOT and dotted(n.func).split(".")[0] in ("tl", "triton", "language"):
                dots.append([n.lineno, dotted(n.func)])
            elif name == "sum" and dotted(n.func).startswith(("tl.", "triton.language.")) and n.args and _has_mult(n.args[0]):
                loop = _in_any(n.lineno, spans)
                if loop is not None:
                    sums.append({"line": n.lineno, "end_line": n.end_lineno, "loop_line": loop, "expr": _src(n)})
        if isinstance(n, ast.BinOp) and isinstance(n.op, _BITOPS) and _has_bitop(n) and _in_any(n.lineno, spans):
            bit_lines.append(n.lineno)
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Call):
            callee = _last(dotted(n.value.func))
            if callee in ("zeros", "full") and n.value.args and isinstance(n.value.args[0], (ast.List, ast.Tuple)):
                zeros[n.targets[0].id] = {"line": n.lineno, "shape": [_src(e) for e in n.value.args[0].elts]}
            elif callee == "program_id":
                axis = n.value.args[0] if n.value.args else next((k.value for k in n.value.keywords if k.arg == "axis"), None)
                pids.append({"name": n.targets[0].id, "axis": axis.value if isinstance(axis, ast.Constant) else _src(axis) if axis else 0, "line": n.lineno})
    # A program id is tiled when it is multiplied by a block size; otherwise it picks one row/slot.
    blockish = set(constexpr) | {p for p in params if p.upper() == p and p.startswith("BLOCK")}
    mults = [_names(n) for n in nodes if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)] if pids else []
    for p in pids:
        p["tiled"] = any(p["name"] in names and names & blockish for names in mults)
    # Which accumulators the reductions add into: `acc += tl.sum(...)` / `acc = acc * a + tl.sum(...)`.
    for s in sums:
        s["acc"] = None
    for n in nodes if sums else ():
        tgt = None
        if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            tgt = n.target.id
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            tgt = n.targets[0].id
        if tgt:
            for s in sums:
                if n.lineno <= s["line"] <= (n.end_lineno or n.lineno) and s["acc"] is None:
                    s["acc"] = tgt
    # Bit-unpacking decoded per element inside a loop (direct, or through a called helper).
    records = _flow_records(fn, nodes)
    loop_flows = []
    for l in loops:
        if any(o is not l and o.lineno <= l.lineno and l.end_lineno <= o.end_lineno for o in loops):
            continue  # nested loops are covered by their outermost loop
        _, decodes, helpers = _taint_flow(records, set(), (l.lineno, l.end_lineno))
        loop_flows.append({"line": l.lineno, "end_line": l.end_lineno, "decodes": decodes, "helper_calls": helpers})
    # As a helper: decode lines when its inputs are already unpacked bits, and when they are raw.
    dec_fed = {}
    for i, p in enumerate(params):
        _, dec, _ = _taint_flow(records, {p})
        if dec:
            dec_fed[i] = dec
    _, dec_raw, _ = _taint_flow(records, set())
    return {
        "name": fn.name,
        "line": fn.lineno,
        "end_line": fn.end_lineno,
        "params": params,
        "constexpr": constexpr,
        "configs": configs,
        "autotune_line": at_line,
        "configs_src": configs_src,
        "dots": dots,
        "loops": spans,
        "sums": sums,
        "bit_lines": sorted(set(bit_lines)),
        "accumulators": zeros,
        "program_ids": pids,
        "loop_flows": loop_flows,
        "decodes_if_fed": dec_fed,  # {param index: decode lines when that parameter holds unpacked bits}
        "decodes_raw": dec_raw,
    }


# ── Host functions: the statements a grid or an epilogue is evaluated from ──


def _launch(call: ast.Call) -> Optional[dict]:
    if isinstance(call.func, ast.Subscript):
        return {
            "line": call.lineno,
            "end_line": call.end_lineno,
            "kernel": dotted(call.func.value),
            "grid": _src(call.func.slice),
            "args": [_src(a) for a in call.args],
            "kwargs": {kw.arg: _src(kw.value) for kw in call.keywords if kw.arg},
        }
    return None


def _stmts(body: list[ast.stmt], out: list[dict]) -> None:
    """Flatten a function body in source order (without nested defs) into plain records."""
    for s in body:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        rec: dict = {"line": s.lineno, "end_line": s.end_lineno}
        if isinstance(s, ast.Assign):
            t = s.targets[-1]
            rec["k"] = "assign"
            rec["unpack"] = isinstance(t, (ast.Tuple, ast.List))
            elts = t.elts if rec["unpack"] else [t]
            rec["targets"] = [_src(e) if isinstance(e, (ast.Name, ast.Attribute)) else None for e in elts]
            rec["src"] = _src(s.value)
        elif isinstance(s, ast.AnnAssign) and s.value is not None:
            rec.update(k="assign", unpack=False, targets=[_src(s.target)], src=_src(s.value))
        elif isinstance(s, ast.AugAssign):
            rec.update(k="aug", targets=[_src(s.target)], op=type(s.op).__name__, src=_src(s.value))
        elif isinstance(s, ast.Expr) and not (isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)):
            rec.update(k="expr", src=_src(s.value))
        elif isinstance(s, ast.Return) and s.value is not None:
            rec.update(k="return", src=_src(s.value))
        elif isinstance(s, ast.If):
            rec.update(k="if", src=_src(s.test), body_end=s.body[-1].end_lineno)
        else:
            rec = None
        if rec is not None:
            value = getattr(s, "value", None)
            if isinstance(value, ast.Call):
                l = _launch(value)
                if l:
                    rec["launch"] = l
            out.append(rec)
        for field in ("body", "orelse", "finalbody"):
            sub = getattr(s, field, None)
            if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                _stmts(sub, out)
        if isinstance(s, ast.Try):
            for h in s.handlers:
                _stmts(h.body, out)


def _function_summary(fn: ast.AST) -> dict:
    stmts: list[dict] = []
    _stmts(fn.body, stmts)
    a = fn.args
    params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    return {"name": fn.name, "line": fn.lineno, "end_line": fn.end_lineno, "params": params, "stmts": stmts}


def summarize(text: str) -> dict:
    """The plain-data summary of one file (see the module docstring). Never raises: a file it
    cannot read comes back with ``error`` set and nothing in it."""
    try:
        return _summarize(text)
    except (RecursionError, MemoryError):
        return {"error": "too deeply nested to summarize", "kernels": {}, "functions": {}, "consts": {}}
    except Exception as e:  # noqa: BLE001 - one odd file must not crash every check that reads it
        return {"error": internal_error("summarizing", e), "kernels": {}, "functions": {}, "consts": {}}


def _summarize(text: str) -> dict:
    try:
        mod = bounded.parse(text)
    except (SyntaxError, ValueError) as e:
        return {"error": str(e), "kernels": {}, "functions": {}, "consts": {}}
    consts: dict[str, ast.AST] = {}
    for s in mod.body:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            consts[s.targets[0].id] = s.value
        elif isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is not None:
            consts[s.target.id] = s.value
    kernels, functions = {}, {}

    def visit(body, prefix):
        for s in body:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = prefix + s.name
                if is_kernel_decorators([_deco_name(d) for d in s.decorator_list]):
                    kernels[q] = _kernel_summary(s, consts)
                else:
                    functions[q] = _function_summary(s)
                visit(s.body, q + ".")
            elif isinstance(s, ast.ClassDef):
                visit(s.body, prefix + s.name + ".")

    visit(mod.body, "")
    const_src = {}
    for k, v in consts.items():
        s = _src(v)
        if len(s) <= 200:
            const_src[k] = s
    return {"error": None, "kernels": kernels, "functions": functions, "consts": const_src}


def file_summary(tree, path: str, memo: Optional[dict] = None) -> dict:
    """:func:`summarize` of ``path`` in ``tree``, from ``memo``, the disk cache, or one parse."""
    key = ("tritonast", path)
    if memo is not None and key in memo:
        return memo[key]
    meta = tree.index.files.get(path)
    digest = getattr(meta, "digest", None)
    disk = cache_dir() / "tritonast" / f"v{SUMMARY_VERSION}" / digest[:2] / f"{digest}.pkl" if digest else None
    out = load_pickle(disk) if disk else None
    if out is None:
        out = summarize(tree.read_text(path))
        if disk:
            try:
                save_pickle(disk, out)
            except OSError:
                pass  # a read-only cache only costs time
    if memo is not None:
        memo[key] = out
    return out


@functools.lru_cache(maxsize=65536)
def parse_expr(src: str) -> Optional[ast.AST]:
    """One expression's tree, memoized (callers only read it)."""
    try:
        return bounded.parse(src, mode="eval").body
    except SyntaxError:
        return None


def per_file_memo(tree, name: str, paths, compute, memo: Optional[dict] = None) -> dict:
    """{path: compute(path)} for ``paths``, kept in ONE cache file per target and ``name``.

    A warm scan loads one small pickle instead of a summary per file; a file whose digest changed
    is recomputed. ``name`` must change with anything else ``compute`` depends on (its params).
    """
    key = ("per_file_memo", name)
    if memo is not None and key in memo:
        return memo[key]
    files = tree.index.files
    store = cache_dir() / "tritonast" / f"v{SUMMARY_VERSION}" / "memo" / f"{tree.target.key}.{name}.pkl"
    old = load_pickle(store) or {}
    out, fresh, changed = {}, {}, False
    for p in sorted(paths):
        digest = getattr(files.get(p), "digest", None)
        hit = old.get(p)
        if hit is not None and hit[0] == digest:
            value = hit[1]
        else:
            value, changed = compute(p), True
        fresh[p] = (digest, value)
        out[p] = value
    if changed or set(old) != set(fresh):
        try:
            save_pickle(store, fresh)
        except OSError:
            pass
    if memo is not None:
        memo[key] = out
    return out


def params_key(params: dict) -> str:
    return hashlib.sha1(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:12]
