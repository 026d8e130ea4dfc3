"""The spec of a dense model (no routed experts: Llama, Qwen3 dense, Mistral, Gemma): what its decode
step runs (attention, the dense GEMMs and the rest of the kernel map), the server arguments that
decided it, the dense FP8 tuning, and a plan read from the step budget. Nothing MoE is invented:
there is no MoE path, expert roofline, swap-in point or reference-kernel comparison for such a model.
"""

from __future__ import annotations

import json
from typing import Optional

from .. import notanalyzed
from ..names import short
from .common import path_line, finding_row
from .moepath import runtime_summary
from .rows import headline, ranked_rows, target_row, will_it_run
from .tables import counts, dense_rows

SECTIONS = [
    "Summary",
    "The dense decode path on this device",
    "Dense FP8 GEMM tuning",
    "The plan",
    "Appendix: every finding",
    "Not analyzed",
]

# the layer kinds the dense path section shows, in step order (the kernel map's own kinds)
PATH_KINDS = ("attention", "attention_module", "decoder_layer", "dense_gemm", "norm", "embedding", "communication", "logits", "sampling")


def _op(o: dict) -> dict:
    return {"name": o["name"], "kind": o["kind"], "at": path_line(o.get("path"), o.get("line")), "when": list(o.get("when", []))}


def _layer(lay: dict) -> dict:
    """One layer kind of the kernel map as the spec shows it: what was built, what decided it, the ops."""
    out = {"kind": lay["kind"], "ops": [_op(o) for o in lay.get("ops", [])],
           "launches": (lay.get("per_step") or {}).get("launches"), "basis": (lay.get("per_step") or {}).get("basis", ""),
           "cuda_graph": lay.get("cuda_graph"), "note": lay.get("note", ""), "decided": []}
    if lay["kind"] == "attention":
        b = lay.get("backend_name") or {}
        out["what"] = short(lay.get("backend_class")) or ""
        out["decided"].append(f"backend `{b.get('value')}` from `{b.get('field', 'attention_backend')}` ({b.get('source') or 'default'})" if b else "")
        r = lay.get("registry")
        if r:
            out["decided"].append(f"`@{r['decorator']}` factory `{short(r['factory'])}` (`{path_line(r['path'], r['line'])}`)")
    elif lay["kind"] == "dense_gemm":
        r = lay.get("method_returned_at") or {}
        out["what"] = short(lay.get("method")) or ""
        out["quant_method"] = lay.get("quant_method")
        out["quant_source"] = lay.get("quant_source")
        out["config_class"] = lay.get("config_class")
        out["decided"].append(f"quant method `{lay.get('quant_method')}` ({lay.get('quant_source')})")
        if lay.get("config_class"):
            out["decided"].append(f"`{short(lay['config_class'])}.get_quant_method` for a `LinearBase` layer returns it (`{path_line(r.get('path'), r.get('line'))}`)")
        elif r:
            out["decided"].append(f"{r.get('how') or 'returned'} (`{path_line(r.get('path'), r.get('line'))}`)")
        for o in lay.get("other_methods", []):
            out["decided"].append(f"or `{short(o['method'])}` if " + "; ".join(("" if a["holds"] else "not ") + a["test"][:100] for a in o["assumptions"]))
    else:
        out["what"] = short(lay.get("class") or lay.get("entry")) or ""
    out["decided"] = [d for d in out["decided"] if d]
    out["gates"] = [("" if a.get("holds") else "not ") + a["test"][:160] for a in lay.get("gates", [])]
    return out


def _path_files(kmap: dict) -> set:
    """Files the mapped step runs code in: each primary op's site and every hop that reaches it."""
    out = set()
    for lay in kmap.get("layers", []):
        for o in lay.get("ops", []):
            if o.get("path"):
                out.add(o["path"])
            out.update(h["path"] for h in o.get("via", []) if h.get("path"))
    return out


