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
from dataclasses import dataclass
from typing import Optional

from .. import tunedconfigs as tc
from ..findings import Evidence, Finding
from ..engine.asts import check_ast, graph_function
from ..engine.configwalk import dict_values, ConfigEval
from . import check
from .. import astwalk



# --- reading a few files with stdlib ast ---------------------------------------------------------


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
    mod = check_ast(ctx, path)
    if mod is None:
        return None
    for n in astwalk.walk(mod):
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


# --- the default config: walk the fallback branch (recon.engine.configwalk) -----------------------


def _default(ctx, lookups: list[str], env: dict, params: "MissingConfigParams") -> Optional[dict]:
    """The config used when no file matches: {"values", "sources", "path", "line", "function", "assumed"}."""
    G = ctx.tree.graph
    key = params.default_key
    names = {G.nodes[f]["name"] for f in lookups}
    seen = set()
    for fn in lookups + [c for f in lookups for c in _callers(G, f)]:
        if fn in seen:
            continue
        seen.add(fn)
        got = graph_function(ctx, fn)
        if got is None:
            continue
        path, node = got
        mod = check_ast(ctx, path)
        funcs = {n.name: n for n in mod.body if isinstance(n, ast.FunctionDef)}
        ev = ConfigEval(ctx, names, env, funcs)
        # bind the function's own parameters the check knows (M, N, K, block_size, ...)
        ret = ev.block(node.body)
        cand = ev.env.get("config") if isinstance(ev.env.get("config"), ast.Dict) else (ret if isinstance(ret, ast.Dict) else None)
        if cand is None:
            continue
        if not any(isinstance(k, ast.Constant) and k.value == key for k in cand.keys):
            continue
        vals, srcs = dict_values(ev, cand)
        line = next(k.lineno for k in cand.keys if isinstance(k, ast.Constant) and k.value == key)
        # the literal may live in a *default* helper: find the file that holds this node
        holder = path
        for f in [path] + [G.nodes[c].get("path") for c in _callees(G, fn)]:
            m = check_ast(ctx, f) if f else None
            if m is not None and any(n is cand for n in astwalk.walk(m)):
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


def _wanted(kind: str, template: str, model, device, params: "MissingConfigParams") -> Optional[tuple[list[dict], dict]]:
    """([{shape fields}], common values) this model needs from the template, or None if it does not use it."""
    tp = params.tp_size
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
        if model.expert_quant not in params.moe_triton_quants:
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
    mod = check_ast(ctx, path)
    if mod is None:
        return None
    flags = set()
    for n in astwalk.walk(mod):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument":
            flags |= {a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")}
    return flags


def _tuning(ctx, kind: str, params: "MissingConfigParams", model, missing: list[dict], common: dict) -> tuple[dict, list[str]]:
    spec = (params.tuning or {}).get(kind) or {}
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
        vals = {**common, **m, "script": script, "tp": params.tp_size, "hf_model": _hf_id(model),
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


@dataclass
class MissingConfigData:
    """A tuned-config template with no file for this device at the model's shapes."""

    template: str
    template_at: str
    kind: str  # moe | gemm
    lookup: str
    folder: str
    folder_at: str
    folder_files: int
    template_files: int
    existing_devices: dict
    device: str
    device_config_name: str
    device_files: int
    shapes: list
    missing: list
    present: list
    default: Optional[dict]
    default_sources: Optional[dict]
    default_at: Optional[str]
    default_assumed: Optional[list]
    tuning_script: Optional[str]
    tuning_script_in_tree: bool
    commands: list
    runs: Optional[dict] = None  # what the step's dense GEMMs run (recon kernels' map), when it says

@dataclass(frozen=True)
class MissingConfigParams:
    tp_size: int = 1  # the tensor-parallel size the wanted shapes are split by
    moe_triton_quants: list[str] = ("bf16", "fp16", "fp8", "int8")  # expert formats the Triton fused MoE runs with tuned configs
    default_key: str = "BLOCK_SIZE_M"  # a key of the config used when no file matches
    tuning: Optional[dict] = None  # {kind: {script, command[, repo]}}: how to make the missing files


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


@check("missing_device_config", params=MissingConfigParams, payload=(MissingConfigData,))
def missing_device_config(ctx, rule) -> list[Finding]:
    G = ctx.tree.graph
    params: MissingConfigParams = rule.params
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
