"""Derived data (the runtime view, the kernel map) cached on disk by everything it depends on (the tree's
content, recon's code and data, device, model, server flags and environment: the one key scheme,
:func:`recon.derived.scenario_key`), so a warm query or spec reads it instead of evaluating SGLang's
code again."""

from __future__ import annotations

from ..cache import cache_dir, load_pickle, save_pickle
from ..derived import scenario_key

__all__ = ["load_or_build", "scenario_key"]


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
