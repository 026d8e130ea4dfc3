"""Names in code and in recon's output, one way each: the dotted name an expression spells
(``a.b.c``, ``f().x``), the same for plain name chains only, and a qualified name shortened for a
person (``pkg.mod.Class.method`` -> ``Class.method``, or its last part).

The indexer's own renderer of expressions (:func:`recon.pyfacts.dotted`, which also writes
subscripts and literals for the graph's facts) and the LibCST codemod's name reader
(:mod:`recon.apply.codemod`) read other trees than stdlib ``ast`` names; they stay where they are.
"""

from __future__ import annotations

import ast
from typing import Optional

# the graph node a CUDA-graph capture of "the model" runs: any registered model's forward (here, not
# in the graph module, so that reading it does not import the graph library)
MODEL_FORWARD = "<model>.forward"


def dotted_name(node) -> str:
    """``a.b.c`` for an attribute chain on a name, ``f().x`` through calls; "" for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if isinstance(node, ast.Call):
        inner = dotted_name(node.func)
        if inner:
            parts.append(inner + "()")
            return ".".join(reversed(parts))
    return ""


def plain_dotted(node) -> str:
    """:func:`dotted_name` of a chain of names and attributes only (no call on the way), else ""."""
    d = dotted_name(node)
    return "" if "(" in d else d


def short(qualname: Optional[str]) -> str:
    """``pkg.mod.Class.method`` -> ``Class.method`` (``mod.func`` for a module-level function)."""
    if not qualname:
        return ""
    return ".".join(qualname.split(".")[-2:])


def last(qualname: Optional[str]) -> str:
    """The last part of a qualified name (``pkg.mod.Class.method`` -> ``method``)."""
    return qualname.rsplit(".", 1)[-1] if qualname else ""
