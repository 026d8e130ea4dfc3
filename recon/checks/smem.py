"""triton-smem-budget: Triton launches on the mapped step whose tiles need more shared memory per
block than the device has (the launch raises ``OutOfResources`` at its first call).

Reads the kernel map (decode layers and the prefill attention), so only launches that run are
judged. The config of each launch is evaluated in its launcher on the device
(:func:`recon.engine.smem.launch_config`: the branch on the capability that picks the tiles), the
kernel's dot operands give the tiles (:func:`recon.engine.smem.dot_regions`). The attention's head
dimensions are the model's; where the step takes one of two attention forms that the engine cannot
decide (DeepSeek's MLA prefill: MHA without a cached prefix, the absorbed MLA form with one), each
form is judged and named.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Optional

from ..findings import Evidence, Finding
from . import check
from .. import astwalk


@dataclass(frozen=True)
class SmemParams:
    prefill_m: int = 8192  # the default chunked-prefill size: the prefill step mapped besides decode
    element_bytes: int = 2  # bf16 tiles


@dataclass
class SmemData:
    kernel: str
    op: str  # the launched kernel as the spec's will-it-run rows name ops
    arch: str
    step: str
    layer: str
    form: str
    need_bytes: int
    limit_bytes: int
    config: dict
    operands: list


def _forms(model) -> list[tuple[str, dict]]:
    """Head dimensions of the attention forms a prefill can take, from the checkpoint's config.json
    (``Lq``, ``Lk``, ``Lv``: the names SGLang's Triton attention launchers bind from q/k/v shapes)."""
    hf = getattr(model, "hf_config", None) or {}
    nope, rope, vh, lora = (hf.get(k) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"))
    if all(isinstance(x, int) for x in (nope, rope, vh, lora)):
        return [("MHA prefill (no cached prefix)", {"Lq": nope + rope, "Lk": nope + rope, "Lv": vh}),
                ("absorbed MLA extend (a cached prefix)", {"Lq": lora + rope, "Lk": lora + rope, "Lv": lora})]
    hd = hf.get("head_dim")
    if isinstance(hd, int):
        return [("attention", {"Lq": hd, "Lk": hd, "Lv": hd})]
    return []


def _fn(mod_ast, qual_tail: str):
    """The (possibly nested in a class) function whose dotted tail is ``qual_tail``."""
    parts = qual_tail.split(".")
    body = mod_ast.body
    node = None
    for p in parts:
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == p), None)
        if node is None:
            return None
        body = node.body
    return node if isinstance(node, ast.FunctionDef) else None


def _leaves(m: dict):
    for lay in m.get("layers", []):
        for lf in lay.get("ops", []):
            yield "decode", lay, lf
    pre = (m.get("prefill") or {}).get("attention")
    for lf in (pre or {}).get("ops", []):
        yield "prefill", pre, lf


@check("triton_smem_budget", params=SmemParams, payload=(SmemData,))
def triton_smem_budget(ctx, rule) -> list[Finding]:
    from ..engine.gatemodel import interpreter
    from ..engine.smem import dot_regions, launch_config, need
    from .oparch import scenario_map

    params: SmemParams = rule.params
    dev = ctx.device
    m = scenario_map(ctx, params.prefill_m)
    if not m or dev.vendor != "nvidia":
        return []
    it = interpreter(ctx)
    out: list[Finding] = []
    seen = set()
    for step, lay, lf in _leaves(m):
        if lf.get("kind") != "triton_kernel" or not lf.get("via") or not lf.get("defined_at"):
            continue
        key = (lf["name"], lf.get("path"), lf.get("line"))
        if key in seen:
            continue
        seen.add(key)
        launcher = lf["via"][-1].get("node") or ""
        kpath, _, kline = lf["defined_at"].rpartition(":")
        lmod = launcher.rsplit(".", 1)[0]
        try:
            l_ast = ast.parse(ctx.tree.read_text(lf["path"]))
            k_ast = l_ast if kpath == lf["path"] else ast.parse(ctx.tree.read_text(kpath))
        except (SyntaxError, ValueError, OSError, KeyError):
            continue
        # the launcher's module is the one its file defines; its qualname's tail is the function
        f = ctx.tree.index.facts(lf["path"])
        modname = getattr(f, "module", None) or lmod
        tail = launcher[len(modname) + 1:] if launcher.startswith(modname + ".") else launcher.rsplit(".", 1)[-1]
        lfn = _fn(l_ast, tail)
        kfn = next((n for n in astwalk.walk(k_ast) if isinstance(n, ast.FunctionDef) and n.lineno <= int(kline or 0) <= (n.end_lineno or 0)
                    and n.name == lf["name"].rsplit(".", 1)[-1]), None)
        if lfn is None or kfn is None:
            continue
        call = next((n for n in astwalk.walk(lfn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) and n.lineno == lf["line"]), None)
        if call is None:
            continue
        regions = dot_regions(kfn)
        if not regions:
            continue
        forms = _forms(ctx.model) if lay.get("kind") in ("attention", "attention_module") else []
        for form, seeds in forms or [("", {})]:
            cfg = launch_config(it, modname, tail, lfn, call, seeds)
            n = need(regions, cfg, cfg.get("num_stages", 1), params.element_bytes)
            if n is None or n["bytes"] <= dev.smem_per_block_bytes:
                continue
            if any(o["buffers"] > 1 for o in n["operands"]):
                continue  # pipelined tiles: the num_stages multiple is not validated against Triton's allocator; not judged
            first = form == "" or form == forms[0][0]
            sev = rule.severity if first else "note"
            tiles = ", ".join(f"{k}={cfg[k]}" for k in sorted(cfg) if k.startswith("BLOCK") or k in ("num_stages", "num_warps"))
            parts = " + ".join(f"{o['operand']} {o['tile'][0]}x{o['tile'][1]}" + (f" x{o['buffers']} stages" if o["buffers"] > 1 else "")
                               for o in n["operands"])
            msg = (f"`{lf['name'].rsplit('.', 1)[-1]}` launched at {lf['path']}:{lf['line']} on the {step} {lay.get('kind')} path"
                   + (f" ({form})" if form else "") + f" needs {n['bytes']:,} B of shared memory per block on {dev.name} ({dev.sm}), "
                   f"over its {dev.smem_per_block_bytes:,} B: tiles {tiles} evaluated in the launcher for {dev.sm}; dot operands at "
                   f"{params.element_bytes} B an element: {parts}. Triton raises OutOfResources at the first launch"
                   + ("" if first else " (this form is reached when a request extends a cached prefix; an estimate of the "
                                        "allocation of the Triton releases SGLang 0.5.x requires, newer Triton may reuse buffers)")
                   + ". Avoid: a release whose launcher picks smaller tiles for this architecture, or another --attention-backend")
            ev = [Evidence(lf["path"], lf["line"], None, "the launch", ctx.snippet(lf["path"], lf["line"])),
                  Evidence(kpath, n["region_line"], None, "the kernel's largest dot region", ctx.snippet(kpath, n["region_line"]))]
            out.append(Finding(rule.id, msg, sev, ev, {
                "kernel": lf["name"], "op": lf["name"], "arch": dev.sm, "step": step, "layer": lay.get("kind", ""), "form": form,
                "need_bytes": n["bytes"], "limit_bytes": dev.smem_per_block_bytes, "config": cfg, "operands": n["operands"]}))
    return out
