"""cuda-graph-host-sync: what runs inside the decode CUDA-graph capture, and what in it syncs the host.

1. The capture chain: a ``with <graph ctx>(...)`` capture site whose body calls a callable it was
   given; the caller that passes a nested ``run_once``-style function which calls ``forward(...)``;
   where ``forward`` comes from (a context manager such as ``patch_model`` yielding ``model.forward``);
   and the model class SGLang registers for ``ctx.model.architectures``.
2. The code reachable from that model's ``forward``: graph edges (calls, typed dynamic calls,
   launches) plus three resolutions the graph leaves open, made here from a few re-parsed files:
   layers held in containers (``for layer in self.layers: layer(...)`` where ``self.layers`` is built
   from ``make_layers(..., lambda ...: DecoderLayer(...))``), layers built by a factory
   (``self.experts = get_moe_impl_class(...)(...)``: the factory's unconditional return), and the
   MoE quant method (``self.quant_method.apply``: the ``apply`` of the quant-method classes named
   for the model's expert format, the one whose path names the device's arch, e.g. ``sm120``, first).
   Hops made by these resolutions are marked inferred.
3. In that code: host syncs and data-dependent shapes (``.item()``, ``.tolist()``, ``.cpu()``,
   ``.nonzero()``, ``.unique()``, ``torch.cuda.synchronize()``, ``torch.bincount``, boolean-mask
   indexing), skipping those guarded by ``if not <is capturing>`` and the like.
4. For each MoE kernel path (quant-method ``apply`` -> ... -> Triton kernel launch): whether it runs
   inside the capture and whether it is capture-safe.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass
from collections import deque
from typing import Optional

from ..runtime import runtime_view
from ..runtime.handoffs import IGNORE, describe, handoffs
from ..findings import Evidence, Finding
from ..graph import MODEL_FORWARD
from . import check
from ..runtime.asts import _ast, _function

_DEFAULT_HAZARDS = {
    ".item": "host sync",
    ".tolist": "host sync",
    ".cpu": "host sync",
    ".numpy": "host sync",
    ".nonzero": "data-dependent shape",
    ".unique": "data-dependent shape",
    ".bincount": "data-dependent shape",
    ".masked_select": "data-dependent shape",
    ".synchronize": "host sync",
}
_CAPTURE_TEST = re.compile(r"captur", re.I)


@dataclass(frozen=True)
class CudaGraphParams:
    capture_dirs: list[str] = ("model_executor",)  # where the decode capture lives
    exclude_dirs: list[str] = ("test", "tests", "benchmark", "multimodal_gen", "npu", "xpu")
    forward_names: list[str] = ("forward",)  # the name the captured function calls the model's forward by
    max_depth: int = 14
    max_nodes: int = 6000
    dynamic_cap: int = 12  # follow an untyped dynamic call only when it has this few candidates
    kernel_depth: int = 3  # hops from a quant method's apply to the kernels it launches
    handoff_ignore: list[str] = IGNORE  # library calls that pick no kernel
    max_findings: int = 40
    constraints: list[str] = ()  # what a kernel on this path must respect (the spec lists them)
    hazards: Optional[dict] = None  # call suffix -> what it is; None: the built-in table


def _excluded(path: str, params: CudaGraphParams) -> bool:
    parts = path.split("/")
    return any(x in parts for x in params.exclude_dirs)


# --- 1. the capture chain -------------------------------------------------------------------------


def _called_names(body) -> list[tuple[str, int]]:
    out = []
    for s in body:
        for n in ast.walk(s):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                out.append((n.func.id, n.lineno))
    return out


def _capture_chains(ctx, params: CudaGraphParams) -> list[dict]:
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
        got = _function(ctx, scope) if scope in G else None
        if got is None:
            continue
        path, fn = got
        with_node = next((n for n in ast.walk(fn) if isinstance(n, ast.With) and n.lineno == d["line"]), None)
        if with_node is None:
            continue
        params_of = {a.arg for a in fn.args.args}
        # callables run inside the with body that come from a parameter (directly or via a local)
        locals_from_param = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                src = {x.id for x in ast.walk(n.value) if isinstance(x, ast.Name)} & params_of
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
            cg = _function(ctx, caller)
            if cg is None:
                continue
            cpath, cfn = cg
            nested = {n.name: n for n in ast.walk(cfn) if isinstance(n, ast.FunctionDef) and n is not cfn}
            call = next((n for n in ast.walk(cfn) if isinstance(n, ast.Call) and n.lineno <= e["line"] <= getattr(n, "end_lineno", n.lineno)
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
            fwd_call = next(((n.func.id, n.lineno) for n in ast.walk(runner) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in fwd_names), None)
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
    mod = _ast(ctx, path)
    if mod is None:
        return None
    R = ctx.tree.resolver
    module = ctx.tree.index.files[path].module if path in ctx.tree.index.files else ""
    for n in ast.walk(mod):
        if not isinstance(n, ast.With):
            continue
        for item in n.items:
            if isinstance(item.optional_vars, ast.Name) and item.optional_vars.id == name and isinstance(item.context_expr, ast.Call):
                dotted = ast.unparse(item.context_expr.func)
                target = R.resolve(module, "", dotted)
                if target is None and "." in dotted:  # module alias: torch_compile_decoration.patch_model
                    target = R.resolve(module, "", dotted.split(".")[-1]) or _by_suffix(ctx, dotted.split(".")[-1])
                got = _function(ctx, target) if target else None
                if got is None:
                    continue
                tpath, tfn = got
                for y in ast.walk(tfn):
                    if isinstance(y, ast.Yield) and isinstance(y.value, ast.Attribute) and y.value.attr == "forward":
                        return {"what": f"{name} is {ast.unparse(y.value)} (yielded by {tfn.name}, used as `with ... as {name}` at {path}:{n.lineno})",
                                "path": tpath, "line": y.lineno, "text": ".forward", "inferred": True}
    return None


def _by_suffix(ctx, name: str) -> Optional[str]:
    G = ctx.tree.graph
    hits = sorted(n for n, d in G.nodes(data=True) if d.get("kind") == "function" and d.get("name") == name and "model_executor" in d.get("path", ""))
    return hits[0] if hits else None


# --- 2. what the captured forward reaches ---------------------------------------------------------


def _model_forwards(ctx) -> list[str]:
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
    mod = _ast(ctx, d.get("path", "")) if d.get("path") else None
    if mod is None:
        return None
    for n in ast.walk(mod):
        if isinstance(n, ast.ClassDef) and n.name == d.get("name") and n.lineno <= d.get("line", 0) <= n.lineno + len(n.decorator_list) + 1:
            return d["path"], n
    for n in ast.walk(mod):
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
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            add(n.targets[0].id, n.value)
    return out


def _self_attr_values(cnode: ast.ClassDef, attr: str) -> list[tuple[ast.AST, dict]]:
    """RHS expressions assigned to ``self.attr`` anywhere in the class (tuple targets too), each with
    its method's local bindings, so that ``self.experts = experts_type(...)`` after
    ``experts_type = get_moe_impl_class(...)`` reads as ``get_moe_impl_class(...)(...)``, and
    ``layer_type(...)`` in a ``make_layers`` lambda as the class ``layer_type`` defaults to."""
    out = []
    for fn in ast.walk(cnode):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        bindings = None
        for n in ast.walk(fn):
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


def _extra_edges(ctx, fn: str, params: CudaGraphParams) -> list[tuple[str, int, str]]:
    """(target, line, how) for calls in ``fn`` the graph leaves unresolved: containers and factories."""
    key = ("cg-extra", fn)
    if key in ctx.cache:
        return ctx.cache[key]
    out: list[tuple[str, int, str]] = []
    ctx.cache[key] = out
    G, R = ctx.tree.graph, ctx.tree.resolver
    cls = _class_of(G, fn)
    got = _function(ctx, fn)
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
    for n in ast.walk(node):
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
    for n in ast.walk(node):
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
            for c in ast.walk(rhs):
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
    got = _function(ctx, fac) if fac else None
    if got is None:
        return []
    path, fn = got
    rets = [s for s in fn.body if isinstance(s, ast.Return) and isinstance(s.value, (ast.Name, ast.Attribute))]
    if not rets:
        return []
    module = ctx.tree.index.files[path].module
    t = ctx.tree.resolver.resolve(module, ctx.tree.graph.nodes[fac]["qualname"], ast.unparse(rets[-1].value))
    return [t] if t and ctx.tree.graph.nodes.get(t, {}).get("kind") == "class" else []


def _quant_methods(ctx, params: CudaGraphParams) -> list[str]:
    """``apply`` of the MoE quant-method classes named for the model's expert format, device-matched first."""
    G = ctx.tree.graph
    fmt = (getattr(ctx.model, "expert_quant", "") or "").lower()
    if not fmt:
        return [], False
    if fmt in ("bf16", "fp16"):
        fmt = "unquant"
    cands = []
    for n, d in G.nodes(data=True):
        if d.get("kind") != "function" or d.get("name") != "apply" or _excluded(d.get("path", ""), params):
            continue
        cls = n.rsplit(".", 1)[0]
        cname = cls.rsplit(".", 1)[-1].lower()
        if fmt in cname and "moe" in cname and "sglang/srt/" in d.get("path", ""):
            cands.append(n)
    cc = getattr(ctx.device, "compute_capability", None)
    tag = f"sm{cc[0]}{cc[1]}" if cc else None

    def score(q: str) -> tuple:
        hit = False
        if tag:
            seen, dq = {q}, deque([(q, 0)])
            while dq and not hit:
                x, k = dq.popleft()
                if tag in x.lower():
                    hit = True
                    break
                if k >= 3:
                    continue
                for _, y, e in G.out_edges(x, data=True):
                    if e.get("kind") in ("calls", "launches") and y not in seen:
                        seen.add(y)
                        dq.append((y, k + 1))
        return (not hit, q)

    cands.sort(key=score)
    return cands, bool(cands) and score(cands[0])[0] is False


