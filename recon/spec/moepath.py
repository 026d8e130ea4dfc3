"""The MoE decode path on this device: the quant method and backend choice that run, the chain from the
capture site to the kernel, its root causes ranked, and what the runtime view decided."""

from __future__ import annotations

from typing import Any, Optional

from .. import safetext
from ..names import short
from .common import TYPICAL_BATCH, path_line, evidence_rows, graph_node, slim
from .roles import Roles

SLOT_REREAD = "slot-reread"  # a root cause computed here from the roofline, not a rule: ranked right after the slot kernel's rule


def moe_backends(findings, roles: Roles, view=None) -> list:
    """Backend-choice findings taken inside the MoE method the runtime view resolved (or one of its
    bases); none where the view resolved no method (its diagnostics say why), never picked by name."""
    if view is None or not view.moe_method:
        return []
    owners = set(view.moe.get("mro") or [view.moe_method])
    return [f for f in findings if roles.is_(f, "backend-choice")
            and (f.data.get("taken_in") or [""])[0].rsplit(".", 1)[0] in owners]


def pick_moe(findings, roles: Roles, view=None) -> tuple[Optional[Any], Optional[Any]]:
    """(capture MoE-path finding, backend-choice finding) for the MoE quant method that runs.
    With a runtime view, a backend choice counts only inside the method it resolved (or its bases)."""
    cg = [f for f in findings if roles.is_(f, "capture") and f.data.get("quant_method")]
    cg.sort(key=lambda f: (not f.data.get("selected_for_device"), not f.data.get("kernels"), f.data["quant_method"]))
    backends = moe_backends(findings, roles, view)
    primary_cg = cg[0] if cg else None
    apply_q = primary_cg.data["quant_method"] if primary_cg else None

    def rank(f):
        d = f.data
        taken_in = (d.get("taken_in") or [""])[0]
        return (taken_in != apply_q, not d.get("taken"), not taken_in.endswith(".apply"), not d.get("kernels"), taken_in, str(d.get("value")))

    backends.sort(key=rank)
    primary_b = backends[0] if backends else None
    if primary_b and apply_q and (primary_b.data.get("taken_in") or [""])[0].rsplit(".", 1)[0] != apply_q.rsplit(".", 1)[0]:
        primary_b = None if any((b.data.get("taken_in") or [""])[0] == apply_q for b in backends) else primary_b
    return primary_cg, primary_b


def moe_chain(G, cg, backend) -> list[dict]:
    """Every hop from the capture site to the kernel, each with the file:line that makes it."""
    hops: list[dict] = []
    if cg:
        for h in cg.data.get("capture_chain", []):
            hops.append({"symbol": h["what"], "at": path_line(h["path"], h["line"]), "how": "capture", "inferred": bool(h.get("inferred"))})
        for h in cg.data.get("path_to_apply", []):
            hops.append({"symbol": short(h["node"]), "qualname": h["node"], "at": path_line(h["path"], h["line"]), "how": h.get("how", "calls"), "inferred": bool(h.get("inferred"))})
    seen = {h.get("qualname") for h in hops}
    if backend:
        d = backend.data
        for i, (q, p, ln) in enumerate(d.get("chain", [])):
            if q in seen:
                continue
            how = f"takes `{d.get('attribute')} == {d.get('value')!r}`" if i == 0 else ("launches" if graph_node(G, q).get("kind") == "triton_kernel" else "calls")
            hops.append({"symbol": short(q), "qualname": q, "at": path_line(p, ln), "how": how, "inferred": False})
            seen.add(q)
    elif cg:
        for l in cg.data.get("launches", []):
            if l["kernel"] not in seen:
                hops.append({"symbol": short(l["kernel"]), "qualname": l["kernel"], "at": path_line(l["path"], l["line"]), "how": "launches", "inferred": False})
                seen.add(l["kernel"])
    for h in hops:
        h.setdefault("qualname", None)
        d = graph_node(G, h.get("qualname"))
        h["defined_at"] = path_line(d.get("path"), d.get("line")) if d else ""
        h["kind"] = d.get("kind", "") if d else ""
    return hops


def mermaid_flow(hops: list[dict]) -> str:
    lines = ["flowchart TD"]
    for i, h in enumerate(hops):
        label, at = safetext.mermaid_label(h["symbol"]), safetext.mermaid_label(h["at"])  # names from the tree
        lines.append(f'    n{i}["{label}<br/><small>{at}</small>"]')
    for i in range(1, len(hops)):
        style = "-.->" if hops[i].get("inferred") else "-->"
        lines.append(f"    n{i - 1} {style} n{i}")
    return "\n".join(lines)


def kernels_of(cg, backend) -> list[str]:
    ks = set()
    if cg:
        ks.update(cg.data.get("kernels", []))
    if backend:
        ks.update(backend.data.get("kernels", []))
    return sorted(ks)


def slot_causes(causes: list[dict], roles: Roles) -> list[dict]:
    """Root causes that name the per-slot kernel (one row per program)."""
    return [c for c in causes if roles.slot_kernel(c["rule"]) and (c["data"].get("shape") or {}).get("one_row_per_program")]


