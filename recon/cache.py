"""recon's cache: where it lives, and writes that two runs sharing it can never see half-done.

Every file is written to a temporary name in the same folder and renamed into place
(``os.replace`` is atomic), so a reader sees the old file or the new one, never a torn one.
A cache file that cannot be read back is treated as missing and rebuilt.

The cache is never needed for a right answer. A cache that cannot be written (a read-only folder,
a full disk) turns into "no cache" with one warning line: nothing more is written, results and
exit codes stay the same. Entries are signed (see :mod:`recon.cachekey`): one that does not verify
is a miss, never unpickled.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Optional

from . import cachekey, safepath

FORMAT = 3  # bump when the facts or graph layout changes: old entries are then ignored


_FINGERPRINTS: dict = {}
_UMASK = os.umask(0)
os.umask(_UMASK)


def code_fingerprint(*modules: str) -> str:
    """A short hash of recon's own modules that shape a cached artifact: edit them, and the cache
    entries they made are ignored instead of being trusted."""
    key = tuple(modules)
    fp = _FINGERPRINTS.get(key)
    if fp is None:
        import hashlib

        h = hashlib.sha1(str(FORMAT).encode())
        here = Path(__file__).resolve().parent
        for m in modules:
            h.update((here / f"{m}.py").read_bytes())
        fp = _FINGERPRINTS[key] = h.hexdigest()[:12]
    return fp


def _root() -> Path:
    env = os.environ.get("RECON_CACHE_DIR")
    return Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "recon"


def cache_dir() -> Path:
    base = _root()
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        disable(e, base)
    return base


_DISABLED: list = []  # the reason, once writing to the cache failed in this process
_IN_CHILD = [False]  # a write-behind child: its failures are silent (the answer is already out)


def disable(err: OSError, where: Optional[Path] = None) -> None:
    """Stop writing to the cache for the rest of this run; say so once, on stderr."""
    if _DISABLED:
        return
    _DISABLED.append(err)
    if _IN_CHILD[0]:
        return
    why = err.strerror or str(err)
    where = where or Path(os.environ.get("RECON_CACHE_DIR") or "the cache")
    from .columns import fold_text  # one message, at 100 columns off a terminal like every other

    msg = f"recon: the cache at {where} cannot be written ({why}): running without a cache; results are the same, only slower\n"
    sys.stderr.write(msg if sys.stderr.isatty() else fold_text(msg))
    sys.stderr.flush()


def disabled() -> bool:
    return bool(_DISABLED)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    for attempt in range(3):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            break
        except FileNotFoundError:  # `recon cache prune` removed the empty folder meanwhile
            if attempt == 2:
                raise
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a written spec should read like any file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def save_entry(path: Path, data: bytes) -> None:
    """Store a derived entry, signed. Never raises: a cache that cannot be written is no cache."""
    if _DISABLED:
        return
    try:
        path = Path(_entry(path, resolve=True))
        atomic_write_bytes(path, cachekey.seal(data))
    except safepath.UnsafePath:
        return  # a folder of the cache swapped for a link out of it: that entry is not written
    except OSError as e:
        disable(e)


def _entry(path, resolve: bool = False) -> str:
    """``path`` when it names an entry inside the cache (with ``resolve``, also once every link on
    the way is followed: a write never lands outside it); :class:`~recon.safepath.UnsafePath` else."""
    root = os.path.abspath(_root())
    full = os.path.abspath(path)
    rel = os.path.relpath(full, root)
    return safepath.under(root, rel) if resolve else os.path.join(root, safepath.clean(rel))


def load_entry(path) -> Optional[memoryview]:
    """The body of the entry at ``path`` when its signature holds, else None (a miss)."""
    try:
        # the entry itself not a link, and never a pipe planted to make the read block
        fd = os.open(_entry(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, safepath.UnsafePath):
        return None
    try:
        if safepath.kind_of(os.fstat(fd).st_mode) is not None:
            os.close(fd)
            return None
        blob = safepath.read_fd(fd)
    except OSError:
        return None
    return cachekey.unseal(blob)  # read through a link or not, only recon's own signed bytes load


def save_pickle(path: Path, obj: Any) -> None:
    save_entry(path, pickle.dumps((FORMAT, obj), protocol=pickle.HIGHEST_PROTOCOL))


def load_pickle(path: Path) -> Optional[Any]:
    """The object stored at ``path``, or None when missing, unsigned or tampered with (never
    unpickled then), of another format, or corrupt."""
    body = load_entry(path)
    if body is None:
        return None
    try:
        fmt, obj = pickle.loads(body)
    except Exception:  # truncated, garbage, or from an incompatible recon: rebuild
        return None
    if fmt != FORMAT:
        return None
    with contextlib.suppress(OSError):  # last use, for `recon cache prune`
        os.utime(path)
    return obj


def _lock_file():
    """The lock writers hold, or None when it cannot be opened (a read-only cache: no cache)."""
    path = cache_dir() / ".writer.lock"
    try:  # not through a link planted in its place (it would create a file where it points)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o666)
        return os.fdopen(fd, "a+b")
    except OSError as e:
        disable(e, path.parent)
        return None


def write_behind(jobs: list) -> None:
    """Write ``[(path, obj), ...]`` (paths as Path or str; bytes as they are, anything else pickled) in a forked child, so the caller
    answers without waiting for large pickles; the child holds an exclusive lock while it writes.

    Readers call :func:`wait_for_writers` first. Without ``fork`` (or with
    ``RECON_SYNC_WRITES=1``) the writes happen here and now.
    """
    if _DISABLED:
        return
    if not hasattr(os, "fork") or os.environ.get("RECON_SYNC_WRITES") == "1":
        _write_all(jobs)
        return
    import fcntl

    lock = _lock_file()
    if lock is None:
        return
    cachekey.key()  # read (or made) once here, not by the child after the answer
    fcntl.flock(lock, fcntl.LOCK_EX)  # taken before the fork: no reader slips in between
    pid = os.fork()
    if pid == 0:  # child: write, release, leave without running the parent's exit handlers
        _IN_CHILD[0] = True
        code = 0
        try:
            _write_all(jobs)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    lock.close()  # the parent's handle; the child keeps the lock until it exits
    _CHILDREN.append(pid)


_CHILDREN: list = []


class Link(NamedTuple):
    """A write-behind job's object: make the entry a second name of the entry at ``source`` (a hard
    link, no second copy on disk), e.g. a graph stored under its target and under its content."""

    source: Path


def link_entry(path: Path, source: Path) -> None:
    """``path`` becomes another name of the entry at ``source`` (both inside the cache; a link
    planted at ``source`` is linked as the link, which no read follows). Never raises: an entry
    that cannot be linked is a miss later."""
    if _DISABLED:
        return
    try:
        dest, src = Path(_entry(path, resolve=True)), _entry(source, resolve=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.parent / f".{dest.name}.{os.getpid()}.link"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.link(src, tmp, follow_symlinks=False)
        os.replace(tmp, dest)
    except (OSError, safepath.UnsafePath):
        return


def _write_all(jobs: list) -> None:
    """Each job's entry, signed; stops at the first that cannot be written (no cache from then).
    An object in two jobs is pickled once."""
    made: dict = {}
    for path, obj in jobs:
        path = Path(path)
        if isinstance(obj, Link):
            link_entry(path, obj.source)
        elif isinstance(obj, bytes):
            save_entry(path, obj)
        else:
            if id(obj) not in made:
                made[id(obj)] = pickle.dumps((FORMAT, obj), protocol=pickle.HIGHEST_PROTOCOL)
            save_entry(path, made[id(obj)])
        if _DISABLED:
            return


def wait_for_writers() -> None:
    """Block until no write-behind child (of this process or another) is still writing."""
    for pid in list(_CHILDREN):
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        _CHILDREN.remove(pid)
    if not hasattr(os, "fork"):
        return
    import fcntl

    lock = _lock_file()
    if lock is None:  # nothing of ours writes to a cache we cannot lock; renames keep reads whole
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def atomic_dir(dest: Path) -> Iterator[Path]:
    """Fill a temporary folder, then move it to ``dest`` in one rename (a racing twin wins or loses whole)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    try:
        yield tmp
        try:
            os.replace(tmp, dest)
        except OSError:
            if not dest.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