def _reach(ctx, starts: list[str], params: CudaGraphParams, qm: list[str]) -> dict:
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


def _chain(parent: dict, node: str) -> list[tuple]:
    out = []
    while parent.get(node):
        p = parent[node]
        out.append((node,) + p)
        node = p[0]
    return out[::-1]


# --- 3. hazards -----------------------------------------------------------------------------------


def _guarded(branches, scope: str, line: int) -> Optional[int]:
    """Line of a capture guard that keeps ``line`` out of the capture, or None."""
    for b in branches:
        if b.scope != scope or not _CAPTURE_TEST.search(b.test):
            continue
        test = b.test.strip()
        single = not re.search(r"\b(and|or)\b", test)
        if test.startswith("not ") and single and b.line < line <= b.body_end:
            return b.line
        if not test.startswith("not ") and single:
            if b.else_line and b.else_line <= line <= b.end_line:
                return b.line
    return None


def _hazards(ctx, fn: str, params: CudaGraphParams) -> list[dict]:
    key = ("cg-haz", fn)
    if key in ctx.cache:
        return ctx.cache[key]
    G = ctx.tree.graph
    d = G.nodes[fn]
    out: list[dict] = []
    ctx.cache[key] = out
    if d.get("kind") not in ("function",) or not d.get("path"):
        return out
    facts = ctx.tree.index.facts(d["path"])
    if facts is None:
        return out
    scope = d.get("qualname")
    lines = ctx.cache.get(("lines", d["path"])) or ctx.tree.lines(d["path"])
    ctx.cache[("lines", d["path"])] = lines
    pats = params.hazards or _DEFAULT_HAZARDS
    for c in facts.calls:
        if c.scope != scope:
            continue
        for suffix, what in pats.items():
            if not (c.func.endswith(suffix) and (c.func == suffix.lstrip(".") or c.func[-len(suffix) - 1 : -len(suffix)] not in ("_",))):
                continue
            if suffix == ".synchronize" and not c.func.startswith(("torch.cuda", "torch.", "self.device_module")) and "stream" not in c.func:
                continue
            receiver = c.func[: -len(suffix)]
            if "cpu" in receiver.lower() and suffix in (".tolist", ".item", ".numpy", ".cpu"):
                continue  # already a host tensor: no device sync
            token = suffix + "("
            hit = next((ln for ln in range(c.line, (c.end_line or c.line) + 1) if token in lines[ln - 1]), None)
            if hit is None:
                continue
            if any(h["line"] == hit for h in out):
                break
            g = _guarded(facts.branches, scope, hit)
            out.append({"function": fn, "path": d["path"], "line": hit, "call": c.func + "()", "token": token, "kind": what, "guarded_by": g})
            break
    for s in facts.subscripts:
        if s.scope == scope and s.line <= len(lines) and s.value in lines[s.line - 1]:
            g = _guarded(facts.branches, scope, s.line)
            out.append({"function": fn, "path": d["path"], "line": s.line, "call": f"{s.value}[{s.index}]", "token": s.value + "[", "kind": "data-dependent shape (boolean mask)", "guarded_by": g})
    return out


