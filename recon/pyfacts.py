"""One pass over one Python file's ``ast`` into :mod:`recon.facts` records.

The whole tree is parsed with the stdlib ``ast`` module (C parser, about ten times faster than
LibCST on SGLang); LibCST is kept for the codemods of ``recon apply``, which need a lossless tree.
Nothing here imports or executes the code it reads.
"""

from __future__ import annotations

import ast
import re
from itertools import accumulate
from typing import Optional

from .facts import FileFacts, from_plain, to_plain

_CMP = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
}
_WRAPPERS = {"partial", "functools.partial", "lru_cache", "functools.lru_cache", "cache", "functools.cache"}
_IDENT_STR = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{1,63}$")
_Name, _Attribute, _Call, _Subscript, _Constant = ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant


_BIG_INT_BITS = 14_000  # repr() of an int past ~4300 digits raises ValueError (CPython's DoS guard)


def const_repr(v) -> str:
    """``repr`` of a constant from untrusted source: a huge int literal (legal Python, e.g. a long
    hex mask) comes back in hex rather than raising."""
    if v.__class__ is int and v.bit_length() > _BIG_INT_BITS:
        return hex(v)
    return repr(v)


def dotted(node: ast.AST) -> str:
    """A short dotted rendering of an expression: enough to resolve names, cheap to compute."""
    t = node.__class__
    if t is _Name:
        return node.id
    if t is _Attribute:
        v = node.value
        if v.__class__ is _Name:  # a.b: most of them, one call less
            return f"{v.id}.{node.attr}"
        return f"{dotted(v)}.{node.attr}"
    if t is _Call:
        return f"{dotted(node.func)}()"
    if t is _Subscript:
        return f"{dotted(node.value)}[]"
    if t is _Constant:
        return const_repr(node.value)
    return "?"


def _literal(node: ast.AST) -> Optional[str]:
    """Source of a literal (constants, tuples/lists of constants), else None."""
    t = type(node)
    if t is ast.Constant:
        return const_repr(node.value)
    if t in (ast.List, ast.Tuple):
        parts = [_literal(e) for e in node.elts]
        if None in parts:
            return None
        body = ", ".join(parts)
        return f"[{body}]" if t is ast.List else f"({body}{',' if len(parts) == 1 else ''})"
    if t is ast.UnaryOp and type(node.op) is ast.USub and type(node.operand) is ast.Constant:
        v = node.operand.value
        # `-"a"` parses (it fails only when run): only a number has a negative literal
        return const_repr(-v) if isinstance(v, (int, float, complex)) else None
    return None


def _short_unparse(node: ast.AST, limit: int = 160) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # pragma: no cover - unparse handles every node ast.parse makes
        return dotted(node)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _resolve_relative(module: str, is_package: bool, level: int, target: Optional[str]) -> str:
    if level == 0:
        return target or ""
    parts = module.split(".") if module else []
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)] if level - 1 <= len(parts) else []
    if target:
        parts.append(target)
    return ".".join(parts)


def _unwrap_callable(node: ast.AST):
    """For ``lru_cache(maxsize=1)(partial(f, k=v))`` and kin: the wrapped callable and bound kwargs."""
    kwargs: list = []
    seen_wrapper = False
    while type(node) is ast.Call:
        func = node.func
        name = dotted(func)
        if type(func) is ast.Call and dotted(func.func) in _WRAPPERS:
            # decorator factory applied: lru_cache(maxsize=1)(inner)
            seen_wrapper = True
            if not node.args:
                return None
            node = node.args[0]
            continue
        if name in _WRAPPERS:
            seen_wrapper = True
            for kw in node.keywords:
                if kw.arg is not None:
                    lit = _literal(kw.value)
                    kwargs.append((kw.arg, lit if lit is not None else _short_unparse(kw.value, 80)))
            if not node.args:
                return None
            node = node.args[0]
            continue
        return None
    if not seen_wrapper or type(node) not in (ast.Name, ast.Attribute):
        return None
    return dotted(node), tuple(kwargs)


# -- the walk ---------------------------------------------------------------------------------
# Each node class gets a function that visits exactly its child-node fields (generated once from
# the class's field list), so the walk does no per-node loop over field names, no getattr and no
# isinstance. Fields that can hold no node (``ctx``, names, numbers, operators) are left out.
_NODE_TYPE_NAMES = frozenset(n for n, v in vars(ast).items() if isinstance(v, type) and issubclass(v, ast.AST))
_LEAF_FIELDS = frozenset({"ctx", "op", "ops"})  # contexts and operators: singletons with nothing inside
_FIELD_SPEC = re.compile(r"(\w+)([*?]?) (\w+)")


