"""The scenarios the suite builds, each once per test session (per xdist worker).

recon caches trees, findings, runtime views and kernel maps on disk, but a test session also built
the same things again in-process: every CLI invocation (CliRunner) loaded its released tree anew
(index walk, graph unpickle, and every device-independent result kept on the tree lost), and tests
built the same (tree, device, model, flags) view or map in several modules. Here they are built
once, by recon's own public functions, and shared:

- :func:`install_tree_memo` wraps ``recon.tree.load`` so a released wheel (a tree under the cache's
  ``wheels/``, whose content never changes) is loaded once per cache folder while it is in use; a
  test with its own cache folder, and every synthetic or copied tree, still gets a real load. Two
  workers that need the same cold tree take turns (a file lock), so the second reads what the first
  cached. The memo keeps the ``RECON_TEST_TREES`` (default 1) trees used last, and any tree a test
  or fixture still holds: a worker that held every release it met for the whole session reached
  6 GB; one dropped is read back from the disk cache when a later module asks for it.
- :func:`view` and :func:`kernel_map`: one runtime view / kernel map per scenario, read-only.

A test that changes what it gets must build its own (``recon.runtime.build``, ``build_map``) or
copy it. When the way a scenario is built changes, this file is the one place to adapt.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import fcntl
import os
import time
import weakref
from pathlib import Path

_TREES: collections.OrderedDict = collections.OrderedDict()  # the trees used last, most recent at the end
_ALIVE: dict = {}  # key -> weak references to every copy handed out: a tree something still holds
_VIEWS: dict = {}
_MAPS: dict = {}
_KEEP = max(1, int(os.environ.get("RECON_TEST_TREES", "1")))
BEFORE_LOAD = None  # conftest's collector, run before each real load
ON_LOAD = None  # conftest's profile log of each real load: (target, CPU seconds, released?)


def _keep(key, tree) -> None:
    """``tree`` used now: it stays; the least recently used beyond the bound are dropped with the
    views and maps built on them (a tree a test or fixture still holds lives on in ``_ALIVE``)."""
    _TREES[key] = tree
    _TREES.move_to_end(key)
    while len(_TREES) > _KEEP:
        old_key, old = _TREES.popitem(last=False)
        for memo in (_VIEWS, _MAPS):
            for k in [k for k in memo if k[0] == old.key]:
                del memo[k]
        # the memo's objects refer back to the tree (a gate model holds its tree): the cycle is cut
        # here so that reference counting frees the tree as soon as no test holds it, not at the
        # next collection (a test that still holds it rebuilds what it asks for). Freezing released
        # trees out of the collector's reach instead (tried) kept every tree alive at the time
        # of a freeze, garbage included: 6.2 GB peak.
        old.__dict__.get("_recon_memo", {}).clear()
        _drop_graphs([old] + [t for t in (r() for r in _ALIVE.get(old_key, ())) if t is not None and t is not old])


def _drop_graphs(copies) -> None:
    """A tree out of the memo keeps no graph it can read again: a module fixture that still holds
    it (three releases in one test file) held three graphs and three memos, the suite's peak. The
    copies of a tree share one cached-graph holder; the graph is unpickled again on the next use
    and the memo made again. A graph built in memory (no cache entry behind it) stays."""
    lazy = copies[0].__dict__.get("_lazy")
    shared = getattr(lazy, "graph", None)
    for tree in copies:
        graph = tree.__dict__.get("graph")
        _cut_graph_views(graph)
        if shared is not None and lazy.resolver is None and graph is shared:
            del tree.__dict__["graph"]
    if shared is not None and lazy.resolver is None:
        _cut_graph_views(shared)
        lazy.graph = None
    # the file facts made from the store (a fifth of a large release's memory) go with it: every
    # copy shares the one index, and a fact read again equals the one dropped
    copies[0].index.release_facts()


def touch(trees) -> None:
    """The released trees a test is handed (its fixtures' values) count as used now, as a load
    does: the memo keeps the trees used last, whether a test loaded them or a module fixture holds
    them, and a tree held but not used lately carries no graph or memo meanwhile."""
    keyed = {}
    for tree in trees:
        key = _released_key(tree.target)
        if key is not None:
            keyed.setdefault(key, tree)
    if len(keyed) > _KEEP:
        return  # a test that uses more trees than the memo keeps: none is dropped under it
    for key, tree in keyed.items():
        _keep(key, _TREES.get(key) or tree)


def _cut_graph_views(graph) -> None:
    """A networkx graph keeps the views it hands out (``G.edges``, ``G.in_edges``...) in its own
    ``__dict__``, and each view refers back to the graph: a cycle, so the whole graph (hundreds of
    thousands of dicts) waited for the collector, or, frozen, stayed. The views are dropped here (the
    graph makes them again on use)."""
    if graph is None:
        return
    for name, value in list(vars(graph).items()):
        if getattr(value, "_graph", None) is graph:
            del graph.__dict__[name]


def _released_key(target):
    """The memo key of a target that is a released wheel in the cache, else None."""
    from recon.cache import cache_dir

    root = getattr(target.source, "root", None)
    if root is None or target.kind not in ("wheel", "dir"):
        return None
    wheels = Path(os.path.realpath(cache_dir() / "wheels"))
    root = Path(os.path.realpath(root))
    if not root.is_relative_to(wheels):
        return None
    return (str(wheels), target.kind, target.key, target.package_prefix, str(root))


@contextlib.contextmanager
def _turn(name: str):
    """One process at a time builds a cold tree (xdist workers share the cache folder)."""
    from recon.cache import cache_dir

    with open(cache_dir() / f".tests-{name}.lock", "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _held(key):
    """A copy of the tree ``key`` that a test or fixture still holds, else None."""
    refs = _ALIVE.get(key, [])
    refs[:] = [r for r in refs if r() is not None]
    return refs[0]() if refs else None


def _handed(key, tree):
    if not any(r() is tree for r in _ALIVE.get(key, ())):
        _ALIVE.setdefault(key, []).append(weakref.ref(tree))
    return tree


def install_tree_memo() -> None:
    import recon.tree
    from recon.cache import wait_for_writers
    from recon.engine.interp import tree_memo

    real = getattr(recon.tree.load, "__wrapped__", recon.tree.load)
    # trees come and go here: recon's own freeze after a load would freeze whatever garbage exists
    # at that moment too; conftest collects first and freezes only the survivors (its _collect)
    recon.tree.FREEZE_AFTER_LOAD = False

    def load_now(target, progress, released):
        if BEFORE_LOAD is not None:
            BEFORE_LOAD()
        c0 = time.process_time()
        tree = real(target, progress)
        if ON_LOAD is not None:
            ON_LOAD(target, time.process_time() - c0, released)
        return tree

    def load(target, progress=None):
        key = _released_key(target)
        if key is None:
            return load_now(target, progress, False)
        hit = _TREES.get(key) or _held(key)
        if hit is None:
            with _turn(target.key):
                hit = load_now(target, progress, True)
                wait_for_writers()  # the cache entries this load writes behind, before the next worker reads
            tree_memo(hit)  # made now, so every copy below shares one memo of device-independent results
        _keep(key, hit)
        if hit.target is target:
            return _handed(key, hit)
        # the caller's target (its reason, its label) over the shared index, graph and memo
        shared = copy.copy(hit)
        shared.target = target
        return _handed(key, shared)

    load.__wrapped__ = real
    recon.tree.load = load


def view(tree, device: str, model: str = "dsv4", flags: str = ""):
    """The runtime view for the scenario, as ``recon.runtime.build`` makes it (shared: read only)."""
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.runtime import build, parse_server_args

    key = (tree.key, id(tree.index), device, model, flags)
    v = _VIEWS.get(key)
    if v is None:
        ctx = CheckContext(tree, load_device(device), load_model(model))
        v = _VIEWS[key] = build(ctx, parse_server_args(tree, flags))
    return v


def kernel_map(tree, device: str, model: str = "dsv4", env=None, server_flags=None):
    """The kernel map for the scenario, as ``recon.kernels.kmap.build_map`` makes it (shared: read only)."""
    from recon.checks import CheckContext
    from recon.kernels.kmap import build_map
    from recon.profiles import load_device, load_model
    from recon.runtime import parse_env

    key = (tree.key, id(tree.index), device, model, tuple(env or ()), repr(sorted((server_flags or {}).items())))
    m = _MAPS.get(key)
    if m is None:
        ctx = CheckContext(tree, load_device(device), load_model(model), env=parse_env(env or []),
                           server_flags=dict(server_flags or {}))
        m = _MAPS[key] = build_map(ctx)
    return m
