"""Arithmetic on values read from untrusted source, refusing results no shape or capability has.

The evaluators (arch gates, launch grids, epilogue shapes) compute with literals taken from the
code they read. ``BLOCK = 10 ** 10 ** 10``, ``x = "a" * 10 ** 9`` or a chain of squarings is legal
Python that would make recon hang or exhaust memory; here it raises :class:`TooLarge` (an
``ArithmeticError``, which every evaluator already turns into "unknown") before the work is done.
"""

from __future__ import annotations

import ast
import itertools
import operator
import re

MAX_INT_BITS = 256  # a shape, a grid, a capability: far below this
MAX_LEN = 1 << 16  # a string, list or tuple an evaluator builds
# what the text of any value an evaluator holds may take (an estimate of ``len(repr(v))``, every
# reference counted where it occurs: ``["a" * 65536] * 65536`` is 4 GB of text, not 65537 objects)
MAX_SIZE = 1 << 18
MAX_DEPTH = 32  # containers in containers: a gate's tables nest two or three deep


class TooLarge(ArithmeticError):
    pass


# id -> (the value, kept so its id stays its own; its length; its size). The evaluators never
# change a value they hold in place; the length is a guard against a list grown elsewhere.
_REMEMBERED: dict[int, tuple[object, int, int]] = {}
_REMEMBER_AT = 256  # containers this long keep their size: re-walking them per operation is the cost
_REMEMBER_MAX = 64


def size(v, limit: int = MAX_SIZE) -> int:
    """An upper estimate of the text ``repr(v)`` would build (escapes aside), counting a shared
    element at every place it occurs; :class:`TooLarge` as soon as it passes ``limit``, so the
    walk itself visits at most about ``limit / 2`` places."""
    return _size(v, limit, 0, {})


def _size(v, limit, depth, memo) -> int:
    if isinstance(v, (str, bytes, bytearray)):
        n = len(v) + 3
    elif isinstance(v, bool) or v is None:
        return 5
    elif isinstance(v, int):
        n = v.bit_length() * 3 // 10 + 3
    elif isinstance(v, (float, complex)):
        return 48
    elif isinstance(v, (list, tuple, set, frozenset, dict)):
        key = id(v)
        if key in memo:
            n = memo[key]
        elif (hit := _REMEMBERED.get(key)) is not None and hit[0] is v and hit[1] == len(v):
            n = hit[2]
        else:
            if depth >= MAX_DEPTH:
                raise TooLarge("nested too deep")
            n = 2
            # a dict's keys and values, not its item pairs: those are temporaries, and a freed
            # pair's id taken by the next one would find the first one's size in the memo
            for e in (itertools.chain(v.keys(), v.values()) if isinstance(v, dict) else v):
                n += _size(e, limit, depth + 1, memo) + 2
                if n > limit:
                    raise TooLarge("value too large")
            memo[key] = n
            if len(v) >= _REMEMBER_AT:
                if len(_REMEMBERED) >= _REMEMBER_MAX:
                    _REMEMBERED.pop(next(iter(_REMEMBERED)))
                _REMEMBERED[key] = (v, len(v), n)
    else:
        return 64  # one of the engine's own values (a reference, an enum member): its repr is a name
    if n > limit:
        raise TooLarge("value too large")
    return n


def check(v):
    """``v`` itself when its size is within :data:`MAX_SIZE`, else :class:`TooLarge`."""
    size(v)
    return v


def build(kind, items):
    """``kind(items)`` (tuple, list, set, frozenset) of values already held, refused before it is
    built when their sizes add up past :data:`MAX_SIZE` (``(x, x, x, x)`` of a large ``x``)."""
    items = items if isinstance(items, (list, tuple)) else list(items)
    total = 2
    for e in items:
        total += size(e) + 2
        if total > MAX_SIZE:
            raise TooLarge("value too large")
    return kind(items)


def build_dict(pairs):
    """A dict of (key, value) pairs, bounded as :func:`build`."""
    pairs = list(pairs)
    build(tuple, pairs)
    return dict(pairs)


def text(fn, *args):
    """``str(x)`` / ``repr(x)`` / ``format(x)`` of a value, refused before it is built when the value's
    text would pass :data:`MAX_SIZE` (``str(["a" * 65536] * 65536)``)."""
    for a in args:
        size(a)
    return fn(*args)


def str_(*args, **kwargs):
    """The builtin ``str`` for an evaluator: the text of a held value, bounded (:func:`text`)."""
    if kwargs or len(args) > 1:  # str(b, "utf-8"): a decode, as long as its input
        size(args[0]) if args else None
        return str(*args, **kwargs)
    return text(str, *args) if args else ""


