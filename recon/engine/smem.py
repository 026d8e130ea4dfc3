"""Shared memory a Triton launch needs, read from the kernel's source and the launch's config.

Triton stages the operands of ``tl.dot`` in shared memory: a tile loaded with ``tl.load`` (or
computed, like the softmax ``p`` of an attention kernel) is written to a shared buffer of its block
shape before the MMA reads it, and a load inside a loop that the pipeliner software-pipelines gets
``num_stages`` buffers. The estimate is, per region of the kernel (each outermost loop, and the
body outside loops), the sum of its dot operands' tiles (block dims x element size, x num_stages for
a tile loaded in the loop) plus the loop-invariant operands it reads; the need is the largest region.
This is the allocation the Triton releases SGLang 0.5.x required made (sglang #14322: extend
attention at BLOCK_M=128, BLOCK_N=64, head dims 192/128 needed 106,496 B = 32,768 q + 16,384 k +
16,384 q_pe + 8,192 k_pe + 16,384 p + 16,384 v); newer Triton reuses buffers and may need less
(Triton 3.9 compiles that launch for sm_120 with 65,536 B). Pipelined tiles (num_stages > 1) are
estimated but the check does not judge them: that multiple was not checked against the allocator.

The block sizes come from the launch: its keyword arguments evaluated by the gate interpreter in
the launcher (straight-line statements and branches it can decide on the device), with the head
dimensions the step's attention outcomes give. Nothing is guessed: a dimension or config that does
not evaluate to an integer leaves the launch unjudged.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Optional

from .interp import UNKNOWN, unpack
from .. import astwalk

ELEMENT_BYTES = 2  # bf16 / fp16 activations and KV cache: the model dtype SGLang serves by default


# --- kernel side: dot operands and their tile shapes -------------------------------------------------

def _bcast(a: tuple, b: tuple) -> tuple:
    if len(a) < len(b):
        a, b = b, a
    b = ("1",) * (len(a) - len(b)) + tuple(b)
    return tuple(y if x == "1" else x for x, y in zip(a, b))


class _Shapes:
    """Block shapes of the tensors a Triton kernel builds, as source strings of constexpr names."""

    def __init__(self):
        self.env: dict[str, tuple] = {}

    def of(self, n: ast.AST) -> tuple:
        if isinstance(n, ast.Name):
            return self.env.get(n.id, ())
        if isinstance(n, ast.Subscript):  # x[:, None] / x[None, :]
            base = self.of(n.value)
            idx = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
            out, i = [], 0
            for e in idx:
                if isinstance(e, ast.Constant) and e.value is None:
                    out.append("1")
                elif isinstance(e, ast.Slice):
                    out.append(base[i] if i < len(base) else "1")
                    i += 1
                else:
                    i += 1
            return tuple(out) if base else ()
        if isinstance(n, (ast.BinOp,)):
            return _bcast(self.of(n.left), self.of(n.right))
        if isinstance(n, ast.Compare):
            s = self.of(n.left)
            for c in n.comparators:
                s = _bcast(s, self.of(c))
            return s
        if isinstance(n, ast.BoolOp):
            s: tuple = ()
            for v in n.values:
                s = _bcast(s, self.of(v))
            return s
        if isinstance(n, ast.UnaryOp):
            return self.of(n.operand)
        if isinstance(n, ast.Attribute) and n.attr == "T":
            return tuple(reversed(self.of(n.value)))
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name == "arange" and len(n.args) >= 2:
                return (f"({ast.unparse(n.args[1])}) - ({ast.unparse(n.args[0])})",)
            if name in ("zeros", "full", "empty") and n.args and isinstance(n.args[0], (ast.List, ast.Tuple)):
                return tuple(ast.unparse(e) for e in n.args[0].elts)
            if name == "dot" and len(n.args) >= 2:
                a, b = self.of(n.args[0]), self.of(n.args[1])
                return (a[0], b[-1]) if len(a) == 2 and len(b) == 2 else ()
            if name in ("trans", "permute") and n.args:
                return tuple(reversed(self.of(n.args[0])))
            if name in ("sum", "max", "min", "argmax", "argmin", "reduce"):
                s = self.of(n.args[0]) if n.args else ()
                ax = n.args[1] if len(n.args) > 1 else next((k.value for k in n.keywords if k.arg == "axis"), None)
                if isinstance(ax, ast.Constant) and isinstance(ax.value, int) and s:
                    return tuple(d for i, d in enumerate(s) if i != ax.value % len(s))
                return ()
            if isinstance(f, ast.Attribute) and name in ("to", "cast"):
                return self.of(f.value)
            if name in ("load", "cast", "exp", "exp2", "log", "log2", "where", "maximum", "minimum", "abs", "sigmoid",
                        "multiple_of", "max_contiguous", "fma", "tanh", "sqrt", "rsqrt", "broadcast_to"):
                s = ()
                for a in n.args[:3]:
                    s = _bcast(s, self.of(a))
                return s
            return ()
        return ()


@dataclass
class Operand:
    src: str
    shape: tuple
    in_loop: bool  # loaded inside the region's loop: pipelined, num_stages buffers
    line: int


@dataclass
class Region:
    line: int
    end_line: int
    operands: list = field(default_factory=list)


def _loaded_in(fn: ast.AST, loop: Optional[ast.AST]) -> set:
    """Names bound from ``tl.load`` inside ``loop``."""
    out = set()
    for n in astwalk.walk(loop) if loop is not None else ():
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and ast.unparse(n.value.func).endswith("load"):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    out.add(t.id)
    return out


def dot_regions(fn: ast.FunctionDef) -> list[Region]:
    """The kernel's regions (outermost loops holding a ``tl.dot``, and the body outside loops), each
    with its dot operands' block shapes. Statements are read once in source order (loop bodies once),
    which is what a tile's shape needs: block shapes do not change across iterations."""
    sh = _Shapes()

    def walk(body):
        for st in body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1:
                t = st.targets[0]
                if isinstance(t, ast.Name):
                    sh.env[t.id] = sh.of(st.value)
                elif isinstance(t, ast.Tuple) and isinstance(st.value, ast.Tuple):
                    for e, v in zip(t.elts, st.value.elts):
                        if isinstance(e, ast.Name):
                            sh.env[e.id] = sh.of(v)
            elif isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
                sh.env[st.target.id] = _bcast(sh.env.get(st.target.id, ()), sh.of(st.value))
            for fld in ("body", "orelse"):
                sub = getattr(st, fld, None)
                if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt) and not isinstance(st, (ast.FunctionDef, ast.ClassDef)):
                    walk(sub)

    loops = [n for n in astwalk.walk(fn) if isinstance(n, (ast.For, ast.While))]
    outer = [l for l in loops if not any(o is not l and o.lineno <= l.lineno and l.end_lineno <= o.end_lineno for o in loops)]
    regions: list[Region] = []
    # shapes are bound in source order; a dot's operands are read after the walk (their names are
    # bound once per kernel in the kernels SGLang ships: q, k, v, p)
    walk(fn.body)
    for loop in outer + [None]:
        nodes = astwalk.walk(loop) if loop is not None else [n for n in astwalk.walk(fn) if not any(
            l.lineno <= getattr(n, "lineno", 0) <= l.end_lineno for l in outer)]
        dots = [n for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "dot"]
        if not dots:
            continue
        loaded = _loaded_in(fn, loop)
        r = Region(loop.lineno if loop is not None else fn.lineno, loop.end_lineno if loop is not None else fn.end_lineno)
        seen = set()
        for d in sorted(dots, key=lambda n: (n.lineno, n.col_offset)):
            for a in d.args[:2]:
                src = ast.unparse(a)
                if src in seen:
                    continue
                seen.add(src)
                base = a.func.value if isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute) and a.func.attr in ("to", "cast") else a
                in_loop = (isinstance(base, ast.Name) and base.id in loaded) or (
                    isinstance(base, ast.Call) and ast.unparse(base.func).endswith("load") and loop is not None)
                r.operands.append(Operand(src, sh.of(a), in_loop, d.lineno))
        regions.append(r)
    return regions


