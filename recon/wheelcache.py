"""Unpacked SGLang wheels in the cache, checked against the wheel's own ``*.dist-info/RECORD``.

A wheel lists every file it holds with its sha256 and size. recon unpacks a wheel once and reads
the unpacked tree on every later run, so a file changed there (an editor, a ``truncate``, a disk
that filled up mid-write) would silently change every answer. Two levels of checking keep that
honest without hashing 70 MB on every run:

- at unpack time each file is hashed against RECORD and its (size, mtime) written to a stamp
  file beside the tree; a later run only stats the files and compares them with the stamp;
- a file whose stamp differs, a tree without a stamp, and ``recon cache verify`` get the full
  sha256 check. Files that still differ from RECORD (or are missing, or not in the wheel at all)
  are unpacked again from the wheel, and the caller is told which.

Names in a wheel and in its RECORD are input, not trusted (see :mod:`recon.safepath`): a member
whose name could land outside the tree makes the wheel damaged (nothing is written), and a RECORD
row naming such a path is ignored with a note, so no check ever reads, rewrites or deletes a file
outside the unpacked tree.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from . import safepath
from .cache import atomic_write_bytes
from .links import inside

# Bounds far above any SGLang release (0.5.23's largest file is under 1 MB, the whole package about
# 70 MB unpacked): a wheel past them is refused as damaged before it is inflated.
MAX_MEMBER_BYTES = 64 << 20
MAX_WHEEL_BYTES = 1 << 30
STAMP = ".recon-unpacked.json"  # beside sglang/, outside what the indexer reads
_SKIP_DIRS = {"__pycache__"}  # bytecode Python may have written: not the wheel's, never read


class WheelDamaged(Exception):
    """The wheel file itself is unusable (cut short, not a zip, or its contents differ from RECORD)."""


@dataclass
class Check:
    """What one check of an unpacked tree found."""

    files: int = 0  # files listed in RECORD that recon unpacks
    differ: list[str] = field(default_factory=list)  # wrong size or hash, or missing
    extra: list[str] = field(default_factory=list)  # not in the wheel at all
    hashed: int = 0  # files whose sha256 was computed

    @property
    def bad(self) -> list[str]:
        return sorted(self.differ + self.extra)


def wanted(name: str, version: str) -> bool:
    """The wheel members recon unpacks: the package and its dist-info."""
    return name.startswith(("sglang/", f"sglang-{version}.dist-info/")) and not name.endswith("/")


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _parse_record(text: str, version: str, ignored: Optional[list] = None) -> dict[str, tuple[Optional[str], Optional[int]]]:
    """RECORD rows of the members recon unpacks; rows whose path is not safe to join under the
    tree are left out (and added to ``ignored`` as ``(row path, why)``)."""
    out = {}
    for row in csv.reader(io.StringIO(text)):
        if not row or not wanted(row[0], version):
            continue
        try:
            safepath.clean(row[0])
        except safepath.UnsafePath as e:
            if ignored is not None:
                ignored.append((row[0], str(e)))
            continue
        h = row[1] if len(row) > 1 and row[1] else None
        size = int(row[2]) if len(row) > 2 and row[2].isdigit() else None
        out[row[0]] = (h, size)
    return out


def record(root: Path, version: str, ignored: Optional[list] = None) -> Optional[dict]:
    """RECORD of the unpacked tree (path -> (sha256 field, size)), or None when it is gone."""
    try:
        text = _read(root, f"sglang-{version}.dist-info/RECORD").decode("utf-8")
        return _parse_record(text, version, ignored)
    except (OSError, UnicodeDecodeError, csv.Error, ValueError):
        return None


def _read(root: Path, rel: str) -> bytes:
    """A file of the tree, never one outside it (a planted link is not followed out)."""
    base = os.path.realpath(root)
    return safepath.read_fd(safepath.open_in(base, rel, base))


def _stat(p: str) -> Optional[list]:
    try:
        st = os.lstat(p)  # a link is not the wheel's file: its own size and time, never its target's
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _note(msg: str) -> None:
    sys.stderr.write(f"recon: {msg}\n")
    sys.stderr.flush()


def _note_ignored(where: str, ignored: list) -> None:
    if ignored:
        first, why = ignored[0]
        more = f" (+{len(ignored) - 1} more)" if len(ignored) > 1 else ""
        _note(f"{len(ignored)} RECORD row(s) of {where} name a path outside the tree and were ignored: {safepath.shown(first)!r} ({why}){more}")


def _write_stamp(root: Path, paths) -> None:
    base = str(root)
    stamp = {rel: _stat(os.path.join(base, rel)) for rel in sorted(paths)}
    atomic_write_bytes(root / STAMP, json.dumps(stamp, sort_keys=True).encode())


def _read_stamp(root: Path) -> dict:
    try:
        return json.loads(_read(root, STAMP))
    except (OSError, ValueError):
        return {}


def _extra_files(root: Path, rec: dict, version: str) -> list[str]:
    """Files in the unpacked tree that the wheel does not hold (they would be indexed as SGLang's)."""
    out = []
    bound = os.path.realpath(root)
    for top in ("sglang", f"sglang-{version}.dist-info"):
        base = root / top
        if not inside(base, bound):  # the folder itself links out: not ours to list
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
            rel_dir = Path(dirpath).relative_to(root).as_posix()
            for fn in filenames:
                rel = f"{rel_dir}/{fn}"
                if rel not in rec:
                    out.append(rel)
    return out


def check(root: Path, version: str, full: bool = False) -> Optional[Check]:
    """Compare the unpacked tree with RECORD: stats only where the stamp still matches (unless
    ``full``), sha256 elsewhere. None when RECORD itself is gone (the whole tree is suspect)."""
    ignored: list = []
    rec = record(root, version, ignored)
    _note_ignored(f"the cached sglang=={version}", ignored)
    if not rec:
        return None
    stamp = {} if full else _read_stamp(root)
    res = Check(files=len(rec))
    base = str(root)  # joined as text: a warm run stats every file of the wheel, and Path objects
    for rel, (h, size) in rec.items():  # cost more than the stat itself
        now = _stat(os.path.join(base, rel))
        if now is None:
            res.differ.append(rel)
            continue
        if stamp.get(rel) == now:
            continue
        if h is None:  # RECORD does not hash itself
            continue
        res.hashed += 1
        try:
            data = _read(root, rel)
        except OSError:  # a link, a pipe, or gone meanwhile: not the wheel's file
            res.differ.append(rel)
            continue
        if (size is not None and len(data) != size) or _digest(data) != h:
            res.differ.append(rel)
    res.extra = _extra_files(root, rec, version)
    if res.hashed and not res.differ:  # touched, not changed: remember the new times
        try:
            _write_stamp(root, rec)
        except OSError:
            pass  # a read-only cache: the same files are hashed again next time, nothing else
    return res


def unpack(wheel: Path, dest: Path, version: str, only: Optional[list[str]] = None) -> int:
    """Write the wanted members of ``wheel`` under ``dest`` (just ``only`` when given), each checked
    against RECORD as it is written, then the stamp. Returns how many files were written.
    Raises :class:`WheelDamaged` when the wheel is cut short or differs from its own RECORD."""
    try:
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if wanted(n, version)]
            rec_name = f"sglang-{version}.dist-info/RECORD"
            if rec_name not in names:
                raise WheelDamaged(f"{wheel.name} has no {rec_name}")
            for n in names:  # one unsafe name and the wheel is not used at all
                try:
                    safepath.clean(n)
                except safepath.UnsafePath as e:
                    raise WheelDamaged(f"{wheel.name} holds a member that would be written outside the tree: {safepath.shown(n)!r} ({e})") from None
            # sizes as the zip's headers declare them (zipfile never inflates a member past its
            # declared size): a bomb is refused before anything is inflated or written
            total = 0
            for n in names:
                size = z.getinfo(n).file_size
                total += size
                if size > MAX_MEMBER_BYTES or total > MAX_WHEEL_BYTES:
                    raise WheelDamaged(f"{wheel.name} holds more than any SGLang release: {safepath.shown(n)!r} unpacks to "
                                       f"{size:,} bytes ({total:,} so far; limits {MAX_MEMBER_BYTES:,} a file, {MAX_WHEEL_BYTES:,} in all)")
            ignored: list = []
            rec = _parse_record(z.read(rec_name).decode("utf-8"), version, ignored)
            _note_ignored(wheel.name, ignored)
            todo = names if only is None else [n for n in names if n in set(only)]
            for n in todo:
                try:
                    path = safepath.under(dest, n)  # a folder on the way swapped for a link: refused
                except safepath.UnsafePath as e:
                    raise WheelDamaged(f"{n} in {wheel.name} cannot be written under {dest} ({e})") from None
                data = z.read(n)
                h, size = rec.get(n, (None, None))
                if h is not None and (_digest(data) != h or (size is not None and len(data) != size)):
                    raise WheelDamaged(f"{n} in {wheel.name} differs from the wheel's RECORD")
                atomic_write_bytes(Path(path), data)  # a racing run sees the old file or the new one
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile, ValueError, UnicodeDecodeError) as e:
        raise WheelDamaged(f"{wheel.name} is not a readable wheel ({e})") from None
    for extra in (set(only or ()) - set(names)):  # in the tree, not in the wheel: not SGLang's
        try:
            safepath.unlink_in(dest, extra)  # by its folder's descriptor: never a file outside dest
        except (OSError, safepath.UnsafePath):
            pass
    _write_stamp(dest, rec)
    return len(todo)
