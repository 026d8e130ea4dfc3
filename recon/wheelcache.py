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
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .cache import atomic_write_bytes

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


def _parse_record(text: str, version: str) -> dict[str, tuple[Optional[str], Optional[int]]]:
    out = {}
    for row in csv.reader(io.StringIO(text)):
        if not row or not wanted(row[0], version):
            continue
        h = row[1] if len(row) > 1 and row[1] else None
        size = int(row[2]) if len(row) > 2 and row[2].isdigit() else None
        out[row[0]] = (h, size)
    return out


def _record_path(root: Path, version: str) -> Path:
    return root / f"sglang-{version}.dist-info" / "RECORD"


def record(root: Path, version: str) -> Optional[dict]:
    """RECORD of the unpacked tree (path -> (sha256 field, size)), or None when it is gone."""
    try:
        return _parse_record(_record_path(root, version).read_text("utf-8"), version)
    except (OSError, UnicodeDecodeError, csv.Error, ValueError):
        return None


def _stat(p: Path) -> Optional[list]:
    try:
        st = p.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _write_stamp(root: Path, paths) -> None:
    stamp = {rel: _stat(root / rel) for rel in sorted(paths)}
    atomic_write_bytes(root / STAMP, json.dumps(stamp, sort_keys=True).encode())


def _read_stamp(root: Path) -> dict:
    try:
        return json.loads((root / STAMP).read_bytes())
    except (OSError, ValueError):
        return {}


def _extra_files(root: Path, rec: dict, version: str) -> list[str]:
    """Files in the unpacked tree that the wheel does not hold (they would be indexed as SGLang's)."""
    out = []
    for top in ("sglang", f"sglang-{version}.dist-info"):
        base = root / top
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
    rec = record(root, version)
    if not rec:
        return None
    stamp = {} if full else _read_stamp(root)
    res = Check(files=len(rec))
    for rel, (h, size) in rec.items():
        now = _stat(root / rel)
        if now is None:
            res.differ.append(rel)
            continue
        if stamp.get(rel) == now:
            continue
        if h is None:  # RECORD does not hash itself
            continue
        res.hashed += 1
        data = (root / rel).read_bytes()
        if (size is not None and len(data) != size) or _digest(data) != h:
            res.differ.append(rel)
    res.extra = _extra_files(root, rec, version)
    if res.hashed and not res.differ:  # touched, not changed: remember the new times
        _write_stamp(root, rec)
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
            rec = _parse_record(z.read(rec_name).decode("utf-8"), version)
            todo = names if only is None else [n for n in names if n in set(only)]
            for n in todo:
                data = z.read(n)
                h, size = rec.get(n, (None, None))
                if h is not None and (_digest(data) != h or (size is not None and len(data) != size)):
                    raise WheelDamaged(f"{n} in {wheel.name} differs from the wheel's RECORD")
                atomic_write_bytes(dest / n, data)  # a racing run sees the old file or the new one
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile, ValueError) as e:
        raise WheelDamaged(f"{wheel.name} is not a readable wheel ({e})") from None
    for extra in (set(only or ()) - set(names)):  # in the tree, not in the wheel: not SGLang's
        try:
            (dest / extra).unlink()
        except OSError:
            pass
    _write_stamp(dest, rec)
    return len(todo)
