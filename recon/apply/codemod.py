"""The LibCST codemod that points the swap-in call at the grouped kernel, and its exact inverse.

Two edits, nothing else in the file is touched (LibCST keeps every other byte):

1. after the statement that imports the slot host function (a lazy import inside ``apply`` in
   SGLang), an import of the bundle's entry point, shaped like that import and preceded by a
   comment naming the environment variable that switches back;
2. the call ``host(...)`` becomes ``entry(host, ...)``: the slot function is passed along, so the
   entry point runs it when the variable says so, and the arguments stay where they were.

:func:`add_prepack` makes a third where the code says unambiguously where: in the quant method's
``process_weights_after_loading``, right after the statement that sets the backend string ``apply``
tests before the call, an import of the bundle's prepack hook and a call of it with the layer and
the names of the four weight attributes the call reads, so the weights are prepacked once at load.

:func:`unpatch` removes all three, giving back the original bytes (tested on the real file).
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
        from .swap import PREPACK

        keep = []
        for st in body:
            if isinstance(st, cst.SimpleStatementLine) and any(
                    isinstance(s, cst.ImportFrom) and _dotted(s.module) == self.module for s in st.body):
                self.changes += 1
                continue
            if isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 and isinstance(st.body[0], cst.Expr) \
                    and isinstance(st.body[0].value, cst.Call) and _dotted(st.body[0].value.func) == PREPACK:
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


# --- the third edit: prepack the weights once, at load time -------------------------------------

LOAD_METHOD = "process_weights_after_loading"  # the quant method's load-time hook (SGLang's interface)
# the slot host function's weight arguments, in the order the bundle's prepack hook takes them
WEIGHT_ARGS = ("w13_packed", "w2_packed", "w13_scale", "w2_scale")


def _prepack_comment() -> str:
    return f"# recon apply: the MXFP4 experts prepacked once for the grouped kernel (scales as e8m0, one copy); {ENV_VAR}=0 at load skips it"


def _str_value(node) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        v = node.evaluated_value
        return v if isinstance(v, str) else None
    return None


def _layer_attr(node) -> Optional[tuple[str, str]]:
    """``recv.attr`` or ``recv.attr.data`` -> (recv, attr)."""
    if isinstance(node, cst.Attribute) and node.attr.value == "data":
        node = node.value
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
        return node.value.value, node.attr.value
    return None


class _FindLoadSite(cst.CSTVisitor):
    """In the class of ``scope``: the backend comparison guarding the host call in ``apply``, the
    layer attributes the call's weight arguments come from, and the one statement of the load hook
    that sets that backend string."""
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, scope: str, host: str):
        self.cls, self.meth = scope.split(".")[-2:]
        self.host = host
        self.stack: list[str] = []
        self.ifs: list = []  # (first line, last line of the body, (receiver, attribute, value)) in apply
        self.calls: list = []  # (line, keyword arguments) of the host's calls in apply
        self.bound: dict[str, tuple[str, str]] = {}  # local name -> (receiver, attribute) in apply
        self.sets: list = []  # (statement, receiver, attribute, value) in the load hook

    def visit_ClassDef(self, node):
        self.stack.append(node.name.value)

    def leave_ClassDef(self, node):
        self.stack.pop()

    def visit_FunctionDef(self, node):
        self.stack.append(node.name.value)

    def leave_FunctionDef(self, node):
        self.stack.pop()

    def _in(self, meth: str) -> bool:
        return self.stack[-2:] == [self.cls, meth]

    def visit_If(self, node):
        if not self._in(self.meth):
            return
        pos = self.get_metadata(PositionProvider, node.body)
        t = node.test
        if isinstance(t, cst.Comparison) and len(t.comparisons) == 1 and isinstance(t.comparisons[0].operator, cst.Equal):
            la, val = _layer_attr(t.left), _str_value(t.comparisons[0].comparator)
            if la and val is not None:
                self.ifs.append((pos.start.line, pos.end.line, (la[0], la[1], val)))

    def visit_SimpleStatementLine(self, node):
        if len(node.body) != 1 or not isinstance(node.body[0], cst.Assign) or len(node.body[0].targets) != 1:
            return
        a = node.body[0]
        tgt = a.targets[0].target
        if self._in(self.meth) and isinstance(tgt, cst.Name) and _layer_attr(a.value):
            self.bound[tgt.value] = _layer_attr(a.value)
        elif self._in(LOAD_METHOD) and isinstance(tgt, cst.Attribute) and isinstance(tgt.value, cst.Name) and _str_value(a.value) is not None:
            self.sets.append((node, tgt.value.value, tgt.attr.value, _str_value(a.value)))

    def visit_Call(self, node):
        if not self._in(self.meth):
            return
        name = _dotted(node.func).rsplit(".", 1)[-1]
        # the host's call, before or after patch() routed it through the entry point
        if name == self.host or (name == WRAPPER and node.args and _dotted(node.args[0].value).rsplit(".", 1)[-1] == self.host):
            self.calls.append((self.get_metadata(PositionProvider, node).start.line,
                               {a.keyword.value: a.value for a in node.args if a.keyword is not None}))

    @property
    def guard(self) -> Optional[tuple[str, str, str]]:
        """(receiver, attribute, value) of the innermost backend test around the one host call."""
        if len(self.calls) != 1:
            return None
        line = self.calls[0][0]
        inner = [i for i in self.ifs if i[0] <= line <= i[1]]
        return max(inner, key=lambda i: i[0])[2] if inner else None


class _InsertAfter(cst.CSTTransformer):
    def __init__(self, target, lines: list):
        self.target, self.lines, self.done = target, lines, 0

    def leave_IndentedBlock(self, orig, node):
        if not any(st is self.target for st in orig.body):
            return node
        body = []
        for o, st in zip(orig.body, node.body):
            body.append(st)
            if o is self.target:
                body += self.lines
                self.done += 1
        return node.with_changes(body=body)


def add_prepack(source: str, scope: str, host: str, module: str) -> tuple[str, Optional[str]]:
    """``source`` (already patched or not) with a call of the bundle's prepack hook in the quant
    method's load hook, right after the statement that sets the backend string ``apply`` tests
    before its one call of ``host`` (SGLang 0.5.13's sm120 branch: before its early return), so
    the weights are prepacked once, in the branch whose apply calls the grouped kernel.

    Returns (new source, None), or (source unchanged, why not) where the shape of the code does not
    say unambiguously where and from which layer attributes: then the kernel takes the raw tensors
    on every call, as without this edit."""
    from .swap import PREPACK

    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as e:
        raise ReconError(f"cannot parse the dispatch file for the codemod: {e}") from None
    f = _FindLoadSite(scope, host)
    wrapper.visit(f)
    if len(f.calls) != 1:
        return source, f"{len(f.calls)} calls of {host} in {scope} (one expected)"
    if f.guard is None:
        return source, f"the call of {host} is not under an `if <layer>.<attr> == '<backend>'` test"
    recv, attr, value = f.guard
    args = f.calls[0][1]
    attrs = []
    for name in WEIGHT_ARGS:
        v = args.get(name)
        la = _layer_attr(v) if v is not None else None
        if la is None and isinstance(v, cst.Name):
            la = f.bound.get(v.value)
        if la is None or la[0] != recv:
            return source, f"the call's {name} is not read from a `{recv}.<attribute>` in {scope}"
        attrs.append(la[1])
    sets = [s for s in f.sets if s[2] == attr and s[3] == value]
    if len(sets) != 1:
        return source, f"{len(sets)} statements set {attr} = {value!r} in {LOAD_METHOD} (one expected)"
    stmt, layer = sets[0][0], sets[0][1]
    imp = cst.parse_statement(f"from {module} import {PREPACK}\n")
    imp = imp.with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(_prepack_comment()))])
    call = cst.parse_statement(f"{PREPACK}({layer}, {', '.join(repr(a) for a in attrs)})\n")
    t = _InsertAfter(stmt, [imp, call])
    new = wrapper.module.visit(t)
    if t.done != 1:
        return source, f"the statement setting {attr} in {LOAD_METHOD} is not in a block of its own"
    return new.code, None
