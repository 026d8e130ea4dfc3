"""``recon cache info`` / ``recon cache prune``: what the cache holds and removing what is stale.

Everything under the cache is derived and can be rebuilt, so pruning is always safe: a run
that finds an entry gone (even one another process is about to read) rebuilds it. Entries
are aged by modification time; ``load_pickle`` refreshes it on every hit, so "old" means
"not used", not "made long ago". Downloaded and unpacked wheels are only removed when asked.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

DERIVED = ("facts", "index", "graph", "findings", "tritonast", "runtime", "kernels", "pathcosts")  # rebuilt by any run that needs them
FETCHED = ("downloads", "wheels")  # SGLang wheels from PyPI and their unpacked trees
_TMP_GRACE_S = 3600  # a temporary file younger than this may belong to a write in progress


@dataclass
class Area:
    name: str
    files: int = 0
    bytes: int = 0


def _files(folder: Path):
    if folder.is_symlink():  # an area swapped for a link: what it points to is not the cache's
        return
    for dirpath, _dirs, names in os.walk(folder):  # links below are listed, never followed
        for n in names:
            yield Path(dirpath) / n


def info(root: Path) -> list[Area]:
    """Files and bytes per cache area (every area, present or not, in a fixed order)."""
    areas = []
    for name in DERIVED + FETCHED:
        a = Area(name)
        for p in _files(root / name):
            try:
                a.bytes += p.lstat().st_size
                a.files += 1
            except OSError:  # removed meanwhile
                continue
        areas.append(a)
    return areas


def prune(root: Path, older_than_days: float, everything: bool = False, wheels: bool = False) -> Area:
    """Remove derived entries unused for ``older_than_days`` (all of them with ``everything``),
    and the fetched wheels too with ``wheels``. Returns what was removed."""
    removed = Area("removed")
    now = time.time()
    cutoff = now - older_than_days * 86400
    for name in DERIVED + (FETCHED if wheels else ()):
        for p in list(_files(root / name)):
            try:
                st = p.lstat()
            except OSError:
                continue
            if p.name.endswith(".tmp") and now - st.st_mtime < _TMP_GRACE_S:
                continue
            if everything or (wheels and name in FETCHED) or st.st_mtime < cutoff:
                try:
                    p.unlink()
                except OSError:
                    continue
                removed.files += 1
                removed.bytes += st.st_size
        _remove_empty_dirs(root / name)
    return removed


def _remove_empty_dirs(folder: Path) -> None:
    if folder.is_symlink():
        return
    for dirpath, _dirs, _names in sorted(os.walk(folder), key=lambda t: -len(t[0])):
        if Path(dirpath) != folder:
            try:
                os.rmdir(dirpath)
            except OSError:  # not empty, or already gone
                pass
