"""The runtime view as derived data: cached on disk by everything it depends on (the tree's
content, recon's code, device, model, server flags and environment), so a warm query or spec
reads it instead of evaluating SGLang's code again."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..cache import cache_dir, load_pickle, save_pickle


def _key(ctx) -> str | None:
    if not getattr(ctx.tree, "key", ""):
        return None
    h = hashlib.sha1(ctx.tree.key.encode())
    here = Path(__file__).resolve().parent.parent
    for p in sorted(here.rglob("*.py")):
        h.update(p.read_bytes())
    for p in sorted((here / "data").rglob("*.yaml")):
        h.update(p.read_bytes())
    h.update(repr(ctx.device).encode())
    h.update(repr(ctx.model).encode())
    h.update(ctx.flags_key.encode())
    return h.hexdigest()


def view_for(ctx):
    """The view for the context, from the cache when it is there (and stored when it was not)."""
    from . import runtime_view

    key = _key(ctx)
    store = cache_dir() / "runtime" / f"{key}.pkl" if key else None
    if store is not None:
        hit = load_pickle(store)
        if hit is not None:
            ctx.cache[("runtime_view", ctx.flags_key)] = hit
            return hit
    view = runtime_view(ctx)
    if store is not None:
        save_pickle(store, view)
    return view
