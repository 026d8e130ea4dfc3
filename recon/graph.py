"""The dispatch graph: one ``networkx.MultiDiGraph`` built from the index's facts.

Nodes are keyed by qualified name (``sglang.srt.utils.common.is_sm120_supported``) and carry
``kind``, ``name``, ``path`` and ``line``; every edge carries ``kind``, ``path`` and ``line`` of the
code that made it. Node kinds: module, class, function, triton_kernel, native_op, capture_site,
config_template. Edge kinds: defines, imports, calls, calls_dynamic, launches, wraps, inherits,
overrides, captures, reads_config.

Name resolution is where the value is: import aliases (also relative and function-local ones),
re-exports through ``__init__``, star imports, ``self.method()`` through the class hierarchy,
attributes typed by ``self.x = Class(...)``, callables defined by assignment
(``is_sm120_supported = lru_cache(maxsize=1)(partial(...))``) and alias chains (``a = b = ...``).
A call whose receiver cannot be typed (``self.quant_method.apply``) becomes ``calls_dynamic``
edges to every in-tree method of that name, when there are few enough to be informative.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Iterable, Optional

import networkx as nx

from .facts import FileFacts
from .names import MODEL_FORWARD

# A Triton kernel: decorated with triton.jit (also under autotune/heuristics, or jit imported bare).
_JIT = re.compile(r"(^|\.)(jit|autotune|heuristics)(\(\))?$")
_NATIVE_PREFIXES = ("torch.ops.", "sgl_kernel.", "torch._C.", "flashinfer.", "deep_gemm.", "triton_kernels.")
DYNAMIC_CAP = 120  # an untyped receiver's method links to at most this many same-named methods
# with torch.cuda.graph(...), graph_ctx(...), ...: searched in a With's contexts joined by newlines
_CAPTURE_CTX = re.compile(r"(^|\.)\w*graph\w*\(\)$", re.I | re.M)


_MISS = object()
_SCOPED = object()  # a name whose meaning depends on the enclosing scope, not the module alone
_NOTHING = object()  # a callee that makes no edge


class Resolver:
    """Resolves dotted names in one module's scope to qualified names of in-tree symbols."""

    def __init__(self, files: Iterable[FileFacts]):
        self.symbols: dict[str, dict[str, str]] = defaultdict(dict)  # module -> local -> target
        self.local_imports: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)  # (module, scope) -> local -> target
        self.star: dict[str, list[str]] = defaultdict(list)  # module -> modules it star-imports
        self.nodes: dict[str, str] = {}  # qualname -> kind
        self.classes: dict[str, list[str]] = {}  # class qualname -> raw bases
        self.bases: dict[str, list[str]] = {}  # class qualname -> resolved in-tree bases
        self.methods: dict[str, dict[str, str]] = defaultdict(dict)  # class -> method name -> qualname
        self.by_name: dict[str, list[str]] = defaultdict(list)  # short name -> qualnames (methods)
        self.attr_types: dict[str, dict[str, set]] = {}  # class -> attr -> {(module, scope, value)}
        self.modules: set[str] = set()
        self.scoped_names: dict[str, set] = defaultdict(set)  # module -> names bound inside functions
        self._memo: dict = {}
        self._dyn_memo: dict = {}
        self._head_memo: dict = {}  # (module, name) -> (binding, in-tree target) at module level
        self._class_memo: dict = {}  # (module, scope) -> enclosing class
        for f in files:
            self._collect(f)
        self._resolve_bases()

    def __getstate__(self) -> dict:
        # memos are most of the object and cheap to refill: not worth their pickling and loading
        state = dict(self.__dict__)
        for k in ("_memo", "_dyn_memo", "_mro_memo", "_head_memo", "_class_memo", "_owner_memo"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._memo = {}
        self._dyn_memo = {}
        self._head_memo = {}
        self._class_memo = {}

    def _collect(self, f: FileFacts) -> None:
        # records are read by position: they may be the plain tuples of the store (see facts.to_plain)
        mod = f.module
        if not mod:
            return
        self.modules.add(mod)
        syms = self.symbols[mod]
        class_names = set()
        nodes, classes = self.nodes, self.classes
        scoped = None
        for kind, qualname, _line, _end, _decos, bases, *_ in f.defs:
            q = f"{mod}.{qualname}"
            nodes[q] = kind
            if "." not in qualname:
                syms[qualname] = q
            else:
                if scoped is None:
                    scoped = self.scoped_names[mod]
                scoped.add(qualname.rsplit(".", 1)[1])
            if kind == "class":
                class_names.add(qualname)
                classes[q] = list(bases)
        if class_names:
            for kind, qualname, *_ in f.defs:
                if kind != "class" and "." in qualname:
                    owner, name = qualname.rsplit(".", 1)
                    if owner in class_names:
                        q = f"{mod}.{qualname}"
                        self.methods[f"{mod}.{owner}"][name] = q
                        self.by_name[name].append(q)
        for scope, local, module, name, _line in f.imports:
            if name == "*":
                self.star[mod].append(module)
                continue
            target = f"{module}.{name}" if name else module
            if scope == "":
                syms.setdefault(local, target)
            else:
                self.local_imports[(mod, scope)][local] = target
                self.scoped_names[mod].add(local)
        for scope, target, value, value_kind, _line in f.assigns:
            if scope == "" and value_kind in ("name", "choice") and "." not in target and target not in syms:
                # alias, resolved lazily in this module; a conditional alias (`A if cond else B`)
                # follows its first branch, the one taken when the condition holds (CUDA in practice)
                syms[target] = "=" + value.split("|", 1)[0]
            elif value_kind == "call" and target.startswith("self.") and target.count(".") == 1 and "." in scope:
                owner = scope.rsplit(".", 1)[0]
                if owner in class_names:
                    self.attr_types.setdefault(f"{mod}.{owner}", {}).setdefault(target[5:], set()).add((mod, scope, value[:-2] if value.endswith("()") else value))

    def _resolve_bases(self) -> None:
        for cls, raw in self.classes.items():
            mod = self._module_of(cls)
            out = []
            for b in raw:
                r = self.resolve(mod, "", b)
                if r and self.nodes.get(r) == "class":
                    out.append(r)
            self.bases[cls] = out
        # answers computed while the hierarchy was incomplete may be wrong: forget them
        self._memo.clear()
        self._head_memo.clear()
        self._class_memo.clear()
        self.__dict__.pop("_owner_memo", None)
        self.__dict__.pop("_mro_memo", None)

    def _module_of(self, qual: str) -> str:
        parts = qual.split(".")
        for i in range(len(parts), 0, -1):
            m = ".".join(parts[:i])
            if m in self.modules:
                return m
        return ""

    def mro(self, cls: str) -> list[str]:
        memo = self.__dict__.setdefault("_mro_memo", {})
        hit = memo.get(cls)
        if hit is None:
            hit = memo[cls] = self._mro(cls)
        return hit

    def _mro(self, cls: str) -> list[str]:
        seen, order, stack = set(), [], [cls]
        while stack:
            c = stack.pop(0)
            if c in seen:
                continue
            seen.add(c)
            order.append(c)
            stack.extend(self.bases.get(c, ()))
        return order

    def method(self, cls: str, name: str) -> Optional[str]:
        for c in self.mro(cls):
            q = self.methods.get(c, {}).get(name)
            if q:
                return q
        return None

    def canonical(self, target: str, depth: int = 0) -> Optional[str]:
        """Follow re-exports and aliases until ``target`` names a node or module."""
        if depth > 12 or not target:
            return None
        if target in self.nodes or target in self.modules:
            return target
        # longest module prefix, then the rest as attributes
        parts = target.split(".")
        for i in range(len(parts) - 1, 0, -1):
            mod = ".".join(parts[:i])
            if mod in self.modules:
                rest = parts[i:]
                head = self._lookup_module(mod, rest[0], depth + 1)
                if head is None:
                    return None
                if len(rest) == 1:
                    return head
                return self._attr(head, rest[1:], depth + 1)
        return None

    def _lookup_module(self, mod: str, name: str, depth: int) -> Optional[str]:
        sub = f"{mod}.{name}"
        if sub in self.modules:
            return sub
        t = self.symbols.get(mod, {}).get(name)
        if t is not None:
            if t.startswith("="):
                return self.resolve(mod, "", t[1:], depth + 1)
            return self.canonical(t, depth + 1)
        for star in self.star.get(mod, ()):
            r = self._lookup_module(star, name, depth + 1) if depth < 12 else None
            if r:
                return r
        return None

    def _attr(self, head: str, rest: list[str], depth: int) -> Optional[str]:
        cur = head
        for name in rest:
            kind = self.nodes.get(cur)
            if cur in self.modules and kind is None:
                cur = self._lookup_module(cur, name, depth + 1)
            elif kind == "class":
                cur = self.method(cur, name) or (f"{cur}.{name}" if f"{cur}.{name}" in self.nodes else None)
            else:
                return None
            if cur is None:
                return None
        return cur

    def resolve(self, mod: str, scope: str, dotted: str, depth: int = 0) -> Optional[str]:
        """Qualified name of the in-tree symbol ``dotted`` refers to in (module, scope), or None."""
        if depth > 12:
            return None
        # a remembered answer first (only module-level names are remembered: see below)
        hit = self._memo.get((mod, dotted), _MISS)
        if hit is not _MISS:
            return hit
        if not dotted or "(" in dotted or "[" in dotted or "?" in dotted:
            return None
        head = dotted.split(".", 1)[0]
        if head in ("self", "cls") or head in self.scoped_names.get(mod, ()):
            return self._resolve(mod, scope, dotted, depth)
        # the answer depends on the module alone: remember it (most names repeat within a file)
        r = self._memo[(mod, dotted)] = self._resolve(mod, "", dotted, depth)
        return r

    def module_target(self, mod: str, dotted: str):
        """:meth:`resolve` where the module alone decides the answer, else ``_SCOPED``."""
        if not dotted or "(" in dotted or "[" in dotted or "?" in dotted:
            return None
        head, _, rest = dotted.partition(".")
        if head in ("self", "cls") or head in self.scoped_names.get(mod, ()):
            return _SCOPED
        # resolve(mod, "", dotted) without its generic steps: the memo, then the head's binding
        key = (mod, dotted)
        r = self._memo.get(key, _MISS)
        if r is not _MISS:
            return r
        hit = self._head_memo.get((mod, head))
        if hit is None:
            self._head_memo[(mod, head)] = (None, None)  # a cycle of aliases names nothing
            hit = self._head_memo[(mod, head)] = self._module_head(mod, head, 0)
        t, target = hit
        if target is None or (t[0] == "=" and t[1:] == dotted):
            r = None
        else:
            r = self._attr(target, rest.split("."), 1) if rest else target
        self._memo[key] = r
        return r

    def _resolve(self, mod: str, scope: str, dotted: str, depth: int) -> Optional[str]:
        parts = dotted.split(".")
        head = parts[0]
        if head in ("self", "cls") and scope:
            cls = self._enclosing_class(mod, scope)
            if cls is None or len(parts) < 2:
                return None
            m = self.method(cls, parts[1])
            if m and len(parts) == 2:
                return m
            return None
        target = None
        s = scope
        while True:
            li = self.local_imports.get((mod, s))
            if li and head in li:
                target = li[head]
                break
            if not s:
                break
            # a name defined in an enclosing function
            q = f"{mod}.{s}.{head}"
            if q in self.nodes:
                target = q
                break
            s = s.rsplit(".", 1)[0] if "." in s else ""
        if target is None:
            # bound at module level: what the head names depends on the module alone
            key = (mod, head)
            hit = self._head_memo.get(key)
            if hit is None:
                self._head_memo[key] = (None, None)  # a cycle of aliases names nothing
                hit = self._head_memo[key] = self._module_head(mod, head, depth)
            t, target = hit
            if target is None or (t[0] == "=" and t[1:] == dotted):  # an alias of itself: a = a.b
                return None
        else:
            target = self.canonical(target, depth + 1)
            if target is None:
                return None
        return self._attr(target, parts[1:], depth + 1) if len(parts) > 1 else target

    def _module_head(self, mod: str, head: str, depth: int) -> tuple:
        """(binding, canonical in-tree target or None) of a name bound at module level."""
        t = self.symbols.get(mod, {}).get(head)
        if t is None:
            for star in self.star.get(mod, ()):
                r = self._lookup_module(star, head, depth + 1)
                if r:
                    t = r
                    break
        if t is None:
            return None, None
        if t.startswith("="):
            if t[1:] == head:
                return t, None
            r = self.resolve(mod, "", t[1:], depth + 1)
            if r is None:
                return t, None
            return t, self.canonical(r, depth + 1)
        return t, self.canonical(t, depth + 1)

    def _enclosing_class(self, mod: str, scope: str) -> Optional[str]:
        key = (mod, scope)
        try:
            return self._class_memo[key]
        except KeyError:
            pass
        parts = scope.split(".")
        found = None
        for i in range(len(parts), 0, -1):
            q = f"{mod}.{'.'.join(parts[:i])}"
            if self.nodes.get(q) == "class":
                found = q
                break
        self._class_memo[key] = found
        return found

    def owners_named(self, name: str) -> list:
        """(method qualname, its class's short name lower-cased) of every in-tree method ``name``."""
        memo = self.__dict__.setdefault("_owner_memo", {})
        hit = memo.get(name)
        if hit is None:
            hit = memo[name] = [(m, m.rsplit(".", 2)[-2].lower()) for m in self.by_name.get(name, ())]
        return hit

    def attr_classes(self, cls: str, attr: str) -> list[str]:
        """In-tree classes assigned to ``self.attr`` in ``cls`` or its bases."""
        out = []
        for c in self.mro(cls):
            # a set: sorted, or the classes (and the edges made from them) come in the process's hash order
            for mod, scope, value in sorted(self.attr_types.get(c, {}).get(attr, ())):
                r = self.resolve(mod, scope, value)
                if r and self.nodes.get(r) == "class" and r not in out:
                    out.append(r)
        return out


def _kernel(decorators: tuple) -> bool:
    return any(_JIT.search(d) and ("triton" in d or d.startswith(("jit", "autotune", "heuristics"))) for d in decorators)


def _native(func: str) -> Optional[str]:
    if func.startswith(_NATIVE_PREFIXES):
        return func
    return None




def interface(f: FileFacts) -> tuple:
    """What other files' edges depend on: an edit that keeps it can be patched in place."""
    return (
        tuple((d.kind, d.qualname, d.bases, d.wraps) for d in f.defs),
        tuple(i for i in f.imports if i.scope == ""),
        tuple((a.scope, a.target, a.value) for a in f.assigns if (a.scope == "" and a.value_kind in ("name", "names", "choice")) or a.target.startswith("self.")),
    )


class GraphBuilder:
    """Takes each file's facts as they arrive (a cold run feeds it while the workers are still
    extracting), and makes symbols, nodes and edges in :meth:`finish`, in path order."""

    def __init__(self):
        self.resolver = Resolver(())
        self.graph = nx.MultiDiGraph()
        self.graph.add_node(MODEL_FORWARD, kind="entry", name="forward", path="", line=0)
        self._files: list[FileFacts] = []  # Python files that parsed, C++ files that register ops
        self.paths: set[str] = set()

    def add(self, f) -> None:
        """One file's facts: a FileFacts, or the plain tuples of the store (not turned into records)."""
        if f.__class__ is tuple:
            f = FileFacts._make(f)
        self.paths.add(f.path)
        if (f.kind == "py" and f.error is None) or (f.kind == "cpp" and f.ops):
            self._files.append(f)

    def finish(self) -> tuple[nx.MultiDiGraph, Resolver]:
        # Files arrive in the order the workers finish them. Symbols, nodes and edges are made in
        # path order, so that the same tree gives the same graph, node and edge order included:
        # the resolver's tables and every walk over a node's edges follow that order, and an
        # arrival order in them made two cold runs of one spec pick different MoE leaves.
        files = sorted(self._files, key=lambda f: f.path)
        for f in files:
            if f.kind == "py":
                self.resolver._collect(f)
                _add_nodes(self.graph, f)
            else:
                for name, line in f.ops:
                    self.graph.add_node(f"torch.ops.{name}", kind="native_op", name=name.rsplit(".", 1)[-1], path=f.path, line=line)
        self.resolver._resolve_bases()
        for f in files:
            if f.kind == "py":
                _add_edges(self.graph, self.resolver, f)
        _done(self.graph)
        return self.graph, self.resolver


def build_graph(facts: Iterable[FileFacts]) -> tuple[nx.MultiDiGraph, Resolver]:
    """The whole tree's graph and the resolver that made it."""
    b = GraphBuilder()
    for f in facts:
        b.add(f)
    return b.finish()


def update_graph(G: nx.MultiDiGraph, r: Resolver, old: FileFacts, new: FileFacts) -> bool:
    """Patch one edited file into ``G`` in place; False when its interface changed (rebuild then)."""
    if old.kind != "py" or new.kind != "py" or old.error or new.error or interface(old) != interface(new):
        return False
    path = new.path
    mine = [n for n, d in G.nodes(data=True) if d.get("path") == path]
    for n in mine:
        kind = G.nodes[n]["kind"]
        if kind in ("capture_site", "config_template"):
            G.remove_node(n)
            continue
        drop = [(u, v, k) for u, v, k, d in G.out_edges(n, keys=True, data=True) if d.get("path") == path and d["kind"] != "defines"]
        G.remove_edges_from(drop)
    drop = [(u, v, k) for u, v, k, d in G.in_edges(new.module, keys=True, data=True) if d.get("path") == path] if new.module in G else []
    G.remove_edges_from(drop)
    # defs keep their names (the interface is unchanged): refresh their lines, then their edges
    mod = new.module
    for d in new.defs:
        q = f"{mod}.{d.qualname}"
        if q in G:
            G.nodes[q]["line"] = d.line
            G.nodes[q]["end_line"] = d.end_line
    for u, v, k, d in list(G.out_edges(mod, keys=True, data=True)) if mod in G else []:
        if d["kind"] == "defines":
            d["line"] = G.nodes[v]["line"]
    _add_edges(G, r, new)
    _done(G)
    return True


def _add_nodes(G: nx.MultiDiGraph, f: FileFacts) -> None:
    mod = f.module
    if not mod:
        return
    add = _edge_adder(G)
    path = f.path
    succ, pred, nodes = G._succ, G._pred, G._node
    G.add_node(mod, kind="module", name=mod.rsplit(".", 1)[-1], path=path, line=1)
    for dkind, qualname, line, end_line, decorators, _bases, params, wraps, wrap_kwargs, aliases in f.defs:
        q = f"{mod}.{qualname}"
        if dkind == "class":
            kind = "class"
        elif dkind == "function" and decorators and _kernel(decorators):
            kind = "triton_kernel"
        else:
            kind = "function"
        attrs = {"kind": kind, "name": qualname.rsplit(".", 1)[-1], "qualname": qualname, "path": path, "line": line, "end_line": end_line}
        if decorators:
            attrs["decorators"] = decorators
        if dkind == "callable_assign":
            attrs["defined_by"] = "assignment"
            attrs["wraps"] = wraps
            attrs["wrap_kwargs"] = wrap_kwargs
            if aliases:
                attrs["aliases"] = aliases
        if dkind == "function":
            attrs["params"] = params
        # G.add_node(q, **attrs) without its per-call overhead (same layout; cache cleared by _done)
        if q in succ:
            nodes[q].update(attrs)
        else:
            succ[q] = {}
            pred[q] = {}
            nodes[q] = attrs
        owner = mod + "." + qualname.rsplit(".", 1)[0] if "." in qualname else mod
        add(owner, q, kind="defines", path=path, line=line)


def _edge_adder(G: nx.MultiDiGraph):
    """``G.add_edge`` without its per-call overhead (key search and cache clearing per edge):
    the same dict layout networkx builds, for the 250k edges of a full tree. Callers clear
    networkx's cache once when done (:func:`_done`)."""
    succ, pred = G._succ, G._pred

    def add(u, v, **attr):
        su = succ.get(u)
        if su is None:
            G.add_node(u)
            su = succ[u]
        if v not in succ:
            G.add_node(v)
        kd = su.get(v)
        if kd is None:
            kd = su[v] = {}
            pred[v][u] = kd
        k = len(kd)
        while k in kd:
            k += 1
        kd[k] = attr

    return add


def _done(G: nx.MultiDiGraph) -> None:
    clear = getattr(nx, "_clear_cache", None)
    if clear is not None:
        clear(G)


def _src(mod: str, scope: str) -> str:
    return f"{mod}.{scope}" if scope else mod


def _add_edges(G: nx.MultiDiGraph, r: Resolver, f: FileFacts) -> None:
    mod = f.module
    if not mod:
        return
    path = f.path
    add = _edge_adder(G)
    seen_imports = set()
    # records are read by position: they may be the plain tuples of the store (see facts.to_plain)
    for _scope, _local, module, _name, line in f.imports:
        if module in r.modules and module != mod and module not in seen_imports:
            seen_imports.add(module)
            add(mod, module, kind="imports", path=path, line=line)
    for dkind, qualname, line, _end, _decos, _bases, _params, wraps, *_ in f.defs:
        if dkind == "callable_assign" and wraps:
            q = f"{mod}.{qualname}"
            scope = qualname.rsplit(".", 1)[0] if "." in qualname else ""
            w = r.resolve(mod, scope, wraps)
            if w:
                add(q, w, kind="wraps", path=path, line=line)
        elif dkind == "class":
            q = f"{mod}.{qualname}"
            for b in r.bases.get(q, ()):
                add(q, b, kind="inherits", path=path, line=line)
            above = r.mro(q)[1:]
            for name, mq in r.methods.get(q, {}).items() if above else ():
                for base in above:
                    bq = r.methods.get(base, {}).get(name)
                    if bq:
                        add(mq, bq, kind="overrides", path=path, line=G.nodes[mq]["line"])
                        break
    capture_withs = [w for w in f.withs if _CAPTURE_CTX.search("\n".join(w[1]))] if f.withs else ()  # With.ctx
    resolved: dict[int, list] = {}  # call index -> targets, kept only for files with capture blocks
    keep = bool(capture_withs)
    nodes = G._node
    srcs: dict = {}
    by_func: dict = {}  # callee -> its target when the module alone decides it, else _SCOPED
    for i, c in enumerate(f.calls):
        scope, func, line = c[0], c[1], c[2]  # Call.scope, .func, .line (plain tuples too)
        target = by_func.get(func, _MISS)
        if target is _MISS:
            target = r.module_target(mod, func)
            if target is None and not func.startswith(_NATIVE_PREFIXES):
                target = _NOTHING  # no in-tree target, not a native op, not self.x: no edge
            by_func[func] = target
        if target is _NOTHING:
            continue
        src = srcs.get(scope)
        if src is None:
            src = srcs[scope] = f"{mod}.{scope}" if scope else mod
        if target is _SCOPED:
            target = r.resolve(mod, scope, func)
        if target is not None:
            attrs = nodes.get(target)
            kind = attrs.get("kind") if attrs is not None else None
            if kind == "class":
                add(src, target, kind="calls", path=path, line=line)
                init = r.method(target, "__init__")
                if init:
                    add(src, init, kind="calls", path=path, line=line, via="__init__")
                if keep:
                    resolved[i] = [target]
            elif kind is not None and kind != "module":
                add(src, target, kind="calls", path=path, line=line)
                if keep:
                    resolved[i] = [target]
            continue
        if func.startswith(_NATIVE_PREFIXES):
            if func not in nodes:
                G.add_node(func, kind="native_op", name=func.rsplit(".", 1)[-1], path=path, line=line)
            add(src, func, kind="calls", path=path, line=line)
            if keep:
                resolved[i] = [func]
            continue
        if func.startswith("self."):
            hits = _dynamic(G, r, mod, c, src, path, add)
            if hits and keep:
                resolved[i] = hits
    param_launchers = {}  # function -> grid source, for `kernel[grid](...)` where kernel is a parameter
    for scope, kernel, grid, line in f.launches:
        k = r.resolve(mod, scope, kernel)
        if k is not None and k in G:
            add(_src(mod, scope), k, kind="launches", path=path, line=line, grid=grid)
        elif scope and "." not in kernel and kernel in (G.nodes.get(_src(mod, scope), {}).get("params") or ()):
            param_launchers[_src(mod, scope)] = grid
    if param_launchers:
        # a helper that launches the kernel it is handed (`_launch(plan, kernel, grid, ...)`): each call
        # in this file that passes it an in-tree Triton kernel launches that kernel, at the call
        for scope, func, line, _end, _kw, args in f.calls:
            target = r.resolve(mod, scope, func) if func else None
            if target not in param_launchers:
                continue
            for a in args:
                k = r.resolve(mod, scope, a) if a else None
                if k is not None and G.nodes.get(k, {}).get("kind") == "triton_kernel":
                    add(_src(mod, scope), k, kind="launches", path=path, line=line, grid=param_launchers[target], via=target)
    for scope, target, value, _kind, line in f.assigns:
        if scope == "" and target == "EntryClass":
            for name in value.split(","):
                cls = r.resolve(mod, "", name) if name else None
                fwd = r.method(cls, "forward") if cls else None
                if fwd:
                    add(MODEL_FORWARD, fwd, kind="calls_dynamic", path=path, line=line, via="EntryClass")
    model_refs = any("model" in ref[1].lower() for ref in f.refs)
    for wscope, ctx, wline, wend in capture_withs:
        site = f"capture@{path}:{wline}"
        src = _src(mod, wscope)
        G.add_node(site, kind="capture_site", name=" + ".join(ctx), path=path, line=wline, end_line=wend, scope=src)
        add(src, site, kind="captures", path=path, line=wline)
        for i, c in enumerate(f.calls):
            if c[0] == wscope and wline < c[2] <= wend:  # Call.scope, Call.line
                for t in resolved.get(i, ()):
                    add(site, t, kind="captures", path=path, line=c[2])
        if model_refs:
            add(site, MODEL_FORWARD, kind="captures", path=path, line=wline, via="model.forward")
    for scope, template, line in f.fstrings:
        if "device_name" in template and ".json" in template:
            node = f"config@{path}:{line}"
            G.add_node(node, kind="config_template", name=template, template=template, path=path, line=line)
            add(_src(mod, scope), node, kind="reads_config", path=path, line=line)


def _dynamic(G, r: Resolver, mod: str, c, src: str, path: str, add=None) -> list:
    """Edges for calls whose receiver is an attribute of ``self``: typed when we can, else by name."""
    scope, func, line = c[0], c[1], c[2]  # Call.scope, .func, .line
    parts = func.split(".")
    if parts[0] != "self" or len(parts) < 2 or not scope or "(" in func or "[" in func:
        return []
    cls = r._enclosing_class(mod, scope)
    if cls is None:
        return []
    if add is None:
        add = _edge_adder(G)
    hits: list = []
    if len(parts) == 2:  # self.layer(...) -> the layer's forward / __call__
        for t in r.attr_classes(cls, parts[1]):
            m = r.method(t, "forward") or r.method(t, "__call__")
            if m:
                add(src, m, kind="calls", path=path, line=line, via=f"self.{parts[1]}")
                hits.append(m)
        return hits
    if len(parts) == 3:  # self.attr.method(...)
        typed = r.attr_classes(cls, parts[1])
        hits = [m for t in typed if (m := r.method(t, parts[2]))]
        if hits:
            for m in hits:
                add(src, m, kind="calls", path=path, line=line, via=f"self.{parts[1]}")
            return hits
        # untyped receiver: same-named methods of classes whose name echoes the attribute
        # (self.quant_method.apply -> *Method.apply, self.runner.run -> *Runner.run)
        key = (parts[1], parts[2])
        cands = r._dyn_memo.get(key)
        if cands is None:
            tokens = [t for t in parts[1].lower().split("_") if len(t) >= 4]
            cands = r._dyn_memo[key] = [m for m, owner in r.owners_named(parts[2]) if any(t in owner for t in tokens)] if tokens else []
        if 0 < len(cands) <= DYNAMIC_CAP:
            for m in cands:
                add(src, m, kind="calls_dynamic", path=path, line=line, via=func)
            return list(cands)
    return hits