def _child_fields(cls) -> Optional[list]:
    """[(field, is_list), ...] of the fields of ``cls`` that can hold nodes; None when unknown."""
    doc = cls.__doc__ or ""
    spec = {name: (typ, mark) for typ, mark, name in _FIELD_SPEC.findall(doc[doc.find("(") + 1 :])} if "(" in doc else {}
    out = []
    for f in cls._fields:
        if f not in spec:
            return None
        typ, mark = spec[f]
        if f in _LEAF_FIELDS or typ not in _NODE_TYPE_NAMES:
            continue
        out.append((f, mark == "*"))
    return out


def _generic(c, node):
    """The walk for a class whose fields could not be read from its signature: slower, same result."""
    for f in node._fields:
        if f in _LEAF_FIELDS:
            continue
        v = getattr(node, f, None)
        for item in v if v.__class__ is list else (v,):
            fn = _VISIT[item.__class__]
            if fn is not None:
                fn(c, item)


def _make_walker(cls):
    fields = _child_fields(cls)
    if fields is None:
        return _generic
    if not fields:
        return None
    lines = ["def walk(c, node):"]
    for f, is_list in fields:
        if is_list:
            lines += [f"    for v in node.{f}:", "        fn = V[v.__class__]", "        if fn is not None:", "            fn(c, v)"]
        else:
            lines += [f"    v = node.{f}", "    fn = V[v.__class__]", "    if fn is not None:", "        fn(c, v)"]
    ns = {"V": _VISIT}
    exec("\n".join(lines), ns)  # noqa: S102 - code built here from the ast module's own field lists
    return ns["walk"]


class _Table(dict):
    """class -> function(collector, node) or None, filled on first sight of a class."""

    def __init__(self, make):
        super().__init__()
        self._make = make

    def __missing__(self, cls):
        fn = self[cls] = self._make(cls) if isinstance(cls, type) and issubclass(cls, ast.AST) else None
        return fn


_WALK = _Table(_make_walker)  # class -> visit its children (what a handler calls after its own work)
_HANDLERS: dict = {}  # class -> handler, filled below
_VISIT = _Table(lambda cls: _HANDLERS.get(cls) or _WALK[cls])  # class -> handler, else the walk


def _test_names(node, out: list) -> None:
    """Dotted names and calls a branch test refers to, through and/or/not/comparisons."""
    t = node.__class__
    if t is ast.Name or t is ast.Attribute or t is ast.Call:
        out.append(dotted(node))
        if t is ast.Call:
            for a in node.args:
                _test_names(a, out)
    elif t is ast.BoolOp:
        for v in node.values:
            _test_names(v, out)
    elif t is ast.UnaryOp:
        _test_names(node.operand, out)
    elif t is ast.Compare:
        _test_names(node.left, out)
        for c in node.comparators:
            _test_names(c, out)


