"""missing-device-config: tuned Triton config files that do not exist for this device at this model's shapes.

For every config-file template in the graph (an f-string holding ``device_name=`` and ``.json``)
that the model runs through, the check finds the folder the template is read from (the
``os.path.join(..., "configs", ...)`` near it), the JSON files already there (by device), renders
the file name for each of the model's shapes on ``ctx.device``, and, where a file is missing, the
default config SGLang uses instead: read from the fallback branch of the code that calls the lookup,
by walking its ``if``/``else`` with "no file found" (and the model's block shape, batch 1) bound.
The tuning script and its command for each missing shape come from the rule's params.
"""

from __future__ import annotations

import ast
import posixpath
from typing import Any, Optional

from .. import bounded
from .. import tunedconfigs as tc
from ..findings import Evidence, Finding
from . import check

_UNKNOWN = object()


# --- reading a few files with stdlib ast ---------------------------------------------------------


def _ast(ctx, path: str) -> Optional[ast.Module]:
    key = ("ast", path)
    if key not in ctx.cache:
        try:
            ctx.cache[key] = bounded.parse(ctx.tree.read_text(path))
        except (SyntaxError, ValueError, OSError, KeyError):
            ctx.cache[key] = None
    return ctx.cache[key]


def _function(ctx, node_id: str) -> Optional[tuple[str, ast.FunctionDef]]:
    """(path, def node) of a graph function node, found by its line."""
    d = ctx.tree.graph.nodes.get(node_id) or {}
    path, line = d.get("path"), d.get("line")
    if not path or d.get("kind") not in ("function", "triton_kernel"):
        return None
    mod = _ast(ctx, path)
    if mod is None:
        return None
    for n in ast.walk(mod):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == d.get("name"):
            first = min([n.lineno] + [x.lineno for x in n.decorator_list])
            if first <= line <= n.lineno or n.lineno == line:
                return path, n
    return None


def _callers(G, node_id: str) -> list[str]:
    """In-tree functions that call ``node_id``: same module first, then by name (deterministic)."""
    mod = node_id.rsplit(".", 1)[0]
    out = {u for u, _, e in G.in_edges(node_id, data=True) if e.get("kind") == "calls" and G.nodes[u].get("kind") == "function"}
    return sorted(out, key=lambda u: (not u.startswith(mod + "."), u))


def _callees(G, node_id: str) -> list[str]:
    return sorted({v for _, v, e in G.out_edges(node_id, data=True) if e.get("kind") == "calls" and G.nodes[v].get("kind") == "function"})


# --- the folder a template is read from -----------------------------------------------------------


def _configs_join(ctx, path: str) -> Optional[int]:
    """Line of the ``"configs"`` argument of an ``os.path.join`` in ``path``, or None."""
    mod = _ast(ctx, path)
    if mod is None:
        return None
    for n in ast.walk(mod):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "join":
            for a in n.args:
                if isinstance(a, ast.Constant) and a.value == "configs":
                    return a.lineno
    return None


def _folder(ctx, fn: str, lookups: list[str]) -> Optional[tuple[str, str, int]]:
    """(folder, path, line): ``<dir of the module>/configs`` where the lookup joins ``"configs"``."""
    G = ctx.tree.graph
    for f in [fn] + lookups:
        path = G.nodes[f].get("path")
        line = _configs_join(ctx, path) if path else None
        if line:
            return posixpath.join(posixpath.dirname(path), "configs"), path, line
    return None


# --- the default config: walk the fallback branch --------------------------------------------------


