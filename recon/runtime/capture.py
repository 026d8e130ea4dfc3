"""What the decode CUDA-graph capture runs: the capture chain (a ``with <graph ctx>(...)`` site, the
callable it runs, the nested function that calls ``forward(...)``, the model class registered for
the model) and the code reachable from that forward, with three resolutions the graph leaves open,
made here from a few re-parsed files: layers held in containers (``for layer in self.layers``
built by ``make_layers(..., lambda ...: DecoderLayer(...))``), layers built by a factory
(``self.experts = get_moe_impl_class(...)(...)``), and the MoE quant method (from the runtime view,
else the ``apply`` of the quant-method classes named for the model's expert format). Hops made by
these resolutions are marked inferred. The cuda-graph-host-sync rule reads them.

``params`` is any object with the :class:`CaptureScope` fields (the rule's parameters).
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from typing import Optional

from ..names import MODEL_FORWARD
from ..engine.asts import check_ast, graph_function
from .. import astwalk


@dataclass(frozen=True)
class CaptureScope:
    """Where the capture and the code it reaches are looked for, and how far."""

    capture_dirs: list = ("model_executor",)
    exclude_dirs: list = ("test", "tests", "benchmark", "multimodal_gen", "npu", "xpu")
    forward_names: list = ("forward",)
    max_depth: int = 14
    max_nodes: int = 6000
    dynamic_cap: int = 12


def _excluded(path: str, params: CaptureScope) -> bool:
    parts = path.split("/")
    return any(x in parts for x in params.exclude_dirs)


# --- 1. the capture chain -------------------------------------------------------------------------


def _called_names(body) -> list[tuple[str, int]]:
    out = []
    for s in body:
        for n in astwalk.walk(s):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                out.append((n.func.id, n.lineno))
    return out


def capture_chains(ctx, params: CaptureScope) -> list[dict]:
    """Capture sites whose body runs a callable that calls ``forward(...)``, with the hops."""
    G = ctx.tree.graph
    fwd_names = set(params.forward_names)
    chains = []
    for site, d in sorted(G.nodes(data=True), key=lambda x: (x[1].get("path", ""), x[1].get("line", 0))):
        if d.get("kind") != "capture_site" or _excluded(d["path"], params):
            continue
        if not any(w in d["path"] for w in params.capture_dirs):
            continue
        if "graph" not in d.get("name", "").lower():
            continue
        scope = d.get("scope")
        got = graph_function(ctx, scope) if scope in G else None
        if got is None:
            continue
        path, fn = got
        with_node = next((n for n in astwalk.walk(fn) if isinstance(n, ast.With) and n.lineno == d["line"]), None)
        if with_node is None:
            continue
        params_of = {a.arg for a in fn.args.args}
        # callables run inside the with body that come from a parameter (directly or via a local)
        locals_from_param = {}
        for n in astwalk.walk(fn):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                src = {x.id for x in astwalk.walk(n.value) if isinstance(x, ast.Name)} & params_of
                if src:
                    locals_from_param[n.targets[0].id] = sorted(src)[0]
        runs = [(name, line) for name, line in _called_names(with_node.body) if name in params_of or name in locals_from_param]
        if not runs:
            continue
        run_name, run_line = runs[0]
        param = run_name if run_name in params_of else locals_from_param[run_name]
        pidx = [a.arg for a in fn.args.args].index(param)
        # callers that pass a nested function for that parameter, which calls forward(...)
        for caller, _, e in sorted(G.in_edges(scope, data=True), key=lambda x: (x[0], x[2].get("line", 0))):
            if e.get("kind") not in ("calls", "calls_dynamic") or _excluded(G.nodes[caller].get("path", ""), params):
                continue
            cg = graph_function(ctx, caller)
            if cg is None:
                continue
            cpath, cfn = cg
            nested = {n.name: n for n in astwalk.walk(cfn) if isinstance(n, ast.FunctionDef) and n is not cfn}
            call = next((n for n in astwalk.walk(cfn) if isinstance(n, ast.Call) and n.lineno <= e["line"] <= getattr(n, "end_lineno", n.lineno)
                         and isinstance(n.func, ast.Attribute) and n.func.attr == G.nodes[scope]["name"]), None)
            if call is None:
                continue
            args = list(call.args)
            passed = None
            # self.method(a, b): the parameter index counts self
            i = pidx - 1 if [a.arg for a in fn.args.args][:1] == ["self"] else pidx
            if 0 <= i < len(args) and isinstance(args[i], ast.Name):
                passed = args[i].id
            for kw in call.keywords:
                if kw.arg == param and isinstance(kw.value, ast.Name):
                    passed = kw.value.id
            if passed not in nested:
                continue
            runner = nested[passed]
            fwd_call = next(((n.func.id, n.lineno) for n in astwalk.walk(runner) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in fwd_names), None)
            if fwd_call is None:
                continue
            src_lines = ctx.tree.lines(path)
            site_line = next((ln for ln in range(with_node.lineno, with_node.body[0].lineno) if "graph" in src_lines[ln - 1].lower()), d["line"])
            hops = [
                {"what": f"capture: {d['name']}", "path": d["path"], "line": site_line, "text": "graph", "inferred": False},
                {"what": f"runs {run_name}() (the callable passed as {param})", "path": path, "line": run_line, "text": f"{run_name}(", "inferred": False},
                {"what": f"{G.nodes[caller]['qualname']} passes {passed}", "path": cpath, "line": e["line"], "text": G.nodes[scope]["name"], "inferred": e.get("kind") == "calls_dynamic"},
                {"what": f"{passed} calls {fwd_call[0]}(...)", "path": cpath, "line": fwd_call[1], "text": f"{fwd_call[0]}(", "inferred": False},
            ]
            src = _forward_source(ctx, cpath, fwd_call[0])
            if src:
                hops.append(src)
            chains.append({"site": site, "site_path": d["path"], "site_line": site_line, "site_scope": scope, "hops": hops})
            break
    return chains


def _forward_source(ctx, path: str, name: str) -> Optional[dict]:
    """Where ``name`` (the captured forward) comes from: ``with cm(model...) as name`` -> ``yield model.forward``."""
    mod = check_ast(ctx, path)
    if mod is None:
        return None
    R = ctx.tree.resolver
    module = ctx.tree.index.files[path].module if path in ctx.tree.index.files else ""
    for n in astwalk.walk(mod):
        if not isinstance(n, ast.With):
            continue
        for item in n.items:
            if isinstance(item.optional_vars, ast.Name) and item.optional_vars.id == name and isinstance(item.context_expr, ast.Call):
                dotted = ast.unparse(item.context_expr.func)
                target = R.resolve(module, "", dotted)
                if target is None and "." in dotted:  # module alias: torch_compile_decoration.patch_model
                    target = R.resolve(module, "", dotted.split(".")[-1]) or _by_suffix(ctx, dotted.split(".")[-1])
                got = graph_function(ctx, target) if target else None
                if got is None:
                    continue
                tpath, tfn = got
                for y in astwalk.walk(tfn):
                    if isinstance(y, ast.Yield) and isinstance(y.value, ast.Attribute) and y.value.attr == "forward":
                        return {"what": f"{name} is {ast.unparse(y.value)} (yielded by {tfn.name}, used as `with ... as {name}` at {path}:{n.lineno})",
                                "path": tpath, "line": y.lineno, "text": ".forward", "inferred": True}
    return None


def _by_suffix(ctx, name: str) -> Optional[str]:
    G = ctx.tree.graph
    hits = sorted(n for n, d in G.nodes(data=True) if d.get("kind") == "function" and d.get("name") == name and "model_executor" in d.get("path", ""))
    return hits[0] if hits else None


# --- 2. what the captured forward reaches ---------------------------------------------------------


def model_forwards(ctx) -> list[str]:
    G = ctx.tree.graph
    archs = set(getattr(ctx.model, "architectures", []) or [])
    out = []
    for _, v, e in G.out_edges(MODEL_FORWARD, data=True):
        cls = v.rsplit(".", 1)[0]
        if cls.rsplit(".", 1)[-1] in archs:
            out.append(v)
    return sorted(set(out))


def _class_of(G, fn: str) -> Optional[str]:
    cls = fn.rsplit(".", 1)[0]
    return cls if G.nodes.get(cls, {}).get("kind") == "class" else None


def _class_node(ctx, cls: str) -> Optional[tuple[str, ast.ClassDef]]:
    d = ctx.tree.graph.nodes.get(cls) or {}
    mod = check_ast(ctx, d.get("path", "")) if d.get("path") else None
    if mod is None:
        return None
    for n in astwalk.walk(mod):
        if isinstance(n, ast.ClassDef) and n.name == d.get("name") and n.lineno <= d.get("line", 0) <= n.lineno + len(n.decorator_list) + 1:
            return d["path"], n
    for n in astwalk.walk(mod):
        if isinstance(n, ast.ClassDef) and n.name == d.get("name"):
            return d["path"], n
    return None


def _local_bindings(fn: ast.AST) -> dict[str, list[ast.AST]]:
    """What each local name of a method may hold: parameter defaults (``layer_type=DecoderLayer``)
    and plain assignments (``t = t or DecoderLayer``, ``t = get_moe_impl_class(...)``), with
    ``a or b`` and ``a if c else b`` split into their alternatives."""
    out: dict[str, list[ast.AST]] = {}

    def add(name: str, expr: ast.AST) -> None:
        if isinstance(expr, ast.BoolOp):
            for v in expr.values:
                add(name, v)
        elif isinstance(expr, ast.IfExp):
            add(name, expr.body)
            add(name, expr.orelse)
        elif isinstance(expr, (ast.Name, ast.Attribute, ast.Call)) and not (isinstance(expr, ast.Name) and expr.id == name):
            out.setdefault(name, []).append(expr)

    args = fn.args
    pos = args.posonlyargs + args.args
    for arg, d in zip(pos[len(pos) - len(args.defaults):], args.defaults):
        add(arg.arg, d)
    for arg, d in zip(args.kwonlyargs, args.kw_defaults):
        if d is not None:
            add(arg.arg, d)
    for n in astwalk.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            add(n.targets[0].id, n.value)
    return out


def _self_attr_values(cnode: ast.ClassDef, attr: str) -> list[tuple[ast.AST, dict]]:
    """RHS expressions assigned to ``self.attr`` anywhere in the class (tuple targets too), each with
    its method's local bindings, so that ``self.experts = experts_type(...)`` after
    ``experts_type = get_moe_impl_class(...)`` reads as ``get_moe_impl_class(...)(...)``, and
    ``layer_type(...)`` in a ``make_layers`` lambda as the class ``layer_type`` defaults to."""
    out = []
    for fn in astwalk.walk(cnode):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        bindings = None
        for n in astwalk.walk(fn):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    elts = t.elts if isinstance(t, ast.Tuple) else [t]
                    for x in elts:
                        if isinstance(x, ast.Attribute) and x.attr == attr and isinstance(x.value, ast.Name) and x.value.id == "self":
                            bindings = _local_bindings(fn) if bindings is None else bindings
                            out.append((n.value, bindings))
    return out


def _forward_of(R, cls: str) -> Optional[str]:
    return R.method(cls, "forward") or R.method(cls, "__call__")


def _extra_edges(ctx, fn: str, params: CaptureScope) -> list[tuple[str, int, str]]:
    """(target, line, how) for calls in ``fn`` the graph leaves unresolved: containers and factories."""
    key = ("cg-extra", fn)
    if key in ctx.cache:
        return ctx.cache[key]
    out: list[tuple[str, int, str]] = []
    ctx.cache[key] = out
    G, R = ctx.tree.graph, ctx.tree.resolver
    cls = _class_of(G, fn)
    got = graph_function(ctx, fn)
    if cls is None or got is None:
        return out
    cn = _class_node(ctx, cls)
    if cn is None:
        return out
    path, node = got
    module = ctx.tree.index.files[path].module
    cscope = G.nodes[cls]["qualname"]
    resolved_lines = {e.get("line") for _, _, e in G.out_edges(fn, data=True) if e.get("kind") in ("calls", "calls_dynamic")}
    # names bound to an element of a self container: `layer = self.layers[i]`, `for layer in self.layers`
    holders: dict[str, str] = {}
    for n in astwalk.walk(node):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Subscript):
            v = n.value.value
            if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "self":
                holders[n.targets[0].id] = v.attr
        if isinstance(n, ast.For) and isinstance(n.target, ast.Name):
            it = n.iter
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and it.args:
                it = it.args[0]
            if isinstance(it, ast.Subscript):
                it = it.value
            if isinstance(it, ast.Attribute) and isinstance(it.value, ast.Name) and it.value.id == "self":
                holders[n.target.id] = it.attr
    for n in astwalk.walk(node):
        if not isinstance(n, ast.Call) or n.lineno in resolved_lines:
            continue
        f = n.func
        if isinstance(f, ast.Name) and f.id in holders:
            attr, how = holders[f.id], "container"
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            attr, how = f.attr, "factory"
        else:
            continue
        for rhs, bindings in _self_attr_values(cn[1], attr):
            for c in astwalk.walk(rhs):
                if not isinstance(c, ast.Call):
                    continue
                # what the called expression may be: itself, or what a local name of it was bound to
                alts = [c.func] + (bindings.get(c.func.id, []) if isinstance(c.func, ast.Name) else [])
                for alt in alts:
                    if how == "factory" and isinstance(alt, ast.Call) and isinstance(alt.func, (ast.Name, ast.Attribute)):
                        fac = R.resolve(module, cscope + ".__init__", ast.unparse(alt.func))  # factory(...)(...)
                        for k in _factory_default(ctx, fac):
                            m = _forward_of(R, k)
                            if m:
                                out.append((m, n.lineno, f"self.{attr} = {ast.unparse(alt.func)}(...)(...): its default return {k.rsplit('.', 1)[-1]}"))
                    elif how == "container" and isinstance(alt, (ast.Name, ast.Attribute)):
                        t = R.resolve(module, cscope + ".__init__", ast.unparse(alt))
                        if t and G.nodes.get(t, {}).get("kind") == "class":
                            m = _forward_of(R, t)
                            if m:
                                out.append((m, n.lineno, f"{f.id} is an element of self.{attr}, built as {t.rsplit('.', 1)[-1]}(...)"))
    return out


def _factory_default(ctx, fac: Optional[str]) -> list[str]:
    """The class a factory function returns unconditionally (its last top-level ``return Name``)."""
    got = graph_function(ctx, fac) if fac else None
    if got is None:
        return []
    path, fn = got
    rets = [s for s in fn.body if isinstance(s, ast.Return) and isinstance(s.value, (ast.Name, ast.Attribute))]
    if not rets:
        return []
    module = ctx.tree.index.files[path].module
    t = ctx.tree.resolver.resolve(module, ctx.tree.graph.nodes[fac]["qualname"], ast.unparse(rets[-1].value))
    return [t] if t and ctx.tree.graph.nodes.get(t, {}).get("kind") == "class" else []


def reach(ctx, starts: list[str], params: CaptureScope, qm: list[str]) -> dict:
    """BFS over calls/dynamic calls/launches (+ inferred hops): node -> (parent, path, line, how, inferred)."""
    G = ctx.tree.graph
    max_depth = params.max_depth
    max_nodes = params.max_nodes
    dyn_cap = params.dynamic_cap
    parent: dict = {s: None for s in starts}
    dq = deque((s, 0) for s in starts)
    while dq and len(parent) < max_nodes:
        n, depth = dq.popleft()
        if depth >= max_depth:
            continue
        edges = []
        dyn_by_line: dict = {}
        owner = n.rsplit(".", 2)[-2].lower() if "." in n else ""
        is_moe = "moe" in owner  # only a MoE layer's quant method is an expert quant method
        for _, v, e in G.out_edges(n, data=True):
            k = e.get("kind")
            if k == "calls_dynamic":
                dyn_by_line.setdefault(e.get("line"), []).append((v, e))
            elif k in ("calls", "launches"):
                via = e.get("via", "") or ""
                if via.endswith("quant_method") and G.nodes[v].get("name") == "apply" and qm and is_moe:
                    for q in qm:
                        edges.append((q, e["path"], e["line"], f"{via}.apply -> {q.rsplit('.', 2)[-2]} (quant method for {ctx.model.expert_quant} experts)", True))
                    continue
                edges.append((v, e["path"], e["line"], k, False))
        for line, vs in sorted(dyn_by_line.items(), key=lambda x: x[0] or 0):
            via = vs[0][1].get("via", "") or ""
            if via.endswith("quant_method.apply") and qm and is_moe:
                for q in qm:
                    edges.append((q, vs[0][1]["path"], line, f"{via} -> {q.rsplit('.', 2)[-2]} (quant method for {ctx.model.expert_quant} experts)", True))
            elif len(vs) <= dyn_cap:
                edges += [(v, e["path"], line, f"dynamic {via}", True) for v, e in vs]
        if G.nodes[n].get("kind") == "function":
            for t, line, how in _extra_edges(ctx, n, params):
                edges.append((t, G.nodes[n]["path"], line, how, True))
        for v, path, line, how, inferred in edges:
            if v in parent or v not in G or _excluded(G.nodes[v].get("path", "") or "", params):
                continue
            if G.nodes[v].get("kind") not in ("function", "triton_kernel", "native_op"):
                continue
            parent[v] = (n, path, line, how, inferred)
            dq.append((v, depth + 1))
    return parent


def capture_route(parent: dict, node: str) -> list[tuple]:
    out = []
    while parent.get(node):
        p = parent[node]
        out.append((node,) + p)
        node = p[0]
    return out[::-1]