class _Collector:
    """Collects one module's facts as plain tuples, laid out as the records of :mod:`recon.facts`."""

    def visit(self, node):
        fn = _VISIT[node.__class__]
        if fn is not None:
            fn(self, node)

    def _seg(self, node, limit: int) -> str:
        """The node's own source text (sliced by offsets: ten times cheaper than ``ast.unparse``)."""
        starts = self.starts
        if starts is None:
            src = self.src
            starts = self.starts = [0, *accumulate(map(len, src.splitlines(keepends=True)))] if src else []
        try:
            a = starts[node.lineno - 1] + node.col_offset
            b = starts[node.end_lineno - 1] + node.end_col_offset
            text = self.src[a:b].decode("utf-8")
        except (IndexError, TypeError, UnicodeDecodeError, AttributeError):
            return _short_unparse(node, limit)
        if node.lineno != node.end_lineno:
            if "#" in text or '"""' in text or "\'\'\'" in text:
                return _short_unparse(node, limit)  # a comment or long string would break a joined line
            text = " ".join(text.split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def __init__(self, module: str, is_package: bool, src: bytes = b""):
        if src.startswith(b"\xef\xbb\xbf"):  # offsets count from after a UTF-8 BOM
            src = src[3:]
        self.src = src
        self.starts = None  # offsets of line starts, computed when a source slice is first needed
        self.module = module
        self.is_package = is_package
        self.scope: list[str] = []
        self.cur = ""  # qualified name of the enclosing definition, "" at module level
        self.defs: list = []
        self.imports: list = []
        self.calls: list = []
        self.assigns: list = []
        self.compares: list = []
        self.fstrings: list = []
        self.launches: list = []
        self.branches: list = []
        self.loops: list = []
        self.withs: list = []
        self.subscripts: list = []
        self.strings: list = []
        self.refs: list = []

    # -- scopes -----------------------------------------------------------------------------
    def _enter(self, name: str) -> None:
        self.scope.append(name)
        self.cur = ".".join(self.scope)  # read for every record: kept, not recomputed

    def _leave(self) -> None:
        self.scope.pop()
        self.cur = ".".join(self.scope)

    def _qual(self, name: str) -> str:
        return f"{self.cur}.{name}" if self.scope else name

    def _function(self, node):
        a = node.args
        params = tuple(p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs))
        decos = tuple(dotted(d) for d in node.decorator_list)
        self.defs.append(("function", self._qual(node.name), node.lineno, node.end_lineno, decos, (), params, None, (), ()))
        for d in node.decorator_list:
            self.visit(d)
        for d in (*a.defaults, *a.kw_defaults):
            if d is not None:
                self.visit(d)
        self._enter(node.name)
        for stmt in node.body:
            self.visit(stmt)
        self._leave()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node):
        decos = tuple(dotted(d) for d in node.decorator_list)
        bases = tuple(dotted(b) for b in node.bases)
        self.defs.append(("class", self._qual(node.name), node.lineno, node.end_lineno, decos, bases, (), None, (), ()))
        for d in node.decorator_list:
            self.visit(d)
        self._enter(node.name)
        for stmt in node.body:
            self.visit(stmt)
        self._leave()

    # -- imports ----------------------------------------------------------------------------
    def visit_Import(self, node):
        for alias in node.names:
            if alias.asname:
                self.imports.append((self.cur, alias.asname, alias.name, None, node.lineno))
            else:
                top = alias.name.split(".")[0]
                self.imports.append((self.cur, top, top, None, node.lineno))

    def visit_ImportFrom(self, node):
        mod = _resolve_relative(self.module, self.is_package, node.level, node.module)
        for alias in node.names:
            if alias.name == "*":
                self.imports.append((self.cur, "*", mod, "*", node.lineno))
                continue
            self.imports.append((self.cur, alias.asname or alias.name, mod, alias.name, node.lineno))

    # -- statements -------------------------------------------------------------------------
    def _assign_value(self, value):
        t = type(value)
        if t is ast.Constant:
            return const_repr(value.value), "const"
        if t in (ast.Name, ast.Attribute):
            return dotted(value), "name"
        if t is ast.Call:
            return dotted(value), "call"
        if t in (ast.List, ast.Tuple) and value.elts and all(type(e) in (ast.Name, ast.Attribute) for e in value.elts):
            return ",".join(dotted(e) for e in value.elts), "names"
        if t is ast.IfExp and type(value.body) in (ast.Name, ast.Attribute) and type(value.orelse) in (ast.Name, ast.Attribute):
            # X = CudaX if _is_cuda else OtherX: a conditional alias (the branch taken first, then the other)
            return f"{dotted(value.body)}|{dotted(value.orelse)}", "choice"
        return "", "other"

    def visit_Assign(self, node):
        value = node.value
        wrapped = None
        if value.__class__ is _Call:
            func = value.func
            callee = dotted(func)
            # only a wrapper (partial, lru_cache, ...) or a wrapper factory's result makes a callable
            if callee in _WRAPPERS or (func.__class__ is _Call and dotted(func.func) in _WRAPPERS):
                wrapped = _unwrap_callable(value)
            v, kind = f"{callee}()", "call"  # what _assign_value gives a call
        else:
            v, kind = self._assign_value(value)
        names = [dotted(t) for t in node.targets]
        if wrapped is not None:
            simple = [n for n in names if "." not in n and "[" not in n]
            for n in simple:
                aliases = tuple(self._qual(o) for o in simple if o != n)
                self.defs.append(("callable_assign", self._qual(n), node.lineno, node.end_lineno, (), (), (), wrapped[0], wrapped[1], aliases))
        in_function = bool(self.scope)
        for n in names:
            # inside functions only constants and attribute stores matter (backend strings,
            # self.x = Layer(...)); plain locals bound to expressions are most of the volume
            if in_function and kind != "const" and "." not in n:
                continue
            self.assigns.append((self.cur, n, v, kind, node.lineno))
        # chained aliases: a = b = value  -> a and b are the same object
        self.visit(value)
        for t in node.targets:
            if type(t) is not ast.Name:
                self.visit(t)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            v, kind = self._assign_value(node.value)
            self.assigns.append((self.cur, dotted(node.target), v, kind, node.lineno))
            self.visit(node.value)

    def visit_If(self, node):
        names: list = []
        _test_names(node.test, names)
        body_end = node.body[-1].end_lineno if node.body else node.lineno
        else_line = node.orelse[0].lineno if node.orelse else 0
        self.branches.append(
            (self.cur, node.lineno, body_end, else_line, node.end_lineno, tuple(dict.fromkeys(names)), self._seg(node.test, 400))
        )
        _walk_If(self, node)

    def visit_For(self, node):
        self.loops.append((self.cur, node.lineno, node.end_lineno, dotted(node.target), self._seg(node.iter, 120)))
        _WALK[node.__class__](self, node)

    visit_AsyncFor = visit_For

    def visit_While(self, node):
        self.loops.append((self.cur, node.lineno, node.end_lineno, "", self._seg(node.test, 120)))
        _walk_While(self, node)

    def visit_With(self, node):
        self.withs.append((self.cur, tuple(dotted(i.context_expr) for i in node.items), node.lineno, node.end_lineno))
        _WALK[node.__class__](self, node)

    visit_AsyncWith = visit_With

    # -- expressions ------------------------------------------------------------------------
    def visit_Call(self, node):
        func = node.func
        fc = func.__class__
        if fc is _Subscript:
            # kernel[grid](...): a Triton launch
            self.launches.append((self.cur, dotted(func.value), self._seg(func.slice, 200), node.lineno))
        keywords = node.keywords
        kwargs = []
        for kw in keywords:
            if kw.arg is not None:
                v = kw.value
                lit = const_repr(v.value) if v.__class__ is _Constant else _literal(v)
                kwargs.append((kw.arg, lit if lit is not None else dotted(v)))
        args = node.args
        self.calls.append(
            (self.cur, dotted(func), node.lineno, node.end_lineno, tuple(kwargs), tuple([dotted(a) for a in args if a.__class__ in _ARG_TYPES]))
        )
        # the walk of a Call (func, args, keywords' values), inlined
        if fc is not _Name:
            fn = _VISIT[fc]
            if fn is not None:
                fn(self, func)
        for v in args:
            fn = _VISIT[v.__class__]
            if fn is not None:
                fn(self, v)
        for kw in keywords:
            v = kw.value
            fn = _VISIT[v.__class__]
            if fn is not None:
                fn(self, v)

    def visit_Compare(self, node):
        if len(node.ops) == 1:
            right = node.comparators[0]
            lt, rt = type(node.left), type(right)
            if rt is ast.Constant and lt is not ast.Constant:
                self.compares.append((self.cur, dotted(node.left), _CMP.get(type(node.ops[0]), "?"), const_repr(right.value), node.lineno))
            elif rt in (ast.Tuple, ast.List, ast.Set) and lt is not ast.Constant:
                lit = _literal(right) if rt is not ast.Set else _literal(ast.Tuple(elts=right.elts))
                if lit is not None:
                    self.compares.append((self.cur, dotted(node.left), _CMP.get(type(node.ops[0]), "?"), lit, node.lineno))
            elif lt is ast.Constant and rt is not ast.Constant:
                self.compares.append((self.cur, dotted(right), _CMP.get(type(node.ops[0]), "?"), const_repr(node.left.value), node.lineno))
        _walk_Compare(self, node)

    def visit_JoinedStr(self, node):
        parts = []
        for v in node.values:
            if type(v) is ast.Constant:
                parts.append(str(v.value))
            elif type(v) is ast.FormattedValue:
                parts.append("{" + dotted(v.value) + "}")
        text = "".join(parts)
        if "=" in text or ".json" in text:
            self.fstrings.append((self.cur, text, node.lineno))
        _walk_JoinedStr(self, node)

    def visit_Subscript(self, node):
        sl = node.slice
        t = type(sl)
        if t is ast.Compare or (t is ast.Name and sl.id.lower().endswith("mask")) or (
            t is ast.UnaryOp and type(sl.op) is ast.Invert
        ):
            self.subscripts.append((self.cur, dotted(node.value), self._seg(sl, 80), node.lineno))
        _walk_Subscript(self, node)

    def visit_Constant(self, node):
        v = node.value
        if v.__class__ is str and len(v) < 65 and _ident_str(v):
            self.strings.append((node.lineno, v))

    def visit_Attribute(self, node):
        if node.attr == "forward":
            self.refs.append((self.cur, dotted(node), node.lineno))
        value = node.value
        while value.__class__ is _Attribute:  # walk a.b.c.d without a dispatch per link
            if value.attr == "forward":
                self.refs.append((self.cur, dotted(value), value.lineno))
            value = value.value
        if value.__class__ is not _Name:
            fn = _VISIT[value.__class__]
            if fn is not None:
                fn(self, value)


