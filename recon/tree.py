"""Loading a target as one object: its index, its graph, and how they were obtained.

The graph is cached per target next to the manifest, keyed by the digest of every file's content,
and named by that digest too (a hard link), so a copy of a tree loaded for the first time finds it.
A warm run with nothing changed unpickles it; a run after a few body edits patches those files in
place (:func:`recon.graph.update_graph`); anything else rebuilds it from the facts.
Python's cyclic GC is paused while these large, acyclic structures are built or loaded: it would
otherwise rescan them over and over and triple the time.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from .cache import FORMAT, Link, cache_dir, code_fingerprint, load_entry, load_pickle, save_pickle, wait_for_writers, write_behind
from .indexer import Index, build_index, load_facts
from .progress import phase
from .target import Target

if TYPE_CHECKING:  # the graph module and networkx load when a graph is built or patched, not on a warm run
    import networkx as nx

    from .graph import Resolver

_PATCH_LIMIT = 20  # more changed files than this: rebuild rather than patch


# A command loads one tree and exits: what a load allocates lives to the end, so it is frozen out of
# the cyclic collector's reach. A process that loads many trees and drops most of them (the test
# suite) turns this off and freezes only what it keeps: frozen garbage is never collected, and
# unfreezing it costs a collection of the whole heap.
FREEZE_AFTER_LOAD = True


def _freeze() -> None:
    if FREEZE_AFTER_LOAD:
        gc.freeze()


@contextlib.contextmanager
def paused_gc(freeze: bool = False):
    """No cyclic GC inside; with ``freeze``, what was allocated meanwhile is frozen before it is
    turned back on (else the first collection after it walks every object made while paused:
    about 2 s after a cold run)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            _freeze()
        if was:
            gc.enable()


class _CachedGraph:
    """A graph known to be in the cache for this tree's content, unpickled on first use.

    A warm command whose products are all cached (a kernel map, a spec) never reads the graph;
    unpickling it (tens of MB) was most of such a run. Copies of a :class:`Tree` share this holder,
    so the graph is still loaded once.
    """

    def __init__(self, path: Path, key: str, index: Index, rpath: Path):
        self.path, self.key, self.index, self.rpath = path, key, index, rpath
        self.graph: Optional[nx.MultiDiGraph] = None
        self.resolver: Optional[Resolver] = None  # set only when the entry was gone and the graph rebuilt

    def get(self) -> nx.MultiDiGraph:
        if self.graph is None:
            with paused_gc(freeze=True):
                cached = load_pickle(self.path)
                if cached is not None and cached[0] == self.key:
                    self.graph = cached[1]
                else:  # pruned or replaced since it was checked: build it as a cold run would
                    from .graph import build_graph

                    graph, self.resolver = build_graph(self.index.all_facts())
                    graph.graph["digests"] = {p: m.digest for p, m in self.index.files.items()}
                    write_behind([(self.path, (self.key, graph)), (self.rpath, self.resolver)])
                    self.graph = graph
        return self.graph


