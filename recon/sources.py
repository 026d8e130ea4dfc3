"""Where file bytes come from: a folder on disk, or a git revision read straight from objects.

A source lists the files recon reads with a cheap *stamp* per file (size and mtime on disk, the
blob id in git) so that unchanged files are never read again, and reads one file's bytes on demand.

Only regular files are read, and only through :func:`recon.safepath.open_in` (no link followed
after the check, never a blocking open): a named pipe, socket or device, and a name that is not
UTF-8, are listed in ``refused`` with the reason (the "not analyzed" diagnostics), never opened.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Iterator, Optional

from .links import BROKEN, LEAVES_ROOT, MAX_HOPS, git_link_target, inside, real_root
from .safepath import UnsafePath, kind_of, not_regular, open_in, read_fd, shown, utf8

# Folders never worth reading: caches, VCS metadata, virtual environments, front-end bundles.
SKIP_DIRS = frozenset(
    {".git", "__pycache__", ".mypy_cache", ".pytest_cache", "node_modules", ".venv", "venv", ".tox", "build", "dist"}
)
PY_EXT = (".py",)
CPP_EXT = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")
JSON_EXT = (".json",)
MAX_BYTES = 4 * 1024 * 1024  # larger files are reported, not parsed
LINK_MODE = 0o120000  # a symbolic link in a git tree
BAD_NAME = "file name is not UTF-8: not read"
BAD_FOLDER = "folder name is not UTF-8: nothing in it was read"


def read_under(root: str, relpath: str, bound: str, limit: Optional[int] = None) -> bytes:
    """The bytes of the regular file ``relpath`` under ``root`` (real), not outside ``bound``
    (real); OSError with the reason otherwise (a process-pool worker calls this with strings)."""
    try:
        fd = open_in(root, relpath, bound)
    except UnsafePath as e:
        raise OSError(errno.EINVAL, str(e), relpath) from None
    return read_fd(fd, limit)


def file_kind(relpath: str) -> Optional[str]:
    if relpath.endswith(PY_EXT):
        return "py"
    if relpath.endswith(JSON_EXT):
        return "json"
    if relpath.endswith(CPP_EXT):
        return "cpp"
    return None


class DirSource:
    """Files under ``root`` limited to ``subdirs`` (relative paths), read from disk.

    ``bound`` is the folder nothing may be read outside of (default ``root``): a symbolic link
    whose resolved path leaves it is not followed but recorded in :attr:`refused` with the reason
    (see :mod:`recon.links`), and :meth:`read` refuses it too.
    """

    def __init__(self, root: Path, subdirs: tuple[str, ...], bound: Optional[Path] = None):
        self.root = Path(root)
        self.subdirs = subdirs
        self.bound = real_root(bound if bound is not None else root)
        self.real_root = real_root(root)
        self.refused: dict[str, str] = {}  # relpath -> why it was not read (filled by files())

    def describe(self) -> str:
        return str(self.root)

    def files(self) -> Iterator[tuple[str, tuple]]:
        """(relpath, stamp) for every readable file of a known kind; links that leave the root
        and broken ones go to :attr:`refused` instead."""
        self.refused = {}
        root = str(self.root)
        cut = len(root) + 1
        for sub in self.subdirs:
            top = os.path.join(root, sub) if sub else root
            if not inside(top, self.bound):  # the folder itself, or one above it, links out
                if os.path.lexists(top):
                    self.refused[sub] = LEAVES_ROOT
                continue
            if os.path.isfile(top):
                if file_kind(top):
                    st = os.stat(top)
                    yield top[cut:].replace(os.sep, "/"), (st.st_size, st.st_mtime_ns)
                continue
            yield from self._walk(top, cut)

    def _walk(self, top: str, cut: int) -> Iterator[tuple[str, tuple]]:
        """Files of ``top`` (sorted), then each subfolder's in turn: the order ``os.walk`` gives,
        with ``scandir`` telling links apart without a system call per entry. Folders wait on a
        stack, not in nested calls: a tree nested thousands deep is walked, not a RecursionError."""
        stack = [top]
        while stack:
            subdirs = yield from self._files_of(stack.pop(), cut)
            stack.extend(reversed(subdirs))  # the first subfolder is walked next, whole

    def _files_of(self, folder: str, cut: int):
        """Yield the analyzable files of one folder; return its subfolders to walk."""
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return []
        subdirs = []
        for e in entries:
            rel = e.path[cut:].replace(os.sep, "/")
            try:
                is_link = e.is_symlink()
                is_dir = not is_link and e.is_dir(follow_symlinks=False)
                is_file = not is_link and not is_dir and e.is_file(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if e.name not in SKIP_DIRS and not e.name.endswith(".egg-info"):
                    if not utf8(e.name):  # every path under it would carry the undecodable bytes
                        self.refused[shown(rel)] = BAD_FOLDER
                        continue
                    subdirs.append(e.path)
                continue
            if not utf8(e.name):
                self.refused[shown(rel)] = BAD_NAME
                continue
            if not is_link and not is_file:  # a pipe, socket or device: never opened
                try:
                    what = kind_of(e.stat(follow_symlinks=False).st_mode) or "not a regular file"
                except OSError:
                    continue
                self.refused[rel] = not_regular(what)
                continue
            if is_link:
                if not inside(e.path, self.bound):
                    self.refused[rel] = LEAVES_ROOT
                    continue
                if os.path.isdir(e.path):
                    continue  # never descended: its files are read under their real path
            if file_kind(e.name) is None:
                continue
            try:
                st = os.stat(e.path)  # a link inside the root: the file it names
            except OSError:
                if is_link:
                    self.refused[rel] = BROKEN
                continue
            if not stat.S_ISREG(st.st_mode):  # a link to a pipe or device inside the root
                self.refused[rel] = not_regular(kind_of(st.st_mode) or "not a regular file")
                continue
            yield rel, (st.st_size, st.st_mtime_ns)
        return subdirs

    def read(self, relpath: str) -> bytes:
        return read_under(self.real_root, relpath, self.bound)

    def exists(self, relpath: str) -> bool:
        """Is ``relpath`` a regular file recon may read?"""
        try:
            os.close(open_in(self.real_root, relpath, self.bound))
            return True
        except (OSError, UnsafePath):
            return False


class GitSource:
    """Files of one commit of a git repository, read from objects; the work tree is not touched.

    A link in the tree (mode 120000) is a blob holding the path it names: it is followed to the
    blob at that path when the path stays inside the repository, else recorded in
    :attr:`refused` (its text is never analyzed as if it were the file).
    """

    def __init__(self, repo_path: Path, rev: str, subdirs: tuple[str, ...]):
        import git  # GitPython

        self.repo = git.Repo(repo_path)
        self.commit = self.repo.commit(rev)
        self.root = Path(repo_path)
        self.subdirs = subdirs
        self._blobs: dict[str, object] = {}
        self.refused: dict[str, str] = {}

    def describe(self) -> str:
        return f"{self.root}@{self.commit.hexsha[:12]}"

    def _lookup(self, path: str):
        try:
            return self.commit.tree / path if path else self.commit.tree
        except (KeyError, TypeError, ValueError):
            return None

    def _follow(self, item):
        """The object a link blob names, following links inside the repository; raises OSError
        with the reason when the chain leaves the repository, breaks or loops."""
        for _ in range(MAX_HOPS):
            if item is None:
                raise OSError(errno.ENOENT, BROKEN)
            if item.type != "blob" or item.mode != LINK_MODE:
                return item
            text = item.data_stream.read().decode("utf-8", "surrogateescape")
            where = git_link_target(item.path, text)
            if where is None:
                raise OSError(errno.EACCES, LEAVES_ROOT)
            item = self._lookup(where)
        raise OSError(errno.ELOOP, BROKEN)

    def files(self) -> Iterator[tuple[str, tuple]]:
        self.refused = {}
        for sub in self.subdirs:
            top = self._lookup(sub)
            if top is None:
                continue
            if top.type == "blob":
                items = [top]
            else:
                items = top.traverse(prune=self._prune)
            for item in items:
                if item.type != "blob":
                    continue
                if not utf8(item.path):  # GitPython keeps undecodable bytes of a name as surrogates
                    self.refused[shown(item.path)] = BAD_NAME
                    continue
                if item.mode == LINK_MODE:
                    try:
                        real = self._follow(item)
                    except OSError as e:
                        if e.strerror == LEAVES_ROOT or file_kind(item.path) is not None:
                            self.refused[item.path] = e.strerror
                        continue
                    if real.type != "blob" or file_kind(item.path) is None:
                        continue  # a link to a folder is not descended (see recon.links)
                    self._blobs[item.path] = real
                    yield item.path, (real.size, real.hexsha)
                    continue
                if file_kind(item.path) is None:
                    continue
                self._blobs[item.path] = item
                yield item.path, (item.size, item.hexsha)

    def _prune(self, item, _depth) -> bool:
        """Folders not descended: skipped ones, and those whose name is not UTF-8 (reported)."""
        if item.type != "tree":
            return False
        if not utf8(item.name):
            self.refused[shown(item.path)] = BAD_FOLDER
            return True
        return item.name in SKIP_DIRS or item.name.endswith(".egg-info")

    def _blob(self, relpath: str):
        blob = self._blobs.get(relpath)
        if blob is None:
            blob = self._follow(self._lookup(relpath))
            if blob.type != "blob":
                raise OSError(errno.EISDIR, "a folder", relpath)
        return blob

    def read(self, relpath: str) -> bytes:
        return self._blob(relpath).data_stream.read()

    def exists(self, relpath: str) -> bool:
        try:
            self._blob(relpath)
            return True
        except OSError:
            return False