_ARG_TYPES = (ast.Name, ast.Attribute, ast.Constant)
_ident_str = _IDENT_STR.match
_HANDLERS.update(
    {getattr(ast, name[len("visit_") :]): fn for name, fn in vars(_Collector).items() if name.startswith("visit_") and hasattr(ast, name[len("visit_") :])}
)
_VISIT[ast.Name] = None  # a bare name records nothing (a third of all nodes)
for _cls in (ast.Global, ast.Nonlocal, ast.Pass, ast.Break, ast.Continue):
    _VISIT[_cls] = None
_walk_If, _walk_While, _walk_Compare, _walk_JoinedStr, _walk_Subscript = (
    _WALK[c] for c in (ast.If, ast.While, ast.Compare, ast.JoinedStr, ast.Subscript)
)


def internal_error(stage: str, e: BaseException) -> str:
    """The diagnostic for a failure of recon's own code on one file (the fuzz tests look for it)."""
    return f"internal error while {stage}: {type(e).__name__}: {str(e)[:120]}"


def module_name(relpath: str) -> tuple[str, bool]:
    """Dotted module for a path relative to the folder that holds the top-level package."""
    parts = relpath[:-3].split("/") if relpath.endswith(".py") else relpath.split("/")
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def extract(relpath: str, module: str, is_package: bool, source: bytes, digest: str) -> FileFacts:
    """Parse ``source`` and collect its facts; a file that does not parse becomes a diagnostic."""
    return from_plain(extract_plain(relpath, module, is_package, source, digest))