class _Eval:
    """A tiny evaluator of the statements that pick a default config.

    ``env`` binds names to values; calls to the lookup functions evaluate to None (no file); a call
    to an in-tree ``*default*`` function is evaluated with its parameters bound. Anything else is
    unknown, and an ``if`` whose test is unknown takes its ``else`` (the tests that matter here,
    "found a file?", are known).
    """

    def __init__(self, ctx, lookups: set, env: dict, module_funcs: dict):
        self.ctx, self.lookups, self.env, self.funcs = ctx, lookups, dict(env), module_funcs
        self.result: Optional[tuple[ast.Dict, dict]] = None
        self.assumed: list[str] = []

    def expr(self, n) -> Any:
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return self.env.get(n.id, _UNKNOWN)
        if isinstance(n, (ast.List, ast.Tuple)):
            return [self.expr(e) for e in n.elts]
        if isinstance(n, ast.Subscript):
            v, i = self.expr(n.value), self.expr(n.slice)
            try:
                return v[i] if v is not _UNKNOWN and i is not _UNKNOWN else _UNKNOWN
            except (TypeError, IndexError, KeyError):
                return _UNKNOWN
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            v = self.expr(n.operand)
            return _UNKNOWN if v is _UNKNOWN else (not v)
        if isinstance(n, ast.BoolOp):
            vals = [self.expr(v) for v in n.values]
            if isinstance(n.op, ast.And):
                if any(v is not _UNKNOWN and not v for v in vals):
                    return False
                return _UNKNOWN if any(v is _UNKNOWN for v in vals) else vals[-1]
            if any(v is not _UNKNOWN and v for v in vals):
                return True
            return _UNKNOWN if any(v is _UNKNOWN for v in vals) else vals[-1]
        if isinstance(n, ast.Compare) and len(n.ops) == 1:
            a, b = self.expr(n.left), self.expr(n.comparators[0])
            if a is _UNKNOWN or b is _UNKNOWN:
                return _UNKNOWN
            op = type(n.ops[0])
            try:
                return {ast.Eq: a == b, ast.NotEq: a != b, ast.Is: a is b, ast.IsNot: a is not b}.get(op) if op in (ast.Eq, ast.NotEq, ast.Is, ast.IsNot) else {
                    ast.Lt: lambda: a < b, ast.LtE: lambda: a <= b, ast.Gt: lambda: a > b, ast.GtE: lambda: a >= b,
                    ast.In: lambda: a in b, ast.NotIn: lambda: a not in b}[op]()
            except (TypeError, KeyError):
                return _UNKNOWN
        if isinstance(n, ast.IfExp):
            t = self.expr(n.test)
            if t is _UNKNOWN:
                return _UNKNOWN
            return self.expr(n.body if t else n.orelse)
        if isinstance(n, ast.Call):
            name = n.func.id if isinstance(n.func, ast.Name) else (n.func.attr if isinstance(n.func, ast.Attribute) else "")
            if name in self.lookups:
                return None  # the lookup found no file: this is the case we are evaluating
            if "default" in name and name in self.funcs:
                return self._call(self.funcs[name], n)
            return _UNKNOWN
        if isinstance(n, ast.Dict):
            return n  # evaluated lazily, so the cited line is the literal's
        return _UNKNOWN

    def _call(self, fn: ast.FunctionDef, call: ast.Call):
        params = [a.arg for a in fn.args.args]
        defaults = fn.args.defaults
        env = {p: self.expr(d) for p, d in zip(params[len(params) - len(defaults) :], defaults)}
        for p, a in zip(params, call.args):
            env[p] = self.expr(a)
        for kw in call.keywords:
            if kw.arg:
                env[kw.arg] = self.expr(kw.value)
        sub = _Eval(self.ctx, self.lookups, {**self.env, **env}, self.funcs)
        ret = sub.block(fn.body)
        self.assumed += sub.assumed
        return ret

    def block(self, body) -> Any:
        """Run statements; the value of a ``return`` when one is reached, else _UNKNOWN."""
        for s in body:
            if isinstance(s, ast.Return):
                return self.expr(s.value) if s.value is not None else None
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
                self.env[s.targets[0].id] = self.expr(s.value)
            elif isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is not None:
                self.env[s.target.id] = self.expr(s.value)
            elif isinstance(s, ast.If):
                t = self.expr(s.test)
                if t is _UNKNOWN:
                    self.assumed.append(ast.unparse(s.test)[:80])
                    t = False
                r = self.block(s.body if t else s.orelse)
                if r is not _UNKNOWN:
                    return r
            elif isinstance(s, ast.Try):
                r = self.block(s.body)
                if r is not _UNKNOWN:
                    return r
        return _UNKNOWN


