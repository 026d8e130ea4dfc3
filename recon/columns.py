"""Text for people at 100 columns: every line recon prints off a terminal (a pipe, a file, a CI log)
is folded to at most :data:`WIDTH` characters, except a one-line error (``error: ...``), kept
whole.

A folded line keeps its indentation, and a list item (``- ``, ``<- ``, ``otherwise, if``...) goes on
under its text, so a list stays a list and never becomes a paragraph. Lines break at spaces; a
single word longer than the width (a long path) is cut at a ``/``, ``.`` or ``,`` where it has one,
else hard. On a terminal Rich already wraps to the window, so nothing here runs there.

Markdown has its own folding (:func:`markdown`): prose and list items fold at spaces, table rows,
fenced blocks and headings are left whole (a table row cannot be folded without breaking the table).
"""

from __future__ import annotations

import re

WIDTH = 100

# a list marker after the indentation: "- ", "* ", "1. ", "<- ", "== "
# lines kept whole at any width: an error is one line, so a script (or a person's grep) reads
# all of it from the line that starts with "error: " (the exit-code table's contract)
_WHOLE = ("error: ",)
_MARKER = re.compile(r"^(\s*)((?:[-*+]|\d+\.|<-|==|!!|\?\?)\s+)?")


def fold(line: str, width: int = WIDTH) -> list[str]:
    """``line`` as lines of at most ``width`` characters (continuations indented under its text)."""
    if len(line) <= width or line.startswith(_WHOLE):
        return [line]
    m = _MARKER.match(line)
    lead = m.group(1) or ""
    hang = " " * (len(lead) + len(m.group(2) or "") + (0 if m.group(2) else 2))
    if len(hang) > width // 2:
        hang = " " * 4
    out: list[str] = []
    cur = lead
    body = line[len(lead):]
    for word in body.split(" "):
        if not word:
            word = ""
        room = width - len(cur) - (1 if cur.strip() else 0)
        if len(word) <= room:
            cur = (cur + " " + word) if cur.strip() else cur + word
            continue
        if len(hang) + len(word) > width and room > 20:
            # one word longer than a line (a long path): it starts on this line, cut at a joint
            cut = _cut(word, room)
            out.append((cur + " " if cur.strip() else cur) + word[:cut])
            word = word[cut:]
        elif cur.strip():
            out.append(cur)
        cur = hang
        while len(hang) + len(word) > width:  # the rest still longer than a line: cut again
            cut = _cut(word, width - len(hang))
            out.append(hang + word[:cut])
            word = word[cut:]
        cur = hang + word
    if cur.strip():
        out.append(cur)
    return [x.rstrip() for x in out]


def _cut(word: str, room: int) -> int:
    for sep in "/.,:;":
        i = word.rfind(sep, room // 3, room)
        if i > 0:
            return i + 1
    return room


def fold_all(lines, width: int = WIDTH) -> list[str]:
    return [x for line in lines for x in fold(line, width)]


def fold_text(text: str, width: int = WIDTH) -> str:
    """A block of text (lines ending in newlines) folded line by line."""
    end = "\n" if text.endswith("\n") else ""
    return "\n".join(fold_all(text.rstrip("\n").split("\n"), width)) + end


def markdown(text: str, width: int = WIDTH) -> str:
    """Markdown with its prose and list lines folded at spaces (never inside a word: a link or a
    code span may then span two lines, which Markdown allows). Table rows, headings, fenced blocks
    and HTML comments stay whole."""
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if line.startswith(("```", "~~~")):
            fenced = not fenced
            out.append(line)
            continue
        if fenced or len(line) <= width or line.lstrip().startswith(("|", "#", "<!--")):
            out.append(line)
            continue
        out += _fold_words(line, width)
    return "\n".join(out)


# a word that would open a line as Markdown syntax: a list marker, a thematic break or setext
# underline, a heading, a quote, a table row, a fence
_SYNTAX = re.compile(r"^(?:[-*+]|[-=_*]+|#{1,6}|\d{1,9}[.)]|[|>#].*|`{3,}.*|~{3,}.*|)$")


def _fold_words(line: str, width: int) -> list[str]:
    m = _MARKER.match(line)
    lead = m.group(1) or ""
    hang = " " * (len(lead) + len(m.group(2) or "")) if m.group(2) else lead
    words = line[len(lead):].split(" ")
    out, cur = [], lead
    for i, w in enumerate(words):
        # a word that would open a line as Markdown syntax (a list marker, a heading, a quote, a
        # table row, a setext underline) never opens one: the word before it goes down with it
        # (or, where there is none, it stays past the width); a run of "=" or "-" opens a line
        # safely when more words follow it there
        lone = re.fullmatch(r"[-=_*]+", w) and i + 1 < len(words) and w not in ("-", "*", "+")
        if cur.strip() and len(cur) + 1 + len(w) > width and (lone or not _SYNTAX.match(w)):
            out.append(cur)
            cur = hang + w
        elif cur.strip() and len(cur) + 1 + len(w) > width and " " in cur.strip() \
                and not _SYNTAX.match(cur.rsplit(" ", 1)[0].strip()) and not _SYNTAX.match(cur.rsplit(" ", 1)[1]):
            # the word before it goes down with it, so the new line opens with plain text
            head, last = cur.rsplit(" ", 1)
            out.append(head)
            cur = hang + last + " " + w
        else:
            cur = (cur + " " + w) if cur.strip() else cur + w
    out.append(cur)
    return out


class FoldingStream:
    """A text stream for a Rich console: what is written to it goes to ``target()`` (looked up at
    each write, so a redirected ``sys.stdout`` is honoured) folded to :data:`WIDTH` columns when that
    target is not a terminal, as is on one. Whole lines are folded; a line still open waits for its
    newline (or a flush)."""

    def __init__(self, target):
        self._lookup = target
        self._open = ""

    def _target(self):
        # A Rich live display (the progress bars) swaps sys.stdout/sys.stderr for a proxy that
        # prints through a console; when that console writes here, the proxy must not be the
        # target again (it would call back into this stream without end): write to what it proxies.
        t = self._lookup()
        while hasattr(t, "rich_proxied_file"):
            t = t.rich_proxied_file
        return t

    def write(self, s: str) -> int:
        t = self._target()
        if t.isatty():
            return t.write(s)
        self._open += s
        if "\n" in self._open:
            done, self._open = self._open.rsplit("\n", 1)
            t.write(fold_text(done + "\n"))
        return len(s)

    def flush(self) -> None:
        t = self._target()
        if self._open:
            t.write("\n".join(fold(self._open)))
            self._open = ""
        t.flush()

    def isatty(self) -> bool:
        return self._target().isatty()

    @property
    def encoding(self) -> str:
        return getattr(self._target(), "encoding", "utf-8") or "utf-8"

    def fileno(self) -> int:
        return self._target().fileno()