def _plan(budget: Optional[dict], layers: list[dict], dense_fp8: list, device: dict) -> list[dict]:
    """From the step budget, largest share first: where the step goes and what is left to the floor.
    No kernel of recon's applies (its reference kernel is a MoE kernel), so every item is read from
    the map and the budget, and an unmeasured gain is said to be unmeasured."""
    if not budget:
        return []
    from ..kernels.budget import ranked

    m = budget["M"][0]
    ops = {lay["kind"]: lay for lay in layers}
    out = []
    for r in ranked(budget, m):
        floor = r["points"][0]["floor_us"]
        lay = ops.get(r["kind"]) or {}
        first = next(iter(lay.get("ops", [])), None)
        item = {"kind": r["kind"], "title": f"{r['kind']}: {r['op']}", "share": r["share"][str(m)], "M": m, "floor_us": floor,
                "bound": r["points"][0].get("bound"), "where": first["at"] if first else "",
                "measured": bool(r["time"].get(str(m)))}
        if r["kind"] == "dense_gemm" and (r.get("config") or "").startswith("default"):
            d = next(iter(dense_fp8), None)
            item["fix"] = (f"tune the dense FP8 GEMM configs for {device['short']} with SGLang's tuning script (section 3): "
                           f"the GEMMs run with the {r['config']}" + (f"; the template is built at `{d['template_at']}`" if d else ""))
        out.append(item)
    return out


def build_dense_context(tree, device, model, findings, errors=(), target_reason: Optional[str] = None, rules=None, view=None,
                        kmap: Optional[dict] = None) -> dict:
    """The spec of a dense model as one object (JSON as is; Markdown through ``spec-dense.md.j2``)."""
    from .roles import Roles

    titles = {r.id: r.title for r in (rules or [])}
    roles = Roles(rules)
    kmap = kmap or {}
    budget = kmap.get("budget")
    layers = [_layer(lay) for k in PATH_KINDS for lay in kmap.get("layers", []) if lay["kind"] == k]
    files = _path_files(kmap)
    fds = []
    for f in findings:
        d = dict(finding_row(f), title=titles.get(f.rule_id, f.rule_id))
        d.pop("on_moe_path", None)
        d["on_step_path"] = bool(f.primary and f.primary.path in files)
        fds.append(d)
    dense_fp8 = dense_rows(findings, device, roles)
    rt = runtime_summary(view)
    if rt:  # the MoE half of the view is empty for a dense model: only its server-argument half is shown
        rt = {k: rt[k] for k in ("flags", "env", "server_args", "forks", "assumed", "diagnostics")}
    ctx = {
        "sections": list(SECTIONS),
        "dense": True,
        "target": target_row(tree, target_reason),
        "not_analyzed": notanalyzed.entries(tree),
        "device": device.to_dict(),
        "model": model.to_dict(),
        "model_class": {"architectures": list(model.architectures), "found": kmap.get("model_class"),
                        "missing": [] if kmap.get("model_class") else list(model.architectures)},
        "no_moe": getattr(view, "no_moe", "") or model.notes,
        "runtime": rt,
        "cuda_graph": kmap.get("cuda_graph"),
        "context_tokens": kmap.get("context"),
        "layers": layers,
        "budget": budget,
        "headline": headline(budget),
        "budget_rows": ranked_rows(budget),
        "dense_fp8": dense_fp8,
        "will_it_run": will_it_run(findings, roles, titles),
        "plan": _plan(budget, layers, dense_fp8, device.to_dict()),
        "errors": [{"rule": r, "error": e} for r, e in sorted(errors)],
        "findings": fds,
        "finding_counts": counts(findings),
    }
    ctx["not_found"] = [n for n in (
        f"model class {', '.join(model.architectures)} (the model's registered architecture) is not in this tree" if not kmap.get("model_class") else "",
        "no attention kernel recon can name on the mapped step" if not any(l["kind"] == "attention" and l["ops"] for l in layers) else "",
        "no dense GEMM op recon can name on the mapped step" if not any(l["kind"] == "dense_gemm" and l["ops"] for l in layers) else "",
    ) if n]
    return json.loads(json.dumps(ctx, sort_keys=True))