def _dim(src: str, consts: dict) -> Optional[int]:
    try:
        v = eval(compile(ast.parse(src, mode="eval"), "<dim>", "eval"), {"__builtins__": {}}, dict(consts))  # noqa: S307 - names are the launch's int constexprs only
    except Exception:  # noqa: BLE001 - a name the launch does not bind: unjudged
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 20 else None


def need(regions: list[Region], consts: dict, num_stages: int, elem: int = ELEMENT_BYTES) -> Optional[dict]:
    """Bytes of the largest region at the launch's constexprs, with its operands; None when a tile
    dimension does not evaluate."""
    consts = {k: v for k, v in consts.items() if isinstance(v, int) and not isinstance(v, bool)}
    best = None
    for r in regions:
        total, parts = 0, []
        for o in r.operands:
            if len(o.shape) != 2:
                return None
            dims = [_dim(d, consts) for d in o.shape]
            if None in dims:
                return None
            bufs = max(1, num_stages) if o.in_loop else 1
            b = dims[0] * dims[1] * elem * bufs
            total += b
            parts.append({"operand": o.src, "tile": dims, "buffers": bufs, "bytes": b, "line": o.line})
        if best is None or total > best["bytes"]:
            best = {"bytes": total, "region_line": r.line, "operands": parts}
    return best


# --- host side: the launch's constexprs --------------------------------------------------------------

def launch_values(it, mod: str, scope: str, fn: ast.FunctionDef, launch_line: int, seeds: dict) -> dict:
    """The launcher's bindings before ``launch_line``, executed by the gate interpreter ``it`` on its
    device: assignments it can evaluate, ``if`` branches it can decide (undecided ones bind nothing,
    so a name set only there stays unknown). ``seeds`` are fixed (the head dims of an outcome)."""
    env: dict[str, Any] = dict(seeds)

    def run(body):
        for st in body:
            if st.lineno >= launch_line:
                return
            if isinstance(st, ast.Assign) and len(st.targets) == 1:
                t = st.targets[0]
                names = [t.id] if isinstance(t, ast.Name) else [e.id for e in t.elts if isinstance(e, ast.Name)] if isinstance(t, ast.Tuple) else []
                if any(n in seeds for n in names):
                    continue
                v = it.eval(st.value, dict(env), mod, scope)
                if isinstance(t, ast.Name):
                    env[t.id] = v
                elif isinstance(t, ast.Tuple):
                    unpack(t, v, env)
            elif isinstance(st, ast.If):
                c = it.eval(st.test, dict(env), mod, scope)
                if c is UNKNOWN:
                    for n in astwalk.walk(st):
                        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in seeds:
                            env[n.id] = UNKNOWN
                    continue
                run(st.body if c else st.orelse)

    run(fn.body)
    return env


def launch_config(it, mod: str, scope: str, fn: ast.FunctionDef, call: ast.Call, seeds: dict) -> dict:
    """The launch's keyword arguments (constexprs, num_warps, num_stages) as ints where they evaluate."""
    env = launch_values(it, mod, scope, fn, call.lineno, seeds)
    out = {}
    for kw in call.keywords:
        if kw.arg:
            v = it.eval(kw.value, dict(env), mod, scope)
            if isinstance(v, int) and not isinstance(v, bool):
                out[kw.arg] = v
    return out
