"""What a long run is doing, phase by phase (index, graph, checks, ...), for the person waiting.

Code that does long work wraps it in ``with phase("graph") as p:`` and may call ``p.advance(done,
total, note)`` and ``p.item(name, seconds, note)``; it never knows where the report goes. The CLI
picks the reporter once per run (:func:`use`):

- on a terminal, a live line per phase on stderr with its counts and elapsed time (cleared at the end);
- off a terminal with ``-v``, one plain line per phase (and per rule) on stderr when it ends;
- otherwise nothing. stdout never carries progress.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator, Optional


class Phase:
    """One phase in progress; ``note`` is what its end line says (counts, how it was obtained)."""

    def __init__(self, reporter, name: str, total: Optional[int]):
        self.reporter, self.name, self.total = reporter, name, total
        self.note = ""
        self.start = time.perf_counter()
        self.handle = None

    def advance(self, done: int, total: Optional[int] = None, note: Optional[str] = None) -> None:
        if total is not None:
            self.total = total
        if note is not None:
            self.note = note
        if self.reporter is not None:
            self.reporter.advance(self, done)

    def item(self, name: str, seconds: float, note: str = "") -> None:
        """One unit of the phase finished (a rule of the checks phase)."""
        if self.reporter is not None:
            self.reporter.item(self, name, seconds, note)


class _Terminal:
    """Rich progress on stderr while a phase runs: its bar, counts, note and elapsed time. The
    display exists only while some phase is running, so the command's own output, written after
    the last phase, never lands inside it."""

    def __init__(self, console):
        self.console = console
        self.bar = None

    def begin(self, p: Phase) -> None:
        if self.bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description:<8}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                TextColumn("{task.fields[note]}", markup=False), console=self.console, transient=True)
            self.bar.start()
        p.handle = self.bar.add_task(p.name, total=p.total, note="")
        self.bar.refresh()

    def advance(self, p: Phase, done: int) -> None:
        # drawn now, not at the next tick: a phase shorter than a tick still shows where it got to
        self.bar.update(p.handle, completed=done, total=p.total, note=p.note, refresh=True)

    def item(self, p: Phase, name: str, seconds: float, note: str) -> None:
        pass

    def end(self, p: Phase) -> None:
        total = p.total or 1
        self.bar.update(p.handle, completed=total, total=total, note=p.note, refresh=True)  # how it ended
        self.bar.remove_task(p.handle)
        if not self.bar.tasks:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


class _Lines:
    """``-v`` off a terminal: one line per phase (and per item) on stderr as each ends."""

    def __init__(self, stream):
        self.stream = stream

    def _say(self, text: str) -> None:
        self.stream.write(f"recon: {text}\n")
        self.stream.flush()

    def begin(self, p: Phase) -> None:
        pass

    def advance(self, p: Phase, done: int) -> None:
        pass

    def item(self, p: Phase, name: str, seconds: float, note: str) -> None:
        self._say(f"{p.name} {name}: {note + ', ' if note else ''}{seconds:.1f} s")

    def end(self, p: Phase) -> None:
        self._say(f"{p.name}: {p.note + ', ' if p.note else ''}{time.perf_counter() - p.start:.1f} s")

    def close(self) -> None:
        pass


_current = None  # the reporter of this run; None reports nothing


def use(console, verbose: bool) -> None:
    """Pick the reporter for this run: live on a terminal, lines with ``verbose``, else none."""
    global _current
    stop()
    if console.is_terminal:
        _current = _Terminal(console)
    elif verbose:
        _current = _Lines(console.file)


def stop() -> None:
    global _current
    if _current is not None:
        _current.close()
    _current = None


@contextlib.contextmanager
def phase(name: str, total: Optional[int] = None) -> Iterator[Phase]:
    r = _current
    p = Phase(r, name, total)
    if r is not None:
        r.begin(p)
    try:
        yield p
    finally:
        if r is not None:
            r.end(p)
