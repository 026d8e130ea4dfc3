"""Where file bytes come from: a folder on disk, or a git revision read straight from objects.

A source lists the files recon reads with a cheap *stamp* per file (size and mtime on disk, the
blob id in git) so that unchanged files are never read again, and reads one file's bytes on demand.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Optional

# Folders never worth reading: caches, VCS metadata, virtual environments, front-end bundles.
SKIP_DIRS = frozenset(
    {".git", "__pycache__", ".mypy_cache", ".pytest_cache", "node_modules", ".venv", "venv", ".tox", "build", "dist"}
)
PY_EXT = (".py",)
CPP_EXT = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")
JSON_EXT = (".json",)
MAX_BYTES = 4 * 1024 * 1024  # larger files are reported, not parsed


def file_kind(relpath: str) -> Optional[str]:
    if relpath.endswith(PY_EXT):
        return "py"
    if relpath.endswith(JSON_EXT):
        return "json"
    if relpath.endswith(CPP_EXT):
        return "cpp"
    return None


class DirSource:
    """Files under ``root`` limited to ``subdirs`` (relative paths), read from disk."""

    def __init__(self, root: Path, subdirs: tuple[str, ...]):
        self.root = Path(root)
        self.subdirs = subdirs

    def describe(self) -> str:
        return str(self.root)

    def files(self) -> Iterator[tuple[str, tuple]]:
        """(relpath, stamp) for every readable file of a known kind."""
        root = str(self.root)
        cut = len(root) + 1
        for sub in self.subdirs:
            top = os.path.join(root, sub) if sub else root
            if os.path.isfile(top):
                if file_kind(top):
                    st = os.stat(top)
                    yield top[cut:].replace(os.sep, "/"), (st.st_size, st.st_mtime_ns)
                continue
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
                for fn in sorted(filenames):
                    if file_kind(fn) is None:
                        continue
                    full = os.path.join(dirpath, fn)
                    try:
                        st = os.stat(full)
                    except OSError:
                        continue
                    yield full[cut:].replace(os.sep, "/"), (st.st_size, st.st_mtime_ns)

    def read(self, relpath: str) -> bytes:
        with open(os.path.join(self.root, relpath), "rb") as f:
            return f.read()

    def exists(self, relpath: str) -> bool:
        return (self.root / relpath).exists()


class GitSource:
    """Files of one commit of a git repository, read from objects; the work tree is not touched."""

    def __init__(self, repo_path: Path, rev: str, subdirs: tuple[str, ...]):
        import git  # GitPython

        self.repo = git.Repo(repo_path)
        self.commit = self.repo.commit(rev)
        self.root = Path(repo_path)
        self.subdirs = subdirs
        self._blobs: dict[str, object] = {}

    def describe(self) -> str:
        return f"{self.root}@{self.commit.hexsha[:12]}"

    def files(self) -> Iterator[tuple[str, tuple]]:
        tree = self.commit.tree
        for sub in self.subdirs:
            try:
                top = tree / sub if sub else tree
            except KeyError:
                continue
            if top.type == "blob":
                items = [top]
            else:
                items = top.traverse(
                    prune=lambda i, d: i.type == "tree" and (i.name in SKIP_DIRS or i.name.endswith(".egg-info"))
                )
            for item in items:
                if item.type != "blob" or file_kind(item.path) is None:
                    continue
                self._blobs[item.path] = item
                yield item.path, (item.size, item.hexsha)

    def read(self, relpath: str) -> bytes:
        blob = self._blobs.get(relpath)
        if blob is None:
            blob = self.commit.tree / relpath
        return blob.data_stream.read()

    def exists(self, relpath: str) -> bool:
        try:
            self.commit.tree / relpath
            return True
        except KeyError:
            return False
