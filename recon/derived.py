"""One cache-key scheme for everything recon derives from a tree (findings, the runtime view, the
kernel map): the tree's content key, recon's own code *and* its data files (device and model
profiles, external-op table, measured anchors), and the inputs of the product; for a scenario's
products one function, :func:`scenario_key`.

recon's code and data are hashed once per process: an edit of ``recon/data/external_ops.yaml``
changes every derived key, so the next warm run of any command rebuilds what the edit touches.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

RECON_DIR = Path(__file__).resolve().parent
DATA_DIR = RECON_DIR / "data"  # read through this name so a test can point recon at a copy

_DIGEST: dict = {}


def code_digest() -> bytes:
    """recon's ``*.py`` files and every file under its data directory, hashed once per process."""
    key = (str(RECON_DIR), str(DATA_DIR))
    if key not in _DIGEST:
        h = hashlib.sha1()
        for p in sorted(RECON_DIR.rglob("*.py")):
            h.update(str(p.relative_to(RECON_DIR)).encode())
            h.update(p.read_bytes())
        for p in sorted(q for q in DATA_DIR.rglob("*") if q.is_file()):
            h.update(str(p.relative_to(DATA_DIR)).encode())
            h.update(p.read_bytes())
        _DIGEST[key] = h.digest()
    return _DIGEST[key]


def derived_key(tree, *parts) -> str | None:
    """The key of data derived from ``tree`` for ``parts`` (device, model, flags, ...; bytes are
    hashed as they are, anything else by its repr); None for a tree without a content key."""
    if not getattr(tree, "key", ""):
        return None
    h = hashlib.sha1(tree.key.encode())
    h.update(code_digest())
    h.update(repr(_shipped_state(tree)).encode())
    for p in parts:
        h.update(p if isinstance(p, bytes) else repr(p).encode())
    return h.hexdigest()


def _shipped_state(tree) -> tuple:
    """What the tree's pinned kernel wheels ship, as read now (:mod:`recon.shipped`): a result made
    while a wheel could not be read (offline) is not reused once it can be, nor the other way."""
    from .engine.packages import declared

    decl = declared(tree) if getattr(tree, "target", None) is not None else None
    return decl.shipped_state() if decl is not None else ()


def scenario_key(ctx, *extra) -> str | None:
    """The one key of everything derived for a scenario (its findings, runtime view, kernel map):
    the tree's content, recon's code and data, the device, the model, the server flags and the
    environment, and ``extra`` (what else the product depends on: the rules, a prefill size)."""
    return derived_key(ctx.tree, (ctx.device, ctx.model, ctx.flags_key) + extra)
