"""Text taken from the target (names, paths, code, messages quoting code) made inert for each
output recon writes: a terminal, Markdown, DOT, Mermaid, GraphML.

Every output goes through here, so a file name holding ESC or a newline, a docstring holding
``[click](http://...)`` or a symbol named ``[bold]x`` is shown as text in every one of them, never
as a terminal command, a new line of a graph, a link or an image. Escapes are visible (``\\x1b``),
so what was in the code can still be read.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, the bidirectional overrides and isolates (Trojan Source), zero-width
# and line/paragraph separators, byte-order marks, lone surrogates (a file name that was not
# UTF-8) and the two non-characters XML 1.0 forbids
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff\ufffe\uffff]")


_UNSAFE_ABOVE_C0 = re.compile(_UNSAFE.pattern.replace("\x00-\x1f", "", 1))


def _escape(m: re.Match) -> str:
    o = ord(m.group())
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def inert(s) -> str:
    """``s`` as text with every control, bidi and invisible character shown as an escape."""
    s = s if isinstance(s, str) else str(s)
    return _UNSAFE.sub(_escape, s)


def terminal(s, lines: bool = False) -> str:
    """For Rich: inert, and ``[bold]`` shown as written, not read as markup; ``lines`` keeps the
    line breaks of a text of several lines (a rule's example), each line inert."""
    from rich.markup import escape

    s = s if isinstance(s, str) else str(s)
    return "\n".join(escape(inert(x)) for x in s.split("\n")) if lines else escape(inert(s))


def json_text(text: str) -> str:
    """JSON written with ``ensure_ascii=False``, its C1, bidi and invisible characters as ``\\u``
    escapes (JSON escapes C0 itself): the same document, inert when shown."""
    return _UNSAFE_ABOVE_C0.sub(lambda m: f"\\u{ord(m.group()):04x}", text)  # C0 outside strings is its layout


# --- Markdown ---------------------------------------------------------------------------------

_MD_PUNCT = re.compile(r"([\\`|\[<])")  # what starts a link, image, code span, HTML tag or cell
_SPAN = re.compile(r"`([^`]+)`")  # recon's own messages quote code in single-backtick spans
# what GitHub's Markdown turns into a link even without brackets (extended autolinks)
_AUTOLINK = re.compile(r"(?i)\b(?:[a-z][a-z0-9+.-]*://|www\.)[^\s)\]>]+|[\w.+-]+@[\w-]+\.[\w.-]+")


def md_code(s, cell: bool = False) -> str:
    """A Markdown code span holding ``s`` exactly: fenced by more backticks than the longest run
    inside, padded where it starts or ends with one; in a table cell (``cell``) ``|`` is escaped,
    which GitHub's tables undo inside code spans."""
    s = inert(s)
    longest = max((len(r) for r in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith(("`", " ")) or s.endswith(("`", " ")) else ""
    if cell:
        s = s.replace("|", "\\|")
    return f"{fence}{pad}{s}{pad}{fence}"


def md_text(s) -> str:
    """Markdown text that renders as ``s`` and forms no link, image, HTML or table cell: the
    punctuation that would is backslash-escaped, what GitHub would autolink is a code span, and a
    pair of backticks (how recon's messages quote code) is a code span fenced as :func:`md_code`,
    so no backtick inside a quoted name can end it early."""
    s = inert(s)
    out, last = [], 0
    for m in _SPAN.finditer(s):
        out.append(_plain(s[last:m.start()]))
        out.append(md_code(m.group(1), cell=True))
        last = m.end()
    out.append(_plain(s[last:]))
    return "".join(out)


def _plain(s: str) -> str:
    out, last = [], 0
    for m in _AUTOLINK.finditer(s):
        out.append(_MD_PUNCT.sub(r"\\\1", s[last:m.start()]))
        out.append(md_code(m.group(), cell=True))
        last = m.end()
    out.append(_MD_PUNCT.sub(r"\\\1", s[last:]))
    return "".join(out)


# --- graphs -----------------------------------------------------------------------------------


def dot_string(s) -> str:
    """A quoted DOT string: nothing in it ends the quote or starts a statement. Newlines recon puts
    in a label are passed as separate lines (``lines``) by the caller; see :func:`dot_label`."""
    return '"' + inert(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


def dot_label(lines) -> str:
    """A DOT label of several lines, each inert, joined with DOT's own ``\\n`` escape."""
    return '"' + "\\n".join(inert(x).replace("\\", "\\\\").replace('"', '\\"') for x in lines) + '"'


def mermaid_label(s) -> str:
    """Text for inside a quoted Mermaid label: Mermaid's entity codes for the quote and for the
    characters its HTML labels would read (``<img>``, ``&``), nothing that ends the label."""
    s = inert(s)
    return s.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def xml(s) -> str:
    """Text XML 1.0 can hold: the characters it forbids (C0 controls, U+FFFE/U+FFFF, surrogates)
    shown as escapes; the markup characters are the XML writer's to escape."""
    return inert(s)
