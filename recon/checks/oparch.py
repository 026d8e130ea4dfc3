"""Will it run? Library ops on the mapped step that the device's architecture has no kernels for
(op-arch-support), and arch gates in front of them that lump or split an SM family (family-gate).

Both read the kernel map (:func:`recon.kernels.kmap.map_for`: what the engine says runs, decode and
the prefill attention), never the whole tree by name. What each op is built for is data with
evidence (``data/external_ops.yaml``, :mod:`recon.engine.opreqs`), for the package version the
release pins; an op with no entry is "not known" and said so, never assumed to run.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass
from typing import Optional

from ..findings import Evidence, Finding
from ..engine.asts import check_ast, enclosing_function, if_statements, module_ast
from ..engine.opreqs import support
from . import check
from ..runtime.moe import cond_text
from .. import astwalk


@dataclass(frozen=True)
class OpArchParams:
    prefill_m: int = 8192  # tokens of the prefill step mapped besides decode (the default chunked-prefill size)
    kinds: list[str] = ("library",)  # leaf kinds whose requirements are looked up
    report_unknown: bool = True  # a note for each op on the path that the data does not know


@dataclass
class OpArchData:
    op: str
    arch: str
    step: str  # decode | prefill
    layer: str
    on_path: bool  # on the mapped path (else reached only under the undecided tests in `when`)
    runs: Optional[bool]
    built_for: list
    package: str
    requirement: Optional[str]
    version: Optional[str]
    first_with: Optional[str]
    routed_by: list
    when: list
    avoid: list
    evidence_text: str


def _layers(m: dict):
    for lay in m.get("layers", []):
        yield "decode", lay
    pre = (m.get("prefill") or {}).get("attention")
    if pre:
        yield "prefill", pre


def _routed_by(lay: dict) -> list[dict]:
    """The decision that routed the layer to its class (a server argument written at file:line)."""
    out = []
    bn = lay.get("backend_name") or {}
    if bn.get("value") and bn.get("path"):
        out.append({"what": f"{bn['field']} = {bn['value']!r}" + (f" ({bn['source']})" if bn.get("source") == "default" else ""),
                    "path": bn["path"], "line": bn["line"], "flag": bn["field"]})
    be = lay.get("backend") or {}
    if lay.get("kind") == "moe" and be.get("path"):
        val = be.get("value")
        # the view keeps the value as its source text ("'triton_kernel'"): shown as it is, not quoted again
        shown = val if isinstance(val, str) and val[:1] in "'\"" else repr(val)
        out.append({"what": f"moe_runner_backend = {shown}" if val else "moe_runner_backend", "path": be["path"], "line": be["line"],
                    "flag": "moe_runner_backend"})
    ret = lay.get("method_returned_at") or []
    for h in ([ret] if isinstance(ret, dict) else list(ret))[:1]:  # get_quant_method's return of the linear method
        if isinstance(h, dict) and h.get("path") and h.get("line"):
            out.append({"what": h.get("what") or "get_quant_method returns the linear method", "path": h["path"], "line": h["line"], "flag": None})
    return out


_ENV_NAME = re.compile(r"\b([A-Z][A-Z0-9_]{3,})\b")


def _env_routes(ctx, path: str, line: int, env_read: list) -> list[dict]:
    """Environment variables that decide an ``if`` enclosing the call: a name in the test bound at
    module level from the variable (``_FP8_WO_A_GEMM = envs.SGLANG_OPT_FP8_WO_A_GEMM.get()``) or the
    variable read in the test itself; each with what the layer read for it (its declared default)."""
    mod = check_ast(ctx, path)
    if mod is None:
        return []
    read = {m.group(1): n for n in env_read for m in [_ENV_NAME.match(n)] if m}
    binds = {}
    for st in mod.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            binds[st.targets[0].id] = (ast.unparse(st.value), st.lineno)
    out, seen = [], set()
    for n in if_statements(mod):
        if not (n.lineno < line <= (n.end_lineno or n.lineno)):
            continue
        test = ast.unparse(n.test)
        srcs = [(test, n.lineno)] + [binds[x.id] for x in astwalk.walk(n.test) if isinstance(x, ast.Name) and x.id in binds]
        for src, ln in srcs:
            for var in _ENV_NAME.findall(src):
                if var in read and var not in seen:
                    seen.add(var)
                    out.append({"what": read[var], "path": path, "line": ln, "flag": None, "env": var})
    return out


def _ops_key(lay: dict) -> set:
    return {(o["name"], o.get("path"), o.get("line")) for o in lay.get("ops", [])}


def scenario_map(ctx, prefill_m: int) -> Optional[dict]:
    from ..kernels.kmap import map_for
    key = ("kernel_map", prefill_m)
    if key not in ctx.cache:
        try:
            ctx.cache[key] = map_for(ctx, prefill_m)
        except Exception:  # noqa: BLE001 - no map, nothing to say (the kernels command reports why)
            ctx.cache[key] = None
    return ctx.cache[key]


def path_ops(ctx, params: OpArchParams) -> list[dict]:
    """Every library leaf on the mapped step with what it needs: one row per (op, call site, step)."""
    m = scenario_map(ctx, params.prefill_m)
    if not m:
        return []
    rows, seen = [], set()
    for step, lay in _layers(m):
        on = _ops_key(lay)
        for lf in lay.get("leaves", []):
            if lf.get("kind") not in params.kinds:
                continue
            key = (lf["name"], lf.get("path"), lf.get("line"), step)
            if key in seen:
                continue
            seen.add(key)
            s = support(ctx.tree, lf["name"], ctx.device.sm)
            routes = _routed_by(lay)
            if s.runs is not True and lf.get("path"):
                # the environment tests around the call, and around each call on the way to it
                # (``if envs.SGLANG_OPT_DEEPGEMM_HC_PRENORM.get():`` in the caller of DeepGEMM's wrapper)
                sites = [(lf["path"], lf["line"])] + [(h["path"], h["line"]) for h in reversed(lf.get("via") or []) if h.get("path") and h.get("line")]
                for p, ln in dict.fromkeys(sites):
                    # only the tests nearest the call say what avoids it: an outer one's other value
                    # may lead to the same op another way (SGLANG_OPT_USE_TILELANG_MHC_PRE=0 still
                    # reaches tf32_hc_prenorm_gemm through the model's own pre-norm)
                    near = not any(x.get("env") for x in routes)
                    for r in _env_routes(ctx, p, ln, lay.get("env_read", [])):
                        if r.get("env") not in {x.get("env") for x in routes}:
                            routes.append({**r, "avoids": near})
            rows.append({"step": step, "layer": lay.get("kind", ""), "leaf": lf, "on_path": (lf["name"], lf.get("path"), lf.get("line")) in on,
                         "support": s, "routed_by": routes})
    return rows


def _avoid(s, row) -> list[str]:
    out = []
    if s.first_with is not None and s.version is not None:
        out.append(f"{s.package} {s.first_with} has {s.arch} kernels (this release pins {s.requirement})")
    for r in row["routed_by"]:
        if r.get("flag"):
            out.append(f"--{r['flag'].replace('_', '-')} set to a backend built for {s.arch}")
        if r.get("env") and r.get("avoids", True):
            other = "0" if "default True" in r["what"] else "1" if "default False" in r["what"] else "<the other value>"
            out.append(f"--env {r['env']}={other} (this run read: {r['what']})")
    for t in row["leaf"].get("when", []):
        if not t.startswith("not "):
            out.append(f"a configuration where `{t}` does not hold")
    return out or ["a release or backend whose op on this path is built for " + s.arch]


@check("op_arch_support", params=OpArchParams, payload=(OpArchData,))
def op_arch_support(ctx, rule) -> list[Finding]:
    params: OpArchParams = rule.params
    dev = ctx.device
    out: list[Finding] = []
    for row in path_ops(ctx, params):
        s, lf = row["support"], row["leaf"]
        if s.runs is True or (s.runs is None and not (row["on_path"] and params.report_unknown)):
            continue
        if s.runs is None and s.by_version:  # the installed version decides: both outcomes
            sev, verdict = "warning", (f"has {dev.sm} kernels only in {s.package} {s.first_with}" if s.first_with
                                       else f"has no {dev.sm} kernels in any {s.package} version recon knows")
            verdict += f"; this release does not pin one version ({s.requirement or 'no requirement'}), so the installed version decides"
        elif s.runs is None:
            sev, verdict = "note", f"is not known to recon (no entry in data/external_ops.yaml): whether it runs on {dev.sm} is not assumed"
        else:
            sev = "error" if row["on_path"] else "warning"
            ver = f" {s.version}" if s.version else ""
            verdict = f"is not built for {dev.sm}: {s.package}{ver} has kernels for {', '.join(s.archs)}"
        where = f"{row['step']} {row['layer']}"
        route = "; ".join(f"{r['what']} at {r['path']}:{r['line']}" for r in row["routed_by"])
        cond = "" if row["on_path"] else f" (reached when {' and '.join(lf.get('when', []))})"
        # the map's first outcome is not what runs when a test on its way is undecided: said so, and
        # the layer's backend decision is then where the layer goes, not proof it routes to this op
        open_tests = [] if lf.get("decided", not lf.get("when")) else \
            [cond_text(t["test"], t["holds"]) + (f" [{t['path']}:{t['line']}]" if t.get("path") else "") for t in lf.get("tests") or []]
        if row["on_path"] and open_tests:
            cond = f" (its first outcome, reached only if {' and '.join(open_tests[:4])}{' and more' if len(open_tests) > 4 else ''}: undecided)"
        avoid = _avoid(s, row) if s.runs is False or s.by_version else []
        msg = (f"{lf['name']} {verdict}; on the {where} path{cond} on {dev.name}, called at {lf['path']}:{lf['line']}"
               + ((f", the layer's backend set by {route}" if open_tests else f", routed by {route}") if route else "")
               + (f". Avoid: {'; or '.join(avoid)}" if avoid else ""))
        ev = [Evidence(lf["path"], lf["line"], None, f"calls {lf['name']}", ctx.snippet(lf["path"], lf["line"]))]
        for h in (lf.get("via") or [])[-3:-1]:
            if h.get("path") and h.get("line"):
                ev.append(Evidence(h["path"], h["line"], None, h.get("what", ""), ctx.snippet(h["path"], h["line"])))
        for r in row["routed_by"]:
            ev.append(Evidence(r["path"], int(r["line"]), None, f"{'the layer goes here' if open_tests else 'routes here'}: {r['what']}",
                               ctx.snippet(r["path"], int(r["line"]))))
        out.append(Finding(rule.id, msg, sev, ev, {
            "op": lf["name"], "arch": dev.sm, "step": row["step"], "layer": row["layer"], "on_path": row["on_path"],
            "runs": s.runs, "built_for": list(s.archs), "package": s.package, "requirement": s.requirement, "version": s.version,
            "first_with": s.first_with, "routed_by": row["routed_by"], "when": list(lf.get("when", [])), "avoid": avoid,
            "evidence_text": s.evidence}))
    return out


# --- family-gate ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyGateParams:
    prefill_m: int = 8192
    kinds: list[str] = ("library",)
    max_sites: int = 40


@dataclass
class FamilyGateData:
    test: str
    arch: str
    kind: str  # split (leaves out a device of the same SM design) | lump (one branch for different SM designs)
    same_value_on: list
    other_value_on: list
    ops: list  # ops on the mapped path behind the gate's package


_PROBE_CALL = re.compile(r"(get_device_sm|get_device_capability|get_device_core_count|get_compute_capability|device_capability|is_sm\d+\w*|is_blackwell\w*|is_hopper\w*)")


def _sm_order(sm: str) -> int:
    m = re.search(r"\d+", sm)
    return int(m.group()) if m else 0


def _design(d) -> tuple:
    """Devices with the same SM design: the same features and per-block shared memory."""
    return (d.vendor, tuple(sorted(d.features.items())), d.smem_per_block_bytes)


def _local_probes(fn: ast.AST) -> dict:
    """Locals a function binds to a device probe (``sm_version = get_device_sm()``, ``major, minor =
    torch.cuda.get_device_capability()``): name -> the expression that stands for it in a test.
    Device-independent: kept on the (shared, never edited) def node; the caller gets a copy."""
    kept = getattr(fn, "_recon_probes", None)
    if kept is not None:
        return dict(kept)
    out = {}
    for n in astwalk.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.value, ast.Call) and _PROBE_CALL.search(ast.unparse(n.value.func)):
            t = n.targets[0]
            if isinstance(t, ast.Name):
                out[t.id] = ast.unparse(n.value)
            elif isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts):
                for i, e in enumerate(t.elts):
                    out[e.id] = f"({ast.unparse(n.value)})[{i}]"
    fn._recon_probes = out
    return dict(out)


class _Sub(ast.NodeTransformer):
    def __init__(self, env):
        self.env = env

    def visit_Name(self, node):
        if node.id in self.env:
            return ast.parse(self.env[node.id], mode="eval").body
        return node


_FLAG_NAME = re.compile(r"^[A-Za-z_][\w.]*$")


def _flag_module(ctx, mod: str, name: str, hops: int = 4) -> Optional[tuple]:
    """(module, value node) of the module-level flag ``name`` read in ``mod``: bound there, or
    imported (by name or through ``from m import *``, as deep_gemm_wrapper/__init__.py re-exports
    its configurer's flags)."""
    from ..engine.gatemodel import gate_model
    model = gate_model(ctx)
    found = model._module_flags(mod).get(name)
    if found is not None or hops <= 0:
        return found
    f = model._facts(mod)
    for imp in f.imports if f is not None else ():
        if imp.scope or imp.module == mod:
            continue
        if imp.local == name and imp.name:
            return _flag_module(ctx, imp.module, imp.name, hops - 1)
        if imp.name == "*":
            got = _flag_module(ctx, imp.module, name, hops - 1)
            if got is not None:
                return got
    return None


def _route_flags(ctx, lf: dict) -> dict:
    """Files of the module flags that the ``if`` tests around the op's call read
    (``if deep_gemm_wrapper.DEEPGEMM_SCALE_UE8M0:`` picks the scale format fp8_einsum gets), each
    with the flag's own expression as a test to judge (``... or get_device_sm() == 120``): the gate
    that decides the route is often a flag defined in another package's configurer."""
    from ..facts import Branch
    path, line = lf.get("path"), lf.get("line")
    f = ctx.tree.index.facts(path) if path else None
    if f is None or not f.module or not line:
        return {}
    out: dict = {}
    around = [b for b in f.branches if b.line <= line <= b.end_line]
    start = max((b.line for b in around), default=0)
    # the tests around the call, and those before it in its block: a sibling `if` that picks the
    # operands' format (the scale recipe) decides what the op gets as much as one around it
    for b in f.branches:
        if not (b.line <= line <= b.end_line or (around and start < b.line and b.end_line < line)):
            continue
        for n in b.names:
            n = n[:-2] if n.endswith("()") else n
            if not _FLAG_NAME.match(n):
                continue
            head, _, tail = n.rpartition(".")
            mod = f.module
            if head:  # `pkg.FLAG`: the module the name `pkg` is bound to in this file
                imp = next((i for i in f.imports if i.local == head and (not i.scope or b.scope.startswith(i.scope))), None)
                if imp is None:
                    continue
                mod = f"{imp.module}.{imp.name}" if imp.name else imp.module
            got = _flag_module(ctx, mod, tail)
            if got is None:
                continue
            fmod, node = got
            fpath = ctx.tree.graph.nodes.get(fmod, {}).get("path")
            if not fpath or not isinstance(node, ast.AST):
                continue
            ln = getattr(node, "lineno", 0) or 0
            out.setdefault(fpath, []).append(Branch("", ln, ln, 0, ln, (), ast.unparse(node)))
    return out


@check("family_gate", params=FamilyGateParams, payload=(FamilyGateData,))
def family_gate(ctx, rule) -> list[Finding]:
    from ..profiles import list_devices
    from ..engine.gatemodel import eval_test

    params: FamilyGateParams = rule.params
    dev = ctx.device
    if dev.vendor != "nvidia":
        return []
    rows = path_ops(ctx, OpArchParams(prefill_m=params.prefill_m, kinds=params.kinds, report_unknown=False))
    # where the route to each op is decided: the files of its call site and of the hops before it,
    # and the modules of the call site's own package that the call site's file imports (a wrapper's
    # configurer: `ENABLE_JIT_DEEPGEMM` read by deep_gemm_wrapper/entrypoint.py)
    ops_by_file: dict = {}
    flag_branches: dict = {}  # path -> {line: Branch}: a flag's expression, judged like an `if` test
    for r in rows:
        lf = r["leaf"]
        files = {p for p in [lf.get("path")] + [h.get("path") for h in lf.get("via", [])] if p}
        call = ctx.tree.index.facts(lf["path"]) if lf.get("path") else None
        for imp in getattr(call, "imports", ()) if call is not None else ():
            for m in (imp.module, f"{imp.module}.{imp.name}" if imp.name else None):
                p = f"{m.replace('.', '/')}.py" if m else None
                if p in ctx.tree.index.files and posixpath.dirname(p) == posixpath.dirname(lf["path"]):
                    files.add(p)
        for p, br in _route_flags(ctx, lf).items():  # module flags the tests in front of the call read
            files.add(p)
            flag_branches.setdefault(p, {}).update({b.line: b for b in br})
        for p in files:
            ops_by_file.setdefault(p, []).append(r)
    others = {}
    for d in list_devices():  # one device per architecture
        if d.vendor == "nvidia" and d.sm != dev.sm:
            others.setdefault(d.sm, d)
    mine = _design(dev)
    out: list[Finding] = []
    for path in sorted(ops_by_file):
        f = ctx.tree.index.facts(path)
        if f is None or f.error or not f.module:
            continue
        mod_ast = None
        for b in list(f.branches) + sorted(flag_branches.get(path, {}).values()):
            if len(out) >= params.max_sites:
                return out
            if mod_ast is None:
                mod_ast = module_ast(ctx.tree, path)
                if mod_ast is None:  # does not parse
                    break
            fn = enclosing_function(mod_ast, b.line)
            env = _local_probes(fn) if fn is not None else {}
            try:
                node = _Sub(env).visit(ast.parse(b.test.strip(), mode="eval"))
            except SyntaxError:
                continue
            src = ast.unparse(node)
            if not _PROBE_CALL.search(src):
                continue
            here = eval_test(ctx, path, f.module, b.scope, src, None)
            if not isinstance(here, bool):
                continue
            vals = {sm: eval_test(ctx, path, f.module, b.scope, src, d) for sm, d in others.items()}
            # left out of its own design: the device differs from the design's first member (sm_121 from sm_120)
            base = min([sm for sm, d in others.items() if _design(d) == mine] + [dev.sm], key=_sm_order)
            split = sorted(sm for sm, v in vals.items() if isinstance(v, bool) and v != here and _design(others[sm]) == mine) \
                if base != dev.sm else []
            ops_here = ops_by_file[path]
            bad = [r for r in ops_here if r["support"].runs is False]
            lump = sorted(sm for sm, v in vals.items() if v is here and _design(others[sm]) != mine
                          and any(sm in r["support"].archs for r in bad)) if here and bad else []
            if not split and not lump:
                continue
            kind = "split" if split else "lump"
            names = sorted({r["leaf"]["name"] for r in (bad or ops_here)})[:4]
            if split:
                msg = (f"`{b.test.strip()}` is {here} on {dev.sm} but {not here} on {', '.join(split)}, the same SM design "
                       f"(features and shared memory): the gate leaves {dev.sm if not here else ', '.join(split)} out of the family, in front of "
                       f"{', '.join(names)} on the mapped step ({dev.name})")
            else:
                msg = (f"`{b.test.strip()}` is true on {dev.sm} and on {', '.join(lump)}, different SM designs, in front of "
                       f"{', '.join(names)}, built for {', '.join(sorted({a for r in bad for a in r['support'].archs}))} but not {dev.sm}")
            out.append(Finding(rule.id, msg, rule.severity,
                               [Evidence(path, b.line, None, "the gate", ctx.snippet(path, b.line))],
                               {"test": b.test.strip(), "arch": dev.sm, "kind": kind,
                                "same_value_on": sorted([dev.sm] + [sm for sm, v in vals.items() if v is here]),
                                "other_value_on": sorted(sm for sm, v in vals.items() if isinstance(v, bool) and v != here),
                                "ops": names}))
    return out