# --- the check -----------------------------------------------------------------------------------


def _ev(ctx, path: str, line: int, note: str) -> Evidence:
    return Evidence(path, line, note=note, snippet=ctx.snippet(path, line))


@dataclass
class CaptureHazardsData:
    """Host syncs and data-dependent shapes reachable from the captured forward."""

    capture_site: str  # path:line
    model_forward: str
    reachable_functions: int
    functions: list
    guarded: list
    constraints: list


@dataclass
class MoEPathData:
    """A MoE quant method reached from the captured forward: its kernels and whether they are capture-safe."""

    quant_method: str
    selected_for_device: bool
    in_capture: bool
    capture_safe: bool
    kernels: list
    scanned: list
    native_ops: list
    library_ops: list
    resolved_by: str  # "runtime view" | "class name"
    launches: list  # [{kernel, path, line}]
    hazards: list
    guarded: list
    capture_chain: list  # [{what, path, line, inferred}]
    path_to_apply: list  # [{node, path, line, how, inferred}]
    constraints: list


@dataclass
class UnresolvedMoEData:
    """MoE quant methods reached from the capture whose kernels are picked at run time."""

    capture_site: str
    unresolved_quant_methods: list
    handoffs: dict  # quant method -> where it hands its work off

@check("cuda_graph_host_sync", params=CudaGraphParams, payload=(CaptureHazardsData, MoEPathData, UnresolvedMoEData))
def cuda_graph_host_sync(ctx, rule) -> list[Finding]:
    G = ctx.tree.graph
    params: CudaGraphParams = rule.params
    constraints = list(params.constraints)
    forwards = _model_forwards(ctx)
    chains = _capture_chains(ctx, params)
    if not forwards or not chains:
        return []
    # the plain capture (graph_ctx / torch.cuda.graph) before breakable or piecewise variants
    chains.sort(key=lambda c: (not re.search(r"(^|[ .])(graph_ctx|graph)\(\)", G.nodes[c["site"]]["name"]), c["site_path"], c["site_line"]))
    chain = chains[0]
    view = runtime_view(ctx) if getattr(ctx.model, "num_experts", 0) else None
    if view is not None and view.moe_method:
        # the method SGLang's own get_quant_method returns for this device, model and flags
        qm, device_matched = [view.moe.get("apply") or view.moe_method], True
    elif view is not None and view.moe.get("config_class"):
        qm, device_matched = [], False  # resolved to no MoE method (an unquantized checkpoint, say)
    else:
        qm, device_matched = _quant_methods(ctx, params) if getattr(ctx.model, "num_experts", 0) else ([], False)
    primary_qm = qm[:1] if device_matched else qm
    fwd = forwards[0]
    parent = _reach(ctx, [fwd], params, primary_qm)
    fd = G.nodes[fwd]
    model_hop = {"what": f"model forward: {fd['qualname']} (EntryClass for {', '.join(ctx.model.architectures)})", "path": fd["path"], "line": fd["line"], "text": "def forward", "inferred": True}
    capture_hops = chain["hops"] + [model_hop]
    findings: list[Finding] = []
    # hazards in every reached function, in one finding; capture-guarded ones kept in data only
    guarded, live_all, by_fn = [], [], []
    for n in sorted(parent, key=lambda n: (G.nodes[n].get("path", ""), G.nodes[n].get("line", 0))):
        hz = _hazards(ctx, n, params)
        guarded += [h for h in hz if h["guarded_by"]]
        live = [h for h in hz if not h["guarded_by"]]
        if live:
            hops = _chain(parent, n)
            live_all += live
            by_fn.append({"function": n, "hazards": [{k: h[k] for k in ("path", "line", "call", "kind")} for h in live],
                          "reached_by": [{"node": h[0], "from": h[1], "path": h[2], "line": h[3], "how": h[4], "inferred": h[5]} for h in hops]})
    if live_all:
        cap = params.max_findings
        ev = [_ev(ctx, chain["site_path"], chain["site_line"], "CUDA-graph capture site")]
        ev += [_ev(ctx, h["path"], h["line"], f"{h['kind']}: {h['call']} in {G.nodes[h['function']]['qualname']}") for h in live_all[:cap]]
        kinds = sorted({h["kind"] for h in live_all})
        msg = (f"{len(live_all)} host sync(s)/data-dependent shape(s) in {len(by_fn)} function(s) statically reachable from the "
               f"CUDA-graph-captured forward of {ctx.model.name} ({', '.join(kinds)}); branches are not evaluated, so some may only "
               f"run outside decode capture (prefill, logprobs, warmup): each is a hazard if its branch runs while capturing")
        findings.append(Finding(rule.id, msg, "warning", ev, {
            "capture_site": f"{chain['site_path']}:{chain['site_line']}",
            "model_forward": fwd,
            "reachable_functions": len(parent),
            "functions": by_fn,
            "guarded": [{k: h[k] for k in ("path", "line", "call", "guarded_by")} for h in guarded],
            "constraints": constraints,
        }))
    # the MoE kernel paths: inside capture? capture-safe?
    unresolved = []  # quant methods run inside the capture whose kernels the graph does not reach
    for q in qm:
        in_capture = q in parent
        if not in_capture:  # a path not reached from the captured forward is not a capture fact
            continue
        sub = _reach(ctx, [q], dataclasses.replace(params, max_depth=params.kernel_depth), [])
        kernels = sorted(v for v in sub if G.nodes[v].get("kind") == "triton_kernel")
        natives = sorted(v for v in sub if G.nodes[v].get("kind") == "native_op")
        libraries: list = []
        if view is not None and q == view.moe.get("apply"):
            # what the runtime view reached from apply on the path taken (branches decided)
            leaves = view.primary_leaves()
            kernels = sorted({lf["name"] for lf in leaves if lf["kind"] == "triton_kernel" and lf["name"] in G})
            natives = sorted({lf["name"] for lf in leaves if lf["kind"] == "native_op"})
            libraries = [{"op": lf["name"], "path": lf["path"], "line": lf["line"]} for lf in leaves if lf["kind"] == "library"]
            sub = _reach(ctx, [q], dataclasses.replace(params, max_depth=params.kernel_depth), []) if not kernels else \
                {k: v for k, v in sub.items() if k == q or k in kernels or not (G.nodes[k].get("kind") == "triton_kernel")}
        if not kernels and not natives and not libraries:
            unresolved.append(q)
            continue
        hz = [h for v in sorted(sub) for h in _hazards(ctx, v, params)]
        live = [h for h in hz if not h["guarded_by"]]
        qd = G.nodes[q]
        path_hops = _chain(parent, q) if in_capture else []
        kchain = _chain(sub, kernels[0]) if kernels else []
        if libraries or (kernels and not kchain and view is not None and q == view.moe.get("apply")):
            # hops as the runtime view walked them: (node, parent, path, line, how, inferred)
            first = next((lf for lf in view.primary_leaves() if lf["name"] in kernels), None) or \
                next((lf for lf in view.primary_leaves() if lf["kind"] == "library"), None)
            kchain = [((h["node"] if h["node"] in G else None) or (first["name"] if i == len(first["via"]) - 1 else h["node"]), None, h["path"], h["line"], h["what"], False)
                      for i, h in enumerate(first["via"])] if first else []
            kchain = [h for h in kchain if h[0]]
        ev = []
        if in_capture:
            ev += [_ev(ctx, h["path"], h["line"], h["what"] + (" (inferred)" if h["inferred"] else "")) for h in capture_hops]
            ev += [_ev(ctx, h[2], h[3], f"calls {G.nodes[h[0]].get('name', h[0])}" + (f" ({h[4]})" if h[5] else "")) for h in path_hops]
        ev.append(_ev(ctx, qd["path"], qd["line"], f"{qd['qualname']}"))
        ev += [_ev(ctx, h[2], h[3], f"{'launches' if G.nodes.get(h[0], {}).get('kind') == 'triton_kernel' else 'calls'} {G.nodes.get(h[0], {}).get('name', h[0].rsplit('.', 1)[-1])}") for h in kchain]
        ev += [_ev(ctx, h["path"], h["line"], f"{h['kind']}: {h['call']}") for h in live]
        safe = not live
        names = " -> ".join([qd["qualname"]] + [G.nodes.get(h[0], {}).get("name", h[0].rsplit(".", 1)[-1]) for h in kchain])
        if libraries and not kernels:
            names += " (library op" + ("s" if len(libraries) > 1 else "") + ": " + ", ".join(sorted({lb["op"] for lb in libraries})) + ")"
        where = ("runs inside the CUDA-graph capture" if in_capture else
                 ("not the quant method taken on this device" if device_matched and q != qm[0] else "not reached from the captured forward"))
        msg = f"MoE kernel path {names}: " + where + \
              (" and is capture-safe (no host syncs or data-dependent shapes on its path)" if safe else f"; {len(live)} host sync(s)/data-dependent shape(s) on its path")
        if view is not None and q == view.moe.get("apply"):
            msg += " (the method SGLang's get_quant_method returns for this device, model and server flags)"
        elif q == (qm[0] if device_matched else None):
            msg += f" (the {ctx.model.expert_quant} quant method whose path names this device's arch: a guess by name, the runtime view could not resolve it)"
        findings.append(Finding(rule.id, msg, "note" if safe else "warning", ev, {
            "quant_method": q,
            "selected_for_device": bool(device_matched and q == qm[0]),
            "in_capture": in_capture,
            "capture_safe": safe,
            "kernels": kernels,
            "scanned": sorted(v for v in sub if G.nodes[v].get("kind") == "function"),
            "native_ops": natives[:20],
            "library_ops": libraries[:20],
            "resolved_by": "runtime view" if view is not None and q == view.moe.get("apply") else "class name",
            "launches": [{"kernel": h[0], "path": h[2], "line": h[3]} for h in kchain if G.nodes.get(h[0], {}).get("kind") == "triton_kernel"],
            "hazards": [{k: h[k] for k in ("path", "line", "call", "kind")} for h in live],
            "guarded": [{k: h[k] for k in ("path", "line", "call", "guarded_by")} for h in hz if h["guarded_by"]],
            "capture_chain": [{k: h[k] for k in ("what", "path", "line", "inferred")} for h in capture_hops],
            "path_to_apply": [{"node": h[0], "path": h[2], "line": h[3], "how": h[4], "inferred": h[5]} for h in path_hops],
            "constraints": constraints,
        }))
    if unresolved and not any("quant_method" in f.data for f in findings):
        findings.append(_unresolved_finding(ctx, rule, chain, unresolved, params.kernel_depth))
    return findings


