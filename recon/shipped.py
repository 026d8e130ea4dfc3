"""Which top-level modules a pinned distribution's wheel installs, read from the wheel itself.

A distribution's name says little about what it installs: the ``sgl-kernel`` / ``sglang-kernel``
wheels a release pins carry ``triton_kernels`` (and, in some versions, ``deep_gemm`` and
``flash_attn``) beside ``sgl_kernel``. SGLang probes those with ``importlib.util.find_spec``, so
whether they import follows from the pinned wheel's ``RECORD``, not from any requirement's name.

The wheel is fetched with ``pip download --no-deps`` (a few hundred MB for the kernel wheels); only
the derived list of top-level names is kept, signed, in recon's cache (``shipped/``), and the wheel
is deleted. When the wheel cannot be fetched (offline, no wheel for Linux x86_64), the answer is
None with the reason, and callers fall back to deciding by names, saying so.
``RECON_DIST_MODULES=off`` turns the reading off (the offline test suite does, to stay small).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

from .cache import cache_dir, load_entry, save_entry

# Distributions read this way: the kernel wheels a release pins, which ship more top-level
# packages than their own. Others install the package their name says (recon.engine.packages).
BUNDLES = frozenset({"sgl_kernel", "sglang_kernel"})
# Linux x86_64 wheels of any manylinux level, for a CPython the kernel wheels' abi3 tags cover.
_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64")
_PYTHONS = ("3.11", "3.12")
_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")

# (normalized dist, version) -> (frozenset of modules or None, why none). What this process read.
_MEMO: dict = {}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def enabled() -> bool:
    return os.environ.get("RECON_DIST_MODULES", "").strip().lower() not in ("off", "0", "no", "false")


def modules(dist: str, version: str) -> tuple[Optional[frozenset], str]:
    """The top-level modules ``dist==version``'s wheel installs, or None and why they are unknown."""
    key = (norm(dist), version)
    if key in _MEMO:
        return _MEMO[key]
    if not enabled():
        return None, "reading required wheels is off (RECON_DIST_MODULES=off)"
    if not _VERSION_RE.match(version):
        got = (None, f"{dist}=={version}: not a version recon fetches")
    else:
        got = _cached(key) or _fetch(dist, version)
        if got[0] is not None:
            save_entry(_store(key), json.dumps(sorted(got[0])).encode())
    _MEMO[key] = got
    return got


def _store(key: tuple) -> Path:
    return cache_dir() / "shipped" / f"{key[0]}-{key[1]}.json"


def _cached(key: tuple) -> Optional[tuple]:
    body = load_entry(_store(key))
    if body is None:
        return None
    try:
        names = json.loads(bytes(body).decode())
    except ValueError:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return frozenset(names), ""


def _fetch(dist: str, version: str) -> tuple[Optional[frozenset], str]:
    base = cache_dir() / "downloads"
    try:
        base.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=base, prefix=f".{norm(dist)}-")
    except OSError:
        tmp = tempfile.mkdtemp(prefix="recon-shipped-")
    last = "no output"
    try:
        plats = [a for p in _PLATFORMS for a in ("--platform", p)]
        for py in _PYTHONS:
            # offline, pip gives up after one retry instead of five (every recon command asks once)
            # isolated (-I) from inside the cache, as for SGLang's own wheel (recon.target._download)
            cmd = [sys.executable, "-I", "-m", "pip", "download", "--no-deps", "-q", "--retries", "1", "--timeout", "15",
                   "--only-binary=:all:", *plats,
                   "--python-version", py, "-d", tmp, f"{dist}=={version}"]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=tmp, stdin=subprocess.DEVNULL)
            except (OSError, subprocess.TimeoutExpired) as e:
                return None, f"pip download {dist}=={version} failed: {e}"
            wheels = sorted(Path(tmp).glob("*.whl"))
            if wheels:
                try:
                    return top_levels(wheels[0]), ""
                except (OSError, zipfile.BadZipFile, KeyError) as e:
                    return None, f"the wheel of {dist}=={version} could not be read: {e}"
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"pip download {dist}=={version} found no Linux x86_64 wheel: {last}"
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


_MAX_RECORD_BYTES = 16 << 20  # a kernel wheel's RECORD is tens of KB


def top_levels(wheel: Path) -> frozenset:
    """The importable top-level names a wheel installs, from the paths its RECORD lists."""
    with zipfile.ZipFile(wheel) as z:
        records = [n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
        if records and z.getinfo(records[0]).file_size > _MAX_RECORD_BYTES:  # declared size: never inflated past it
            raise zipfile.BadZipFile(f"{records[0]} declares {z.getinfo(records[0]).file_size:,} bytes, past any real RECORD")
        text = z.read(records[0]).decode("utf-8", "replace") if records else ""
        paths = [row[0] for row in csv.reader(io.StringIO(text)) if row] if text else z.namelist()
    return frozenset(filter(None, (_top(p) for p in paths)))


def _top(path: str) -> Optional[str]:
    parts = path.split("/")
    if parts[0].endswith(".data") and len(parts) > 2 and parts[1] in ("purelib", "platlib"):
        parts = parts[2:]  # installed into site-packages as if at the top
    head = parts[0]
    if len(parts) > 1:  # a folder: a package (or namespace package) unless it is metadata or libs
        return head if head.isidentifier() else None
    if head.endswith(".py"):
        return head[:-3] if head[:-3].isidentifier() else None
    if head.endswith((".so", ".pyd")):
        stem = head.split(".", 1)[0]  # name.cpython-311-x86_64-linux-gnu.so
        return stem if stem.isidentifier() else None
    return None
