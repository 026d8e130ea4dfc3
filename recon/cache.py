"""recon's cache: where it lives, and writes that two runs sharing it can never see half-done.

Every file is written to a temporary name in the same folder and renamed into place
(``os.replace`` is atomic), so a reader sees the old file or the new one, never a torn one.
A cache file that cannot be read back is treated as missing and rebuilt.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Optional

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


def cache_dir() -> Path:
    env = os.environ.get("RECON_CACHE_DIR")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "recon"
    base.mkdir(parents=True, exist_ok=True)
    return base


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


def save_pickle(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, pickle.dumps((FORMAT, obj), protocol=pickle.HIGHEST_PROTOCOL))


def load_pickle(path: Path) -> Optional[Any]:
    """The object stored at ``path``, or None when missing, of another format, or corrupt."""
    try:
        with open(path, "rb") as f:
            fmt, obj = pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception:  # truncated, garbage, or from an incompatible recon: rebuild
        return None
    if fmt != FORMAT:
        return None
    with contextlib.suppress(OSError):  # last use, for `recon cache prune`
        os.utime(path)
    return obj


def _lock_file():
    return open(cache_dir() / ".writer.lock", "a+b")


def write_behind(jobs: list) -> None:
    """Write ``[(path, obj), ...]`` (paths as Path or str; bytes as they are, anything else pickled) in a forked child, so the caller
    answers without waiting for large pickles; the child holds an exclusive lock while it writes.

    Readers call :func:`wait_for_writers` first. Without ``fork`` (or with
    ``RECON_SYNC_WRITES=1``) the writes happen here and now.
    """
    if not hasattr(os, "fork") or os.environ.get("RECON_SYNC_WRITES") == "1":
        _write_all(jobs)
        return
    import fcntl

    lock = _lock_file()
    fcntl.flock(lock, fcntl.LOCK_EX)  # taken before the fork: no reader slips in between
    pid = os.fork()
    if pid == 0:  # child: write, release, leave without running the parent's exit handlers
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


def _write_all(jobs: list) -> None:
    for path, obj in jobs:
        path = Path(path)
        try:
            if isinstance(obj, bytes):
                atomic_write_bytes(path, obj)
            else:
                save_pickle(path, obj)
        except OSError:
            pass  # a full or read-only cache costs speed, not results; the other entries still go


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

    with _lock_file() as lock:
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
