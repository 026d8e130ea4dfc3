"""Derived data (the runtime view, the kernel map) cached on disk by everything it depends on (the tree's
content, recon's code, device, model, server flags and environment), so a warm query or spec
reads it instead of evaluating SGLang's code again."""

from __future__ import annotations

from ..cache import cache_dir, load_pickle, save_pickle


def derived_key(ctx, *extra) -> str | None:
    """The cache key of data derived from the tree for the context's device, model, flags and env
    (and ``extra``): recon's one key scheme (:mod:`recon.derived`); None for a tree without a
    content key."""
    from ..derived import derived_key as key

    return key(ctx.tree, (ctx.device, ctx.model, ctx.flags_key) + extra)


def load_or_build(area: str, key: str | None, build):
    """What ``build()`` returns, read from ``area`` of the cache when stored under ``key``."""
    store = cache_dir() / area / f"{key}.pkl" if key else None
    if store is not None:
        hit = load_pickle(store)
        if hit is not None:
            return hit
    got = build()
    if store is not None:
        save_pickle(store, got)
    return got