@dataclass
class Tree:
    target: Target
    index: Index
    graph: nx.MultiDiGraph  # absent from the instance until first use when only cached (see __getattr__)
    timings: dict = field(default_factory=dict)
    _resolver: Optional[Resolver] = None
    key: str = ""  # digest of every file's content and of the code that indexed it
    _lazy: Optional[_CachedGraph] = None
    _rpath: Optional[Path] = None  # where the resolver of the cached graph is kept, when not under the target

    def __getattr__(self, name: str):
        # called only when ``graph`` is not yet in the instance: read the cached graph now
        lazy = self.__dict__.get("_lazy")
        if name != "graph" or lazy is None:
            raise AttributeError(name)
        t0 = time.perf_counter()
        graph = lazy.get()
        self.timings["graph_s"] = self.timings.get("graph_s", 0.0) + time.perf_counter() - t0
        if lazy.resolver is not None:
            self.timings["graph"] = "built"
            if self._resolver is None:
                self._resolver = lazy.resolver
        self.__dict__["graph"] = graph
        return graph

    @property
    def resolver(self) -> Resolver:
        if self._resolver is None:
            self.graph  # noqa: B018 - a lazily cached graph decides whether the stored resolver holds
            rpath = self._rpath or _graph_paths(self.target.key)[1]
            with paused_gc(freeze=True):
                self._resolver = load_pickle(rpath) if self.timings.get("graph") == "cached" else None
                if self._resolver is None:
                    from .graph import Resolver

                    self._resolver = Resolver(self.index.py_facts())
                    try:
                        save_pickle(rpath, self._resolver)
                    except OSError:
                        pass  # a full, read-only or concurrently pruned cache costs speed, not results
            _freeze()
        return self._resolver

    def read_text(self, relpath: str) -> str:
        return self.target.source.read(relpath).decode("utf-8", "replace")

    def lines(self, relpath: str) -> list[str]:
        return self.read_text(relpath).splitlines()


def _graph_paths(key: str) -> tuple[Path, Path]:
    base = cache_dir() / "graph"
    # the resolver is an object of recon's own classes: one pickled by other code is not reused
    fp = code_fingerprint("facts", "pyfacts", "indexer", "graph")
    return base / f"{key}.graph.pkl", base / f"{key}.{fp}.resolver.pkl"


def _content_paths(key: str) -> tuple[Path, Path]:
    """The graph and resolver of a content key, whatever target had it: a copy of a tree, or a
    checkout whose files are byte for byte another's, finds the graph built for the first."""
    return _graph_paths(f"content-{key}")


def _content_key(index: Index) -> str:
    h = hashlib.sha1(code_fingerprint("facts", "pyfacts", "indexer", "graph").encode())
    for p, m in index.files.items():
        h.update(f"{p}\0{m.digest}\n".encode())
    return h.hexdigest()


def load(target: Target, progress: Optional[Callable[[int, int], None]] = None) -> Tree:
    """Index ``target`` and return it with its graph, from the cache wherever that is still true."""
    timings: dict = {}
    wait_for_writers()
    gpath, rpath = _graph_paths(target.key)
    # no graph cached for this target at all: build it while the workers extract
    builder = None
    if not gpath.exists():
        from .graph import GraphBuilder

        builder = GraphBuilder()
    jobs: list = []  # cache writes, done behind the answer by one forked child
    with paused_gc(freeze=True):
        t0 = time.perf_counter()
        with phase("index") as ph:
            def advance(done: int, total: int) -> None:
                ph.advance(done, total, "reading changed files")
                if progress:
                    progress(done, total)

            index = build_index(target, advance, on_facts=builder.add if builder else None, deferred=jobs)
            ph.advance(index.stats["files"], index.stats["files"], f"{index.stats['files']} files, {index.stats['extracted']} read")
        timings["index_s"] = time.perf_counter() - t0
        key = _content_key(index)
        t1 = time.perf_counter()
        graph_phase = phase("graph")
        gph = graph_phase.__enter__()  # ended below, once the graph is known (built, patched or cached)
        lazy = None
        if builder is None and _cached_key(gpath) == key:  # the graph for this content: read it when used
            lazy = _CachedGraph(gpath, key, index, rpath)
        cpath, crpath = _content_paths(key)
        if builder is not None and _cached_key(cpath) == key:
            # a target seen for the first time whose content a graph was built for: that graph (the
            # nodes the builder made meanwhile are dropped), named for this target too, so that an
            # edit to it later is patched rather than rebuilt
            lazy = _CachedGraph(cpath, key, index, crpath)
            jobs += [(gpath, Link(cpath)), (rpath, Link(crpath))]
        cached = load_pickle(gpath) if builder is None and lazy is None else None
        graph = resolver = None
        how = "built"
        if lazy is not None:
            how = "cached"
        elif cached is not None and cached[0] == key:
            graph, how = cached[1], "cached"
        elif cached is not None:
            graph, resolver, how = _patch(cached, index, rpath)
        if lazy is not None:
            pass
        elif graph is None and builder is not None:
            for p in index.files:
                if p not in builder.paths and (f := index.facts(p)) is not None:
                    builder.add(f)
            graph, resolver = builder.finish()
            graph.graph["digests"] = {p: m.digest for p, m in index.files.items()}
        elif graph is None:
            from .graph import build_graph

            graph, resolver = build_graph(index.all_facts())
            graph.graph["digests"] = {p: m.digest for p, m in index.files.items()}
            how = "built"
        if how != "cached":
            jobs.append((gpath, (key, graph)))
            if how == "built":  # a patch keeps the interface, so the stored resolver still holds
                jobs.append((rpath, resolver))
            jobs += [(cpath, Link(gpath)), (crpath, Link(rpath))]
        if jobs:
            write_behind(jobs)
        timings["graph_s"] = time.perf_counter() - t1
        timings["graph"] = how
        gph.note = how if graph is None else f"{how}, {graph.number_of_nodes()} nodes, {_edges(graph)} edges"
        graph_phase.__exit__(None, None, None)
    tree = Tree(target, index, graph, timings, resolver)
    tree.key = key
    if lazy is not None:
        del tree.__dict__["graph"]
        tree._lazy = lazy
        tree._rpath = lazy.rpath
    # the graph and index live as long as the process: keep the collector from rescanning them
    _freeze()
    return tree


