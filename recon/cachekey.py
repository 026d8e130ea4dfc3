"""Cache entries recon can trust: each is signed with a per-user key kept outside the cache.

Derived entries are pickles (graphs, resolvers, findings) and marshalled facts: loading a pickle
runs whatever code it names, so whoever can write the cache directory (a cache restored across pull
requests in CI, a folder shared between users) could run code in recon. Every entry is therefore
written as ``MAGIC + HMAC-SHA256(key, body) + body`` and its MAC is checked before the body is
unpickled: an entry that is unsigned, tampered with or signed with another key is a miss (rebuilt),
never loaded. A signature was chosen over a format that cannot run code because the graph and
resolver are networkx and recon objects whose pickles load several times faster than any
code-free rebuild of them would.

The key is 32 random bytes in ``$RECON_CACHE_KEY_FILE``, else ``$XDG_CONFIG_HOME/recon/cache.key``
(``~/.config/recon/cache.key``), made 0600 on first use. A key file that others can read or that
another user owns is not used; without a usable key the run signs with a key of its own (entries
it writes are then misses for later runs: slower, never wrong) and says so once.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import sys
import tempfile
from pathlib import Path
from typing import Optional

MAGIC = b"recon-signed-1\n"
_MAC_LEN = 32
KEY_ENV = "RECON_CACHE_KEY_FILE"

_key: Optional[bytes] = None


def key_path() -> Path:
    env = os.environ.get(KEY_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "recon" / "cache.key"


def _read_key(path: Path) -> bytes:
    """The key in ``path``; OSError with the reason when it cannot be trusted."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise OSError(f"{path} belongs to another user")
        if st.st_mode & 0o077:
            raise OSError(f"{path} can be read or written by others (chmod 600 it)")
        data = f.read(1024)
    if len(data) < 32:
        raise OSError(f"{path} holds fewer than 32 bytes")
    return data


def _make_key(path: Path) -> bytes:
    """A new key at ``path``, written whole before it appears (a racing twin's key wins)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cache.key.")  # 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
        try:
            os.link(tmp, path)  # never replaces a key another run made meanwhile
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    return _read_key(path)


def key() -> bytes:
    global _key
    if _key is not None:
        return _key
    path = key_path()
    try:
        try:
            _key = _read_key(path)
        except FileNotFoundError:
            _key = _make_key(path)
    except OSError as e:
        _key = secrets.token_bytes(32)
        why = e.strerror or str(e)
        sys.stderr.write(f"recon: no usable cache key ({why}: {path}); cache entries written now are not reused by later runs\n")
        sys.stderr.flush()
    return _key


def _mac(body) -> bytes:
    return hmac.new(key(), body, hashlib.sha256).digest()


def seal(body: bytes) -> bytes:
    """``body`` as a signed cache entry."""
    return MAGIC + _mac(body) + body


def unseal(blob: bytes) -> Optional[memoryview]:
    """The body of a signed entry, or None when it is unsigned, tampered with or another key's."""
    head = len(MAGIC) + _MAC_LEN
    if len(blob) < head or not blob.startswith(MAGIC):
        return None
    view = memoryview(blob)
    body = view[head:]
    if not hmac.compare_digest(bytes(view[len(MAGIC) : head]), _mac(body)):
        return None
    return body
