"""Plain per-file facts: what one pass over one file records.

Every record is a small NamedTuple so that the index pickles compactly and a check reads
``fact.line`` rather than ``fact[3]``. ``scope`` is the qualified name of the enclosing
definition relative to its module (``"Mxfp4MarlinMoEMethod.apply"``), ``""`` at module level.
Expressions are kept as *dotted strings*: ``self.quant_method.apply``, ``torch.ops.sgl_kernel.x``,
``lru_cache()`` for a call result, ``kernel[]`` for a subscript.
"""

from __future__ import annotations

from typing import NamedTuple, Optional


class Def(NamedTuple):
    kind: str  # "function" | "class" | "callable_assign"
    qualname: str  # relative to the module: "Class.method", "outer.inner"
    line: int
    end_line: int
    decorators: tuple  # dotted decorator expressions, outermost first
    bases: tuple  # class bases as dotted strings (classes only)
    params: tuple  # parameter names (functions only)
    wraps: Optional[str]  # callable_assign: the dotted callable it wraps (partial(f) -> "f")
    wrap_kwargs: tuple  # callable_assign: ((key, literal source), ...) bound by partial()
    aliases: tuple  # callable_assign: other names bound by the same statement (a = b = ...)


class Import(NamedTuple):
    scope: str
    local: str  # name bound in scope
    module: str  # absolute module imported from
    name: Optional[str]  # imported attribute, None for "import x.y"
    line: int


class Call(NamedTuple):
    scope: str
    func: str  # dotted callee
    line: int
    end_line: int
    kwargs: tuple  # ((key, literal source), ...) for constant keyword arguments
    args: tuple  # dotted source of positional arguments that are names/attributes/constants


class Assign(NamedTuple):
    scope: str
    target: str  # dotted target ("layer._dsv4_mxfp4_backend", "x")
    value: str  # dotted value, repr of a constant, comma-joined names of a list/tuple,
    #             "a|b" for a conditional alias (a if cond else b), or ""
    value_kind: str  # "const" | "name" | "call" | "names" | "choice" | "other"
    line: int


class Compare(NamedTuple):
    scope: str
    left: str  # dotted
    op: str  # "==", "!=", "in", "not in", ">=", ...
    const: str  # repr of the constant compared against
    line: int


class FString(NamedTuple):
    scope: str
    template: str  # literal parts kept, fields as {expr}
    line: int


class Launch(NamedTuple):
    scope: str
    kernel: str  # dotted kernel expression
    grid: str  # grid expression source
    line: int


class Branch(NamedTuple):
    scope: str
    line: int  # line of the test
    body_end: int  # last line of the true branch
    else_line: int  # first line of the else branch, 0 when none
    end_line: int  # last line of the whole statement
    names: tuple  # dotted names and calls the test refers to
    test: str  # test source, shortened


class Loop(NamedTuple):
    scope: str
    line: int
    end_line: int
    target: str
    iter: str


class With(NamedTuple):
    scope: str
    ctx: tuple  # dotted context-manager expressions
    line: int
    end_line: int


class Subscript(NamedTuple):
    """``x[mask]`` where the index is a comparison or a name ending in ``mask``: a data-dependent shape."""

    scope: str
    value: str
    index: str
    line: int


class FileFacts(NamedTuple):
    path: str  # relative to the target root, forward slashes
    module: str  # dotted module name, "" when the file is not in a package
    kind: str  # "py" | "json" | "cpp"
    digest: str
    lines: int
    error: Optional[str]  # diagnostic when the file could not be read or parsed
    defs: tuple = ()
    imports: tuple = ()
    calls: tuple = ()
    assigns: tuple = ()
    compares: tuple = ()
    fstrings: tuple = ()
    launches: tuple = ()
    branches: tuple = ()
    loops: tuple = ()
    withs: tuple = ()
    subscripts: tuple = ()
    strings: tuple = ()  # (line, value) of short string constants that look like identifiers
    ops: tuple = ()  # C++/CUDA: ((op name, line), ...) registered with torch or pybind
    refs: tuple = ()  # (scope, dotted, line) of references to ``*.forward``, called or passed along


# Record type of each FileFacts field that holds records; the rest hold plain tuples.
_RECORDS = {
    "defs": Def,
    "imports": Import,
    "calls": Call,
    "assigns": Assign,
    "compares": Compare,
    "fstrings": FString,
    "launches": Launch,
    "branches": Branch,
    "loops": Loop,
    "withs": With,
    "subscripts": Subscript,
}
_FIELD_TYPES = tuple(_RECORDS.get(name) for name in FileFacts._fields)


def to_plain(f: FileFacts) -> tuple:
    """Nested plain tuples (marshal-able, several times faster to store and load than records)."""
    return tuple(tuple(map(tuple, v)) if t is not None else v for v, t in zip(f, _FIELD_TYPES))


def from_plain(t: tuple) -> FileFacts:
    return FileFacts._make(tuple(map(rt._make, v)) if rt is not None else v for v, rt in zip(t, _FIELD_TYPES))
