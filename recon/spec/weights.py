"""The expert weights as the quant method's ``create_weights`` registers them: shapes and dtypes evaluated at
the model's sizes, each with its file:line (the one place the spec parses a file itself)."""

from __future__ import annotations

import ast
import math
from typing import Optional

from .. import bounded
from ..engine.dtypes import DTYPE_BYTES
from ..engine.shapes import int_arith, model_size
from .common import path_line, graph_node
from .. import astwalk


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
    d = graph_node(G, qual)
    if not d:
        return {"found": False, "method": qual, "tensors": []}
    path, line = d.get("path"), d.get("line")
    try:
        mod = bounded.parse(tree.read_text(path))
    except (SyntaxError, OSError, ValueError):
        return {"found": False, "method": qual, "at": path_line(path, line), "tensors": []}
    fn = next((n for n in astwalk.walk(mod) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "create_weights" and n.lineno == line), None)
    if fn is None:
        return {"found": False, "method": qual, "at": path_line(path, line), "tensors": []}
    env: dict = {}
    for a in fn.args.args + fn.args.kwonlyargs:
        v = model_size(a.arg, model)
        if v is not None:
            env[a.arg] = v
    allocs: dict[str, tuple[ast.Call, int]] = {}
    registered: list[tuple[str, str, int]] = []
    for st in astwalk.walk(fn):
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
            "at": path_line(path, alloc_line),
            "registered_at": path_line(path, reg_line),
        })
    return {"found": True, "method": qual, "at": path_line(path, line), "tensors": tensors}
