"""Arithmetic on values read from untrusted source, refusing results no shape or capability has.

The evaluators (arch gates, launch grids, epilogue shapes) compute with literals taken from the
code they read. ``BLOCK = 10 ** 10 ** 10``, ``x = "a" * 10 ** 9`` or a chain of squarings is legal
Python that would make recon hang or exhaust memory; here it raises :class:`TooLarge` (an
``ArithmeticError``, which every evaluator already turns into "unknown") before the work is done.
"""

from __future__ import annotations

import ast
import operator
import re

MAX_INT_BITS = 256  # a shape, a grid, a capability: far below this
MAX_LEN = 1 << 16  # a string, list or tuple an evaluator builds


class TooLarge(ArithmeticError):
    pass


def _bits(v) -> int:
    return v.bit_length() if isinstance(v, int) else 0


def _seq_len(v) -> int:
    return len(v) if isinstance(v, (str, bytes, list, tuple)) else 0


def mul(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if _bits(a) + _bits(b) > MAX_INT_BITS:
            raise TooLarge("product too large")
    elif isinstance(a, int) or isinstance(b, int):  # sequence * count
        n, seq = (a, b) if isinstance(a, int) else (b, a)
        if _seq_len(seq) * max(n, 0) > MAX_LEN:
            raise TooLarge("repetition too long")
    return a * b


def add(a, b):
    if _seq_len(a) + _seq_len(b) > MAX_LEN:
        raise TooLarge("concatenation too long")
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
    if isinstance(a, (str, bytes)) and _WIDE_FORMAT.search(a if isinstance(a, str) else a.decode("latin-1")):
        raise TooLarge("string format too wide")  # "%0999999999d" % 1 builds a gigabyte
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