def extract_plain(relpath: str, module: str, is_package: bool, source: bytes, digest: str) -> tuple:
    """:func:`extract` as nested plain tuples (:func:`recon.facts.to_plain`): what the workers
    ship and the store keeps, made without building a record object per fact."""
    lines = source.count(b"\n") + 1
    try:
        tree = ast.parse(source, filename=relpath)
    except SyntaxError as e:
        return to_plain(FileFacts(relpath, module, "py", digest, lines, f"does not parse: {e.msg} (line {e.lineno})"))
    except (ValueError, UnicodeDecodeError) as e:
        return to_plain(FileFacts(relpath, module, "py", digest, lines, f"cannot be decoded: {e}"))
    except (RecursionError, MemoryError):
        return to_plain(FileFacts(relpath, module, "py", digest, lines, "too deeply nested to parse"))
    c = _Collector(module, is_package, source if isinstance(source, bytes) else source.encode("utf-8"))
    try:
        for stmt in tree.body:
            c.visit(stmt)
    except RecursionError:
        return to_plain(FileFacts(relpath, module, "py", digest, lines, "too deeply nested to index"))
    except Exception as e:  # noqa: BLE001 - a bug of ours on one odd file must not end the run
        return to_plain(FileFacts(relpath, module, "py", digest, lines, internal_error("indexing", e)))
    return (
        relpath,
        module,
        "py",
        digest,
        lines,
        None,
        tuple(c.defs),
        tuple(c.imports),
        tuple(c.calls),
        tuple(c.assigns),
        tuple(c.compares),
        tuple(c.fstrings),
        tuple(c.launches),
        tuple(c.branches),
        tuple(c.loops),
        tuple(c.withs),
        tuple(c.subscripts),
        tuple(c.strings),
        (),
        tuple(c.refs),
    )
