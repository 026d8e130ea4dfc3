"""Integer evaluation of host expressions at the model's decode shapes: names bound by a function's
own statements (from its :mod:`recon.tritonast` summary), then by the symbol table of which SGLang
names are which model sizes (:data:`DEFAULT_SYMBOLS`), then by module constants. What cannot be
computed is :class:`Unresolved`, never guessed. Used by the launch and epilogue checks.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any, Optional

from .. import bounded
from ..tritonast import parse_expr

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


def model_size(name: str, model) -> Optional[int]:
    """The model size a plain name stands for (``num_experts`` -> E, ``hidden_size`` -> H,
    ``intermediate_size_per_partition`` -> I) by :data:`DEFAULT_SYMBOLS`' name-only entries that
    need no decode batch; None for a name that is no model size."""
    for s in DEFAULT_SYMBOLS:
        if "shape_of" in s or not re.search(s["names"], name) or s["value"] == "M":
            continue
        return model_value(model, s["value"])
    return None


def int_arith(node, env: dict) -> Optional[int]:
    """``node`` as an int over the names ``env`` binds (the evaluator's integer arithmetic); None
    for what does not compute to an int."""
    def lookup(n):
        if n in env:
            return env[n]
        raise Unresolved(n)
    try:
        v = _arith(node, lookup)
    except Unresolved:
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class Unresolved(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def model_value(model, attr: str) -> Optional[int]:
    if attr == "num_attention_heads":  # profiles name it either way
        return getattr(model, "num_attention_heads", None) or getattr(model, "num_heads", None)
    v = getattr(model, attr, None)
    if attr in ("num_experts", "top_k", "moe_intermediate_size", "num_moe_layers") and v == 0:
        return None  # a dense model has no experts: a MoE size is no size of it, never bound as 0
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
        return bounded.build(tuple, [_arith_node(e, lookup, meta, meta_name) for e in node.elts])
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