def _dict_values(ev: _Eval, d: ast.Dict) -> tuple[dict, dict]:
    """(values, sources): each key's evaluated value, and the source of values that were expressions."""
    vals, srcs = {}, {}
    for k, v in zip(d.keys, d.values):
        if not isinstance(k, ast.Constant):
            continue
        x = ev.expr(v)
        if not isinstance(v, ast.Constant):
            srcs[k.value] = ast.unparse(v)
        vals[k.value] = x if x is not _UNKNOWN and not isinstance(x, ast.AST) else ast.unparse(v)
    return vals, srcs


def _default(ctx, lookups: list[str], env: dict, params: dict) -> Optional[dict]:
    """The config used when no file matches: {"values", "sources", "path", "line", "function", "assumed"}."""
    G = ctx.tree.graph
    key = params.get("default_key", "BLOCK_SIZE_M")
    names = {G.nodes[f]["name"] for f in lookups}
    seen = set()
    for fn in lookups + [c for f in lookups for c in _callers(G, f)]:
        if fn in seen:
            continue
        seen.add(fn)
        got = _function(ctx, fn)
        if got is None:
            continue
        path, node = got
        mod = _ast(ctx, path)
        funcs = {n.name: n for n in mod.body if isinstance(n, ast.FunctionDef)}
        ev = _Eval(ctx, names, env, funcs)
        # bind the function's own parameters the check knows (M, N, K, block_size, ...)
        ret = ev.block(node.body)
        cand = ev.env.get("config") if isinstance(ev.env.get("config"), ast.Dict) else (ret if isinstance(ret, ast.Dict) else None)
        if cand is None:
            continue
        if not any(isinstance(k, ast.Constant) and k.value == key for k in cand.keys):
            continue
        vals, srcs = _dict_values(ev, cand)
        line = next(k.lineno for k in cand.keys if isinstance(k, ast.Constant) and k.value == key)
        # the literal may live in a *default* helper: find the file that holds this node
        holder = path
        for f in [path] + [G.nodes[c].get("path") for c in _callees(G, fn)]:
            m = _ast(ctx, f) if f else None
            if m is not None and any(n is cand for n in ast.walk(m)):
                holder = f
                break
        return {"values": vals, "sources": srcs, "path": holder, "line": line, "function": fn, "assumed": ev.assumed}
    return None


# --- what the model needs ------------------------------------------------------------------------


def _kind(template: str) -> Optional[str]:
    f = set(tc.fields(template))
    if "E" in f and "N" in f:
        return "moe"
    if "N" in f and "K" in f and tc.literal_value(template, "dtype"):
        return "gemm"
    return None