def root_causes(findings, kernels: list[str], path_files: set[str], rl: dict, model, roles: Roles) -> list[dict]:
    """Findings that explain the MoE kernel's time, ranked by their rules' ``spec.rank``, with evidence."""
    kset = set(kernels)
    names = {k.rsplit(".", 1)[-1] for k in kernels}
    causes = []
    for f in findings:
        if not roles.is_(f, "root-cause"):
            continue
        d = f.data
        q = d.get("qualname") or d.get("kernel")
        hit = q in kset or d.get("kernel") in names or d.get("kernel_name") in names
        if not hit and roles.match(f.rule_id) == "file":
            hit = bool(f.primary and f.primary.path in path_files)
        if hit:
            causes.append({"rule": f.rule_id, "title": "", "message": f.message, "evidence": evidence_rows(f), "data": slim(d)})
    slot = slot_causes(causes, roles)
    rank = {c["rule"]: roles.rank(c["rule"]) for c in causes}
    if slot:
        rank[SLOT_REREAD] = roles.rank(slot[0]["rule"]) + 0.5
        rows = {r["M"]: r for r in rl["rows"]}
        shown = [rows[m] for m in sorted({TYPICAL_BATCH, max(rows)}) if m in rows] or rl["rows"][-1:]
        ev = [e for e in slot[0]["evidence"] if "loop" not in e["note"]][-1:]
        causes.append({
            "rule": SLOT_REREAD,
            "title": "Every (token, expert) slot streams its expert's whole weight",
            "message": "one program row per (token, expert) slot, so an expert is read once per slot, not once per step: " + "; ".join(
                f"at M={r['M']} {r['M'] * model.top_k} expert reads per layer where {r['unique_experts']:.0f} distinct experts are touched "
                f"({r['slot_reread_factor']}x the bytes of a kernel that reads each expert once)" for r in shown),
            "evidence": ev,
            "data": {"rows": [{"M": r["M"], "slot_reads": r["M"] * model.top_k, "unique_experts": r["unique_experts"], "factor": r["slot_reread_factor"]} for r in shown]},
        })
    causes.sort(key=lambda c: (rank[c["rule"]], c["message"]))
    for i, c in enumerate(causes, 1):
        c["rank"] = i
    return causes


def runtime_summary(view) -> Optional[dict]:
    """What decided the MoE path: resolved server arguments, the quant method and its outcomes, the
    library ops the chain ends in, and what was assumed."""
    if view is None:
        return None
    moe = view.moe or {}
    ops = []
    for lf in view.primary_leaves():
        if lf["kind"] != "triton_kernel":
            ops.append({"kind": lf["kind"], "name": lf["name"], "at": path_line(lf["path"], lf["line"]), "when": lf["when"]})
    rs = moe.get("registry_site") or {}
    return {
        "flags": view.flags,
        "env": view.env,
        "server_args": [{"field": k, "value": d["value"], "source": d["source"], "test": d.get("test") or ""}
                        for k, d in sorted(view.server_args.items())],
        "forks": [" and ".join(f"`{a['test'][:120]}`" for a in f["assumptions"]) + ": " + ", ".join(f"`{k} = {v}`" for k, v in f["changes"].items())
                  for f in view.forks[:4]],
        "quant_method": moe.get("quant_method"),
        "quant_source": moe.get("source"),
        "config_class": moe.get("config_class"),
        "registry_at": path_line(rs.get("path"), rs.get("line")) if rs else "",
        "method": moe.get("method"),
        "outcomes": [_outcome(o, i == 0) for i, o in enumerate(moe.get("outcomes", []))],
        "switches": "; ".join(f"`self.{x['attr']} = {x['value']}` (`{path_line(x['path'], x['line'])}`)" for x in moe.get("construction", []) + moe.get("switches", [])),
        "library_ops": ops,
        "note": moe.get("note", ""),
        "alternatives": [" and ".join(f"`{x['test'][:100]}`" for x in a["assumptions"]) + ": " + ", ".join(f"`{k} = {v}`" for k, v in a["changes"].items())
                         + f", and the MoE runs `{(a['method'] or '?').rsplit('.', 1)[-1]}`" + (" → " + ", ".join(f"`{o}`" for o in a["ops"]) if a["ops"] else "")
                         for a in getattr(view, "alternatives", [])],
        # what the view assumed whose flip changes a choice; the rest counted (recon.engine.world)
        "assumed": [n for n in view.notes if n not in set(getattr(view, "notes_idle", ()))],
        "assumed_idle": len(set(view.notes) & set(getattr(view, "notes_idle", ()))),
        "notes_idle": sorted(set(view.notes) & set(getattr(view, "notes_idle", ()))),
        "diagnostics": list(view.diagnostics),
    }


def _outcome(o: dict, first: bool) -> str:
    what = f"`{o['method'].rsplit('.', 1)[-1]}`" if o["method"] else ("an error" if o["raises"] else "nothing")
    if first:
        what = f"**{what}**"
    when = ", ".join(f"`{('' if a['holds'] else 'not ') + a['test'][:110]}`" for a in o["assumptions"])
    return f"{what} (`{path_line(o['path'], o['line'])}`)" + (f" when {when}" if when else "")
