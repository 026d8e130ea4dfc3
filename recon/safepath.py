"""Names that came from recon's input made into paths that cannot leave their root, and files
opened so that the file checked is the file read.

recon writes, deletes and reads files by names it did not choose: members of a wheel, rows of its
``RECORD``, entries of a target tree, entries of the cache. Every such name goes through
:func:`clean` (one rule for all of them: a normal relative POSIX path, no ``..``, nothing
absolute, no drive, no backslash, no NUL, UTF-8) and every such file is opened with
:func:`open_regular`, which walks the path one component at a time without following a link and
accepts only a regular file: a file swapped for a link after the check is refused, not read, and a
named pipe or a device is never opened in a way that could block.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import Optional

from .links import LEAVES_ROOT, inside

_DRIVE = re.compile(r"^[A-Za-z]:")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


class UnsafePath(ValueError):
    """A name that could reach outside its root; the message says why."""


def clean(name) -> str:
    """``name`` when it is a normal relative POSIX path that stays where it is joined; else
    :class:`UnsafePath` with the reason. Not normalised silently: ``a/./b`` or ``a//b`` is refused
    too, because no tool that writes wheels or trees makes such names and two spellings of one path
    would let a member dodge the RECORD row that checks it."""
    if isinstance(name, bytes):
        try:
            name = name.decode("utf-8")
        except UnicodeDecodeError:
            raise UnsafePath("the name is not UTF-8") from None
    if not isinstance(name, str) or not name:
        raise UnsafePath("an empty name")
    if "\0" in name:
        raise UnsafePath("a NUL byte in the name")
    if "\\" in name:
        raise UnsafePath("a backslash in the name")
    if name.startswith("/"):
        raise UnsafePath("an absolute path")
    if _DRIVE.match(name):
        raise UnsafePath("a drive letter")
    parts = name.split("/")
    if ".." in parts:
        raise UnsafePath("a '..' component")
    if any(p in ("", ".") for p in parts):
        raise UnsafePath("not a normal path (empty or '.' component)")
    if not utf8(name):
        raise UnsafePath("the name is not UTF-8")
    return name


def utf8(name: str) -> bool:
    """Is this name (from the OS, undecodable bytes kept as surrogates) valid UTF-8?"""
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def shown(name: str) -> str:
    """A name as text that can be printed and stored anywhere: bytes that are not UTF-8 written as
    ``\\xff`` (the name is then only reported, never used to open anything)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def under(root, name) -> str:
    """``root/name`` for a :func:`clean` name whose resolved path (links followed) stays under
    ``root``; :class:`UnsafePath` otherwise. For paths about to be written or deleted."""
    rel = clean(name)
    bound = os.path.realpath(root)
    full = os.path.join(os.fspath(root), rel)
    if not inside(full, bound):
        raise UnsafePath(LEAVES_ROOT)
    return full


def kind_of(mode: int) -> Optional[str]:
    """What a file that is not a regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, what in (
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def not_regular(what: str) -> str:
    return f"not a regular file ({what}): not read"


def _open_dir(path: str) -> int:
    """A descriptor of the folder ``path`` (absolute), no component of it followed as a link."""
    fd = os.open("/", _DIR_FLAGS)
    try:
        for part in path.split("/"):
            if not part:
                continue
            nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


_ROOT_FDS: dict = {}  # real root -> (fd, (st_dev, st_ino)): the few roots a run reads, opened once
_MAX_ROOT_FDS = 8


def _root_fd(root: str) -> int:
    """A descriptor of the folder ``root`` (a real path the user named: its own components are
    not the target's), kept open while it is still the folder at that path."""
    st = os.stat(root)
    hit = _ROOT_FDS.get(root)
    if hit is not None:
        if hit[1] == (st.st_dev, st.st_ino):
            return hit[0]
        os.close(hit[0])  # replaced meanwhile (a wheel unpacked again): open the new one
        del _ROOT_FDS[root]
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    fst = os.fstat(fd)
    if len(_ROOT_FDS) >= _MAX_ROOT_FDS:
        old = next(iter(_ROOT_FDS))
        os.close(_ROOT_FDS.pop(old)[0])
    _ROOT_FDS[root] = (fd, (fst.st_dev, fst.st_ino))
    return fd


def _open_at(top: int, rel: str) -> int:
    """``rel`` (clean) below the folder ``top``, no component followed as a link, regular only."""
    parts = rel.split("/")
    dfd = top
    try:
        for part in parts[:-1]:
            nfd = os.open(part, _DIR_FLAGS, dir_fd=dfd)
            if dfd != top:
                os.close(dfd)
            dfd = nfd
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dfd)
    finally:
        if dfd != top:
            os.close(dfd)
    what = kind_of(os.fstat(fd).st_mode)
    if what is not None:
        os.close(fd)
        raise OSError(errno.EINVAL, not_regular(what), rel)
    return fd


def open_regular(path: str) -> int:
    """A read-only descriptor of the regular file at ``path`` (absolute, normal), opened one
    component at a time so that no component is a link: the file opened is the file at this very
    path, whatever was swapped in meanwhile. A link anywhere raises ``ELOOP`` (``ENOTDIR`` for a
    folder on the way); a named pipe, socket or device raises ``EINVAL`` with :func:`not_regular` as the reason (without blocking: opened
    non-blocking and checked with ``fstat`` before anything is read)."""
    head, name = os.path.split(path)
    dfd = _open_dir(head)
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
    finally:
        os.close(dfd)
    mode = os.fstat(fd).st_mode
    what = kind_of(mode)
    if what is not None:
        os.close(fd)
        raise OSError(errno.EINVAL, not_regular(what), path)
    return fd


def read_fd(fd: int, limit: Optional[int] = None) -> bytes:
    """Everything (or the first ``limit`` bytes) of an open file; closes it."""
    with os.fdopen(fd, "rb") as f:
        return f.read() if limit is None else f.read(limit)


def open_in(root: str, rel: str, bound: str) -> int:
    """A descriptor of the regular file ``rel`` (a :func:`clean` name) under ``root`` (a real
    path), not outside ``bound`` (a real path). Links inside the bound are followed, as the
    target's rule says (see :mod:`recon.links`), by resolving them first and then opening the
    resolved path with no link followed: a link swapped in after that is refused, not read."""
    rel = clean(rel)
    full = os.path.join(root, rel)
    try:
        if inside_real(full, bound):
            return _open_at(_root_fd(root), rel)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):  # a link as a folder gives ENOTDIR
            raise
    real = os.path.realpath(full)  # a link on the way: where it leads, checked, then opened as is
    if not inside_real(real, bound):
        raise OSError(errno.EACCES, LEAVES_ROOT, rel)
    return open_regular(real)


def inside_real(path: str, bound: str) -> bool:
    """``path`` (real and normal: no link, no ``..``) lies in ``bound`` (real), by its text alone."""
    return path == bound or path.startswith(bound.rstrip("/") + "/")


def unlink_in(root, rel: str) -> None:
    """Delete the file ``rel`` (a :func:`clean` name) under ``root``: its folder is opened with no
    link followed and the name removed there, so nothing outside ``root`` can be deleted."""
    rel = clean(rel)
    head, name = os.path.split(rel)
    base = os.path.realpath(root)
    dfd = _open_dir(os.path.join(base, head) if head else base)
    try:
        os.unlink(name, dir_fd=dfd)
    finally:
        os.close(dfd)