def join(sep: str, items) -> str:
    """``sep.join(items)``, bounded before it is built."""
    items = list(items)
    total = size(sep) * len(items) + size(items)
    if total > MAX_SIZE:
        raise TooLarge("join too long")
    return sep.join(items)


def copy(kind):
    """A container constructor (``list``, ``tuple``, ``set``, ``sorted``...) for an evaluator: the
    copy of a held value is as large as it, except a string spread into one-character strings
    (each a separate text, six times its one character) and a lazy ``map``, measured as it is built."""
    def make(*args, **kwargs):
        if args and isinstance(args[0], (str, bytes)) and 6 * len(args[0]) > MAX_SIZE:
            raise TooLarge("value too large")
        return check(kind(*args, **kwargs))
    make.__name__ = getattr(kind, "__name__", "copy")
    return make


def _bits(v) -> int:
    return v.bit_length() if isinstance(v, int) else 0


def _seq_len(v) -> int:
    return len(v) if isinstance(v, (str, bytes, list, tuple)) else 0


def _sized(v) -> bool:
    return isinstance(v, (str, bytes, list, tuple, set, frozenset, dict))


def mul(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if _bits(a) + _bits(b) > MAX_INT_BITS:
            raise TooLarge("product too large")
    elif isinstance(a, int) or isinstance(b, int):  # sequence * count
        n, seq = (a, b) if isinstance(a, int) else (b, a)
        if _seq_len(seq) * max(n, 0) > MAX_LEN:
            raise TooLarge("repetition too long")
        if _sized(seq) and size(seq) * max(n, 0) > MAX_SIZE:  # the elements count at every repetition
            raise TooLarge("repetition too large")
    return a * b


def add(a, b):
    if _seq_len(a) + _seq_len(b) > MAX_LEN:
        raise TooLarge("concatenation too long")
    if _sized(a) and _sized(b) and size(a) + size(b) > MAX_SIZE:
        raise TooLarge("concatenation too large")
    return a + b


def pow_(a, b):
    if isinstance(a, int) and isinstance(b, int) and b > 0 and _bits(a) * b > MAX_INT_BITS and abs(a) > 1:
        raise TooLarge("power too large")
    return a**b


def lshift(a, b):
    if isinstance(b, int) and b > MAX_INT_BITS:
        raise TooLarge("shift too large")
    return a << b


_WIDE_FORMAT = re.compile(r"%[-+ #0]*(\*|\d{4,})|%[-+ #0]*\d*\.(\*|\d{4,})")


def mod(a, b):
    if isinstance(a, (str, bytes)):
        if _WIDE_FORMAT.search(a if isinstance(a, str) else a.decode("latin-1")):
            raise TooLarge("string format too wide")  # "%0999999999d" % 1 builds a gigabyte
        # each conversion is at most its argument's text or a width of three digits
        if size(a) + size(b) + 1000 * a.count("%" if isinstance(a, str) else b"%") > MAX_SIZE:
            raise TooLarge("string format too large")
    return a % b


def replace(s: str, old: str, new: str, *count):
    """``str.replace`` whose result is bounded before it is built (``"".replace("", s)`` grows)."""
    n = s.count(old) if old else len(s) + 1
    if len(s) + n * max(0, len(new) - len(old)) > MAX_LEN:
        raise TooLarge("replacement too long")
    return s.replace(old, new, *count)


# A number this long in the text may be an int that ``repr``/``ast.unparse`` refuse (> 4300 digits)
_LONG_NUMBER = re.compile(r"[0-9][0-9a-fA-F_xXoObB]{3000,}")
_REPR_BITS = 14_000
HUGE_INT_NAME = "__recon_huge_int__"


def parse(text, mode: str = "exec") -> ast.AST:
    """``ast.parse`` of untrusted source for the checks: every failure is a ``SyntaxError``
    (nesting too deep for the parser included), and an int literal too long for ``repr`` is
    replaced by the name :data:`HUGE_INT_NAME`, which every evaluator treats as unknown, so
    ``ast.unparse`` and the messages built from it never fail on it."""
    try:
        tree = ast.parse(text, mode=mode)
    except (RecursionError, MemoryError, ValueError) as e:
        raise SyntaxError(f"cannot be parsed: {type(e).__name__}") from None
    if _LONG_NUMBER.search(text if isinstance(text, str) else text.decode("latin-1")):
        _HugeInts().visit(tree)
    return tree


class _HugeInts(ast.NodeTransformer):
    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, int) and v.bit_length() > _REPR_BITS:
            return ast.copy_location(ast.Name(id=HUGE_INT_NAME, ctx=ast.Load()), node)
        return node


ADD, SUB, MUL, FLOORDIV, MOD, POW, LSHIFT = add, operator.sub, mul, operator.floordiv, mod, pow_, lshift