def _wanted(kind: str, template: str, model, device, params: dict) -> Optional[tuple[list[dict], dict]]:
    """([{shape fields}], common values) this model needs from the template, or None if it does not use it."""
    tp = int(params.get("tp_size", 1))
    if kind == "gemm":
        dtype = tc.literal_value(template, "dtype") or ""
        quant = dtype.split("_")[0]
        blocked = "block_n" in tc.fields(template)
        if quant != getattr(model, "dense_quant", None) or blocked != bool(getattr(model, "dense_block_shape", None)):
            return None
        common = {"device_name": device.config_name, "dtype": dtype}
        if blocked:
            common["block_n"], common["block_k"] = model.dense_block_shape
        shapes = [{"N": int(s[0]), "K": int(s[1])} for s in (model.dense_gemm_shapes or [])]
        return (shapes, common) if shapes else None
    if kind == "moe":
        if model.expert_quant not in params.get("moe_triton_quants", ["bf16", "fp16", "fp8", "int8"]):
            return None
        dtype = {"fp8": "fp8_w8a8", "int8": "int8_w8a8"}.get(model.expert_quant)
        block = list(model.dense_block_shape) if dtype and model.dense_block_shape else None
        common = {"device_name": device.config_name, "dtype": dtype, "block_shape": block}
        return [{"E": int(model.num_experts), "N": int(model.moe_intermediate_size) // tp}], common
    return None


def _hf_id(model) -> str:
    for a in [model.name] + list(getattr(model, "aliases", []) or []):
        if "/" in a:
            return a
    return model.name


def _argparse_flags(ctx, path: str) -> Optional[set]:
    mod = _ast(ctx, path)
    if mod is None:
        return None
    flags = set()
    for n in ast.walk(mod):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument":
            flags |= {a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")}
    return flags


def _tuning(ctx, kind: str, params: dict, model, missing: list[dict], common: dict) -> tuple[dict, list[str]]:
    spec = (params.get("tuning") or {}).get(kind) or {}
    script = spec.get("script")
    if not script:
        return {}, []
    target = ctx.tree.target
    root_rel = script  # benchmark/ sits at the repo root of a checkout
    present = bool(getattr(target, "repo_root", None)) and ctx.tree.target.source.exists(root_rel)
    info = {"script": script, "in_tree": present, "where": script if present else f"{spec.get('repo', 'https://github.com/sgl-project/sglang')}/blob/main/{script}"}
    flags = _argparse_flags(ctx, root_rel) if present else None
    if flags is not None:
        info["flags"] = sorted(flags)
    cmds = []
    seen = set()
    for m in missing:
        vals = {**common, **m, "script": script, "tp": int(params.get("tp_size", 1)), "hf_model": _hf_id(model),
                "input_type": (common.get("dtype") or "").split("_")[0] or "auto", "dtype_arg": common.get("dtype") or "auto"}
        try:
            cmd = spec["command"].format(**vals)
        except (KeyError, IndexError):
            continue
        if flags is not None:  # keep only flags the script in this tree accepts
            parts, out, skip = cmd.split(), [], False
            for i, p in enumerate(parts):
                if skip:
                    skip = False
                    continue
                if p.startswith("--") and p not in flags:
                    skip = i + 1 < len(parts) and not parts[i + 1].startswith("--")
                    continue
                out.append(p)
            cmd = " ".join(out)
        if cmd not in seen:
            seen.add(cmd)
            cmds.append(cmd)
    return info, cmds


# --- the check -----------------------------------------------------------------------------------


def _dense_step(ctx, lookups: list[str]) -> Optional[dict]:
    """What the step's dense FP8 GEMMs run (``recon kernels``' map) and whether the config reader
    ``lookups`` is on that path; None when the map has no dense layer to say."""
    try:
        from ..kernels.kmap import map_for
        lay = next((x for x in map_for(ctx)["layers"] if x["kind"] == "dense_gemm"), None)
    except Exception:  # noqa: BLE001 - the finding stands on its own without the map
        return None
    if not lay or not lay.get("ops"):
        return None
    nodes = {h.get("node") for o in lay["ops"] for h in o.get("via", [])}
    chosen = [c for d in (lay.get("dispatchers") or {}).values() for c in d["choices"] if c["primary"]
              and any(c["function"] == h.get("node") for o in lay["ops"] for h in o.get("via", []))]
    backend = chosen[0]["function"].rsplit(".", 1)[-1] if chosen else (lay.get("method") or "").rsplit(".", 1)[-1]
    return {"on_step": bool(nodes & set(lookups)), "backend": backend,
            "ops": sorted({o["name"].rsplit(".", 1)[-1] if "(" not in o["name"] else o["name"].split(" ")[0] for o in lay["ops"]})}


@check("missing_device_config")
def missing_device_config(ctx, rule) -> list[Finding]:
    G = ctx.tree.graph
    params = rule.params or {}
    device, model = ctx.device, ctx.model
    files = ctx.tree.index.files
    out: list[Finding] = []
    templates = sorted((n for n, d in G.nodes(data=True) if d.get("kind") == "config_template"), key=lambda n: (G.nodes[n]["path"], G.nodes[n]["line"]))
    for node in templates:
        t = G.nodes[node]
        template = t["template"]
        kind = _kind(template)
        if kind is None:
            continue
        wanted = _wanted(kind, template, model, device, params)
        if wanted is None:
            continue
        shapes, common = wanted
        fns = [u for u, _, e in G.in_edges(node, data=True) if e.get("kind") == "reads_config"]
        if not fns:
            continue
        fn = fns[0]
        # a template built in a name helper is looked up by its callers in the same module
        lookups = [fn] + [c for c in _callers(G, fn) if G.nodes[c].get("path") == t["path"]]
        where = _folder(ctx, fn, lookups[1:])
        if where is None:
            continue
        folder, folder_path, folder_line = where
        in_folder = sorted(p for p, m in files.items() if m.kind == "json" and p.startswith(folder + "/"))
        rx = tc.matcher(template)
        mine = [p for p in in_folder if rx.match(posixpath.basename(p))]
        by_name: dict[str, list[str]] = {}
        for p in mine:
            by_name.setdefault(posixpath.basename(p), []).append(p)
        missing, present = [], []
        for s in shapes:
            name = tc.render(template, {**common, **s})
            if name is None:
                continue
            if name in by_name:
                err = files[by_name[name][0]].error
                if err:  # SGLang json.load()s it, fails, and runs the default: missing for this device
                    missing.append({**s, "file": name, "invalid": f"present but invalid JSON ({err})"})
                else:
                    present.append({**s, "file": by_name[name][0]})
            else:
                missing.append({**s, "file": name})
        if not missing:
            continue
        runs = _dense_step(ctx, lookups) if kind == "gemm" and "block_n" in common else None
        if runs is not None and not runs["on_step"]:
            continue  # the dense GEMMs run another backend here: these configs are not read
        env = {"M": 1, "configs": None, "block_size": [common.get("block_n"), common.get("block_k")] if "block_n" in common else None,
               "block_shape": common.get("block_shape") or ([common["block_n"], common["block_k"]] if "block_n" in common else None),
               "block_n": common.get("block_n"), "block_k": common.get("block_k"), "dtype": common.get("dtype"),
               "is_marlin": False, "_is_hip": getattr(device, "vendor", "nvidia") == "amd", "per_channel_quant": False,
               "E": shapes[0].get("E"), "N": shapes[0].get("N"), "K": shapes[0].get("K")}
        default = _default(ctx, lookups, env, params)
        tuning, commands = _tuning(ctx, kind, params, model, missing, common)
        devices = tc.count_by_device(posixpath.basename(p) for p in mine)
        ev = [Evidence(t["path"], t["line"], note="config file name template", snippet=ctx.snippet(t["path"], t["line"]))]
        ev.append(Evidence(folder_path, folder_line, note=f"read from {folder}", snippet=ctx.snippet(folder_path, folder_line)))
        if default:
            ev.append(Evidence(default["path"], default["line"], note="default config used when no file matches", snippet=ctx.snippet(default["path"], default["line"])))
        label = "FP8 block GEMM" if kind == "gemm" and "block_n" in common else ("fused MoE" if kind == "moe" else f"{common.get('dtype')} GEMM")
        shape_txt = ", ".join(("E={E},N={N}" if kind == "moe" else "N={N},K={K}").format(**m) for m in missing)
        own = devices.get(device.config_name, 0)
        invalid = [m["file"] for m in missing if m.get("invalid")]
        msg = (f"Dense FP8 GEMMs run {runs['backend']} ({', '.join(runs['ops'])}); " if runs else "") + (
               f"No tuned {label} config for {device.name} at {len(missing)} of {len(shapes)} {model.name} shape(s) ({shape_txt}); "
               + (f"{len(invalid)} of them present but invalid JSON ({', '.join(invalid)}); " if invalid else "")
               + f"{len(mine)} files in {folder} cover {len(devices)} devices")
        msg += f", {own} of them for this device" if own else ", none for this device"
        if default:
            dv = default["values"]
            msg += "; falls back to " + ", ".join(f"{k}={v}" for k, v in dv.items())
        data = {
            "template": template,
            "template_at": f"{t['path']}:{t['line']}",
            "kind": kind,
            "lookup": fn,
            "folder": folder,
            "folder_at": f"{folder_path}:{folder_line}",
            "folder_files": len(in_folder),
            "template_files": len(mine),
            "existing_devices": devices,
            "device": device.name,
            "device_config_name": device.config_name,
            "device_files": own,
            "shapes": shapes,
            "missing": missing,
            "present": present,
            "default": default["values"] if default else None,
            "default_sources": default["sources"] if default else None,
            "default_at": f"{default['path']}:{default['line']}" if default else None,
            "default_assumed": default["assumed"] if default else None,
            "tuning_script": tuning.get("where"),
            "tuning_script_in_tree": tuning.get("in_tree", False),
            "commands": commands,
            "runs": runs,
        }
        out.append(Finding(rule.id, msg, rule.severity, ev, data))
    return out