def _edges(graph: nx.MultiDiGraph) -> int:
    """``graph.number_of_edges()`` without networkx's per-node views (a tenth of the time)."""
    return sum(len(keys) for nbrs in graph._adj.values() for keys in nbrs.values())


def _cached_key(gpath: Path) -> Optional[str]:
    """The content key of the graph cached at ``gpath`` (signature checked), read from the head of
    its pickle without unpickling the graph; None when absent, unsigned or of another layout."""
    import io
    import pickletools

    body = load_entry(gpath)
    if body is None:
        return None
    # the entry is pickle.dumps((FORMAT, (key, graph))): its first values are FORMAT, then the key
    try:
        values = []
        for op, arg, _pos in pickletools.genops(io.BytesIO(bytes(body[:4096]))):
            if op.name in ("PROTO", "FRAME", "MEMOIZE", "MARK"):
                continue
            if op.name not in ("BININT1", "BININT2", "BININT", "SHORT_BINUNICODE", "BINUNICODE"):
                return None
            values.append(arg)
            if len(values) == 2:
                break
    except Exception:  # not a pickle of that shape: the full load decides
        return None
    if len(values) != 2 or values[0] != FORMAT or not isinstance(values[1], str):
        return None
    return values[1]


def _patch(cached, index: Index, rpath: Path):
    """Patch a cached graph for a few edited files; (None, None, "built") when a rebuild is needed.

    What changed is read from the digests the graph was built from, not from the manifest, so a
    run that stopped between writing the two still patches the right files.
    """
    graph = cached[1]
    before: dict = graph.graph.get("digests", {})
    now = {p: m.digest for p, m in index.files.items()}
    changed = [p for p, d in now.items() if before.get(p) != d]
    removed = [p for p in before if p not in now]
    py_added_or_removed = [p for p in removed + [p for p in changed if p not in before] if p.endswith(".py")]
    if py_added_or_removed or len(changed) > _PATCH_LIMIT:
        return None, None, "built"
    resolver = load_pickle(rpath)
    if resolver is None:
        return None, None, "built"
    from .graph import update_graph

    for relpath in changed:
        if not relpath.endswith(".py"):
            continue  # JSON and C++ sources: read by checks from the index, not part of the patch
        new = index.facts(relpath)
        old = load_facts(before[relpath])
        if new is None or old is None or not update_graph(graph, resolver, old, new):
            return None, None, "built"
    for p in removed:
        before.pop(p, None)
    before.update({p: now[p] for p in changed})
    return graph, resolver, "patched"