def _unresolved_finding(ctx, rule, chain: dict, unresolved: list[str], depth: int) -> Finding:
    """The MoE quant method is reached from the captured forward, but no kernel is reached from it:
    older releases pick the kernels at run time (a library call in one branch, a runner object built
    from server arguments in another), which static reading does not evaluate. Said as such, so a
    spec does not claim the method is absent, with where each method hands its work off and when."""
    G = ctx.tree.graph
    short = lambda q: G.nodes[q]["qualname"].rsplit(".", 2)[-2] + ".apply"  # noqa: E731
    ignore = tuple(rule.params.handoff_ignore)
    offs = {q: handoffs(ctx, q, ignore) for q in unresolved}
    names = ", ".join(short(q) for q in unresolved)
    msg = (f"MoE quant method{'s' if len(unresolved) > 1 else ''} for {ctx.model.expert_quant} experts reached from the "
           f"CUDA-graph-captured forward of {ctx.model.name}: {names}; no Triton kernel or native op is reached from "
           f"{'them' if len(unresolved) > 1 else 'it'} within {depth} calls, so the kernels are chosen through calls this "
           f"analysis does not resolve (for instance a runner picked from server arguments at run time)")
    said = [f"{short(q)} hands off to " + "; ".join(describe(h) for h in offs[q]) for q in unresolved if offs[q]]
    if said:
        msg += ". " + ". ".join(said)
    ev = [_ev(ctx, chain["site_path"], chain["site_line"], "CUDA-graph capture site")]
    ev += [_ev(ctx, G.nodes[q]["path"], G.nodes[q]["line"], G.nodes[q]["qualname"]) for q in unresolved]
    ev += [_ev(ctx, h["path"], h["line"], f"hand-off: {describe(h)}") for q in unresolved for h in offs[q]]
    return Finding(rule.id, msg, "note", ev, {
        "capture_site": f"{chain['site_path']}:{chain['site_line']}",
        "unresolved_quant_methods": list(unresolved),
        "handoffs": {q: offs[q] for q in unresolved},
    })
