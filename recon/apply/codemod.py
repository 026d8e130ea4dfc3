"""The LibCST codemod that points the swap-in call at the grouped kernel, and its exact inverse.

Two edits, nothing else in the file is touched (LibCST keeps every other byte):

1. after the statement that imports the slot host function (a lazy import inside ``apply`` in
   SGLang), an import of the bundle's entry point, shaped like that import and preceded by a
   comment naming the environment variable that switches back;
2. the call ``host(...)`` becomes ``entry(host, ...)``: the slot function is passed along, so the
   entry point runs it when the variable says so, and the arguments stay where they were.

:func:`unpatch` removes both, giving back the original bytes (tested on the real file).
"""

from __future__ import annotations

from typing import Optional, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..errors import ReconError
from .swap import WRAPPER

ENV_VAR = "SGLANG_RECON_GROUPED_MXFP4"


def _comment(host: str) -> str:
    return f"# recon apply: grouped MXFP4 MoE kernel; {ENV_VAR}=0 switches back to {host}"


def _dotted(node) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _binds(stmt: cst.CSTNode, name: str) -> Optional[cst.ImportFrom]:
    """The ``from m import ... name ...`` in a simple statement line, if it binds ``name``."""
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                for a in small.names:
                    if (a.asname.name.value if a.asname else _dotted(a.name)) == name:
                        return small
    return None


def _import_like(template: cst.ImportFrom, host: str, module: str) -> cst.ImportFrom:
    """``from module import WRAPPER`` formatted like ``template`` (parentheses, indentation, commas)."""
    alias = next(a for a in template.names if (a.asname.name.value if a.asname else _dotted(a.name)) == host)
    last = template.names[-1]
    new_alias = alias.with_changes(name=cst.Name(WRAPPER), asname=None, comma=last.comma if alias is not last else alias.comma)
    return template.with_changes(module=cst.parse_expression(module), relative=(), names=[new_alias])


class _Patch(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, scope: str, line: int, host: str, module: str):
        self.scope, self.line, self.host, self.module = scope.split("."), line, host, module
        self.stack: list[str] = []
        self.calls = 0
        self.imports = 0

    def visit_ClassDef(self, node):
        self.stack.append(node.name.value)

    def leave_ClassDef(self, orig, node):
        self.stack.pop()
        return node

    def visit_FunctionDef(self, node):
        self.stack.append(node.name.value)

    def leave_FunctionDef(self, orig, node):
        self.stack.pop()
        return node

    def _inside(self) -> bool:
        return self.stack[: len(self.scope)] == self.scope

    def leave_Call(self, orig: cst.Call, node: cst.Call):
        if not self._inside() or _dotted(node.func).rsplit(".", 1)[-1] != self.host:
            return node
        if self.get_metadata(PositionProvider, orig).start.line != self.line:
            return node
        self.calls += 1
        ws = node.whitespace_before_args
        after = ws if isinstance(ws, cst.ParenthesizedWhitespace) else cst.SimpleWhitespace(" ")
        first = cst.Arg(value=node.func, comma=cst.Comma(whitespace_after=after) if node.args else cst.MaybeSentinel.DEFAULT)
        return node.with_changes(func=cst.Name(WRAPPER), args=[first, *node.args])

    def _insert(self, body: Sequence[cst.BaseStatement]) -> list:
        out = []
        for st in body:
            out.append(st)
            imp = _binds(st, self.host)
            if imp is not None and not self.imports:
                self.imports += 1
                line = cst.SimpleStatementLine(
                    body=[_import_like(imp, self.host, self.module)],
                    leading_lines=[cst.EmptyLine(comment=cst.Comment(_comment(self.host)))],
                )
                out.append(line)
        return out

    def leave_IndentedBlock(self, orig, node):
        if self._inside() and not self.imports:
            return node.with_changes(body=self._insert(node.body))
        return node

    def leave_Module(self, orig, node):
        if not self.imports:  # the host function is imported at module level
            node = node.with_changes(body=self._insert(node.body))
        return node


def patch(source: str, scope: str, line: int, host: str, module: str) -> str:
    """``source`` with the call of ``host`` at ``line`` inside ``scope`` (``Class.method``) routed
    through the bundle's entry point in ``module``."""
    try:
        tree = cst.parse_module(source)
    except cst.ParserSyntaxError as e:
        raise ReconError(f"cannot parse the dispatch file for the codemod: {e}") from None
    t = _Patch(scope, line, host, module)
    new = MetadataWrapper(tree).visit(t)
    if t.calls != 1:
        raise ReconError(f"codemod: expected one call of {host} at line {line} in {scope}, found {t.calls}")
    if t.imports != 1:
        raise ReconError(f"codemod: no `from ... import {host}` visible in {scope}: cannot place the grouped kernel's import")
    return new.code


class _Unpatch(cst.CSTTransformer):
    def __init__(self, module: str):
        self.module = module
        self.changes = 0

    def leave_Call(self, orig, node: cst.Call):
        if isinstance(node.func, cst.Name) and node.func.value == WRAPPER and node.args:
            self.changes += 1
            return node.with_changes(func=node.args[0].value, args=list(node.args[1:]))
        return node

    def _drop(self, body):
        keep = []
        for st in body:
            if isinstance(st, cst.SimpleStatementLine) and any(
                    isinstance(s, cst.ImportFrom) and _dotted(s.module) == self.module for s in st.body):
                self.changes += 1
                continue
            keep.append(st)
        return keep

    def leave_IndentedBlock(self, orig, node):
        return node.with_changes(body=self._drop(node.body))

    def leave_Module(self, orig, node):
        return node.with_changes(body=self._drop(node.body))


def unpatch(source: str, module: str) -> tuple[str, int]:
    """``source`` without what :func:`patch` added (and how many edits that took)."""
    t = _Unpatch(module)
    new = cst.parse_module(source).visit(t)
    return new.code, t.changes


def is_patched(source: str, module: str) -> bool:
    return module in source and WRAPPER in source
