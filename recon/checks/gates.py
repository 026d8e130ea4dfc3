"""arch-gate: architecture gates, normalized to a predicate and evaluated for the target device.

A gate is code that asks which GPU it runs on: a function that reads the compute capability
(``def is_sm120(): return torch.cuda.get_device_capability() == (12, 0)``), a callable made by
assignment (``is_sm120_supported = lru_cache(maxsize=1)(partial(_check_cuda_device_version,
device_capability_majors=[12], cuda_version=(12, 8)))``, also alias chains ``a = b = ...``), a
derived function that calls gates, or a platform property looked up through a name -> probe table
(``get_platform().is_sm120``). Each gate's body is evaluated by a tiny interpreter over stdlib
``ast`` (never importing SGLang) with the device's capability, CUDA version and vendor standing in
for the probes; what it cannot know stays ``None``.

Gated sites are ``if`` statements whose test names a gate, a module variable holding a gate's
value (``_is_sm120_supported = is_sm120_supported()``), a platform property, or an inline
capability probe; each is evaluated for the device and for reference devices, and reported when the
device takes a different branch than a reference does (that is where dispatch diverges).

The interpreter is :mod:`recon.engine.interp`, the gate model and the shared evaluation
(:func:`evaluate_gates`, :func:`gate_sites`, :func:`eval_test`) :mod:`recon.engine.gatemodel`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ..findings import Evidence, Finding
from ..engine.gatemodel import GateDiscovery, gate_model, eval_test, evaluate_gates, gate_sites, interpreter
from ..engine.interp import public
from . import Devices, check


@dataclass(frozen=True)
class ArchGateParams:
    gate_name_pattern: str = GateDiscovery.gate_name_pattern  # what a gate function may be called
    exclude_paths: str = GateDiscovery.exclude_paths  # never searched for gates
    platform_receiver: str = GateDiscovery.platform_receiver  # `get_platform().is_sm120`: the receiver's name
    site_paths: str = r"sglang/srt/(layers|model_executor|models)/"  # where gated `if`s are reported
    reference_devices: Devices = ("h200",)  # a site is reported where this device's branch differs from theirs
    truth_table_devices: Devices = ()  # each gate says which of these it is true on
    patch_pattern: str = r"patch|tun(e|ing)|override"  # calls in the taken branch reported as tuning patches
    max_sites: int = 150
    report_unknown_gates: bool = False  # also gates no device decides (they depend on server args, imports)

    @property
    def discovery(self) -> GateDiscovery:
        return GateDiscovery(self.gate_name_pattern, self.exclude_paths, self.platform_receiver)


def _cite_line(ctx, path: str, start: int, end: int, words) -> int:
    """The first line in [start, end] that holds one of ``words`` (a test may span lines)."""
    lines = ctx.tree.lines(path)
    for ln in range(start, min(end, len(lines)) + 1):
        if any(w and w in lines[ln - 1] for w in words):
            return ln
    return start


# --- the check ----------------------------------------------------------------------------------


@dataclass
class GateData:
    """A gate definition evaluated for the device."""

    gate: str
    qualname: str
    value: Optional[bool]  # None: the device does not decide it
    predicate: str
    form: str  # def | assignment | derived | platform-property
    aliases: list
    true_on: list  # short names of the truth-table devices it is true on
    wraps: Optional[str]
    kwargs: dict


@dataclass
class GatedSiteData:
    """An `if` on a gate where this device takes another branch than a reference device."""

    site: str
    gates: list
    test: str
    value: bool
    reference: dict  # reference device short name -> the test's value there
    taken: Optional[list]  # [first, last] line of the branch taken; None: neither body
    calls: list
    patches: list

@check("arch_gate", params=ArchGateParams, payload=(GateData, GatedSiteData))
def arch_gate(ctx, rule) -> list[Finding]:
    params: ArchGateParams = rule.params
    disc = params.discovery
    model = gate_model(ctx, disc)
    values = evaluate_gates(ctx, disc)
    devices = list(params.truth_table_devices)
    findings: list[Finding] = []
    dev = ctx.device
    seen: dict[tuple, list] = {}
    defs: list = []  # (finding, gate, every name it is read by): placed where it is read
    for q, g in sorted(model.gates.items()):  # an alias chain is one statement: report it once
        seen.setdefault((g.path, g.line), []).append(q)
    for key, qs in sorted(seen.items()):
        q = qs[0]
        g = model.gates[q]
        v = values.get(q)
        known = [d for d in devices if public(interpreter(ctx, d, disc).gate_value(q)) is not None]
        if v is None and not known and not params.report_unknown_gates:
            continue  # depends on things other than the device (server args, imports): not an arch gate here
        true_on = sorted(d.short for d in devices if interpreter(ctx, d, disc).gate_value(q))
        vs = {True: "true", False: "false", None: "unknown"}[v]
        names = sorted({n for x in qs for n in model.gates[x].names} - {g.name})
        alias = f" (also {', '.join(names)})" if names else ""
        how = {"assignment": f"defined by assignment wrapping {g.wraps}", "def": "defined by def", "derived": "derived from other gates"}.get(g.form, g.form)
        msg = f"{g.name}{alias} is {vs} on {dev.name} ({dev.sm}): {how}; predicate: {g.predicate}"
        findings.append(Finding(rule.id, msg, rule.severity, [Evidence(g.path, g.line, None, f"gate {g.name} defined here", ctx.snippet(g.path, g.line))],
                                {"gate": g.name, "qualname": q, "value": v, "predicate": g.predicate, "form": g.form,
                                 "aliases": names, "true_on": true_on, "wraps": g.wraps, "kwargs": g.kwargs}))
        defs.append((findings[-1], q, {g.name, *g.names, *names}))
    # gated sites where this device's branch differs from a reference device's
    refs = [d for d in params.reference_devices if d.name != dev.name]
    limit = params.max_sites
    sites = gate_sites(ctx, params.site_paths, disc)
    n = 0
    for s in sites:
        b, v = s["branch"], s["value"]
        if v is None:
            continue
        ref_vals = {d.short: eval_test(ctx, s["path"], s["module"], s["scope"], b.test, d, disc) for d in refs}
        differs = [k for k, rv in ref_vals.items() if rv is not None and rv != v]
        if not differs:
            continue
        n += 1
        if n > limit:
            break
        names = [q.rsplit(".", 1)[-1] for q in s["gates"]]
        taken = (b.line + 1, b.body_end) if v else ((b.else_line, b.end_line) if b.else_line else None)
        calls = []
        if taken:
            for c in s["facts"].calls:
                if c.scope == b.scope and taken[0] <= c.line <= taken[1]:
                    calls.append(c)
        where = f"{s['module']}.{b.scope}" if b.scope else s["module"]
        taken_txt = "the if-body" if v else ("the else-branch" if b.else_line else "neither body (the if-body is skipped)")
        called = sorted({c.func for c in calls})[:6]
        patches = [c for c in calls if re.search(params.patch_pattern, c.func, re.I)]
        msg = (f"in {where}: `if {b.test}` is {str(v).lower()} on {dev.short} ({', '.join(f'{k}: {str(ref_vals[k]).lower()}' for k in differs)}), "
               f"so it takes {taken_txt}" + (f", which calls {', '.join(called)}" if called else ""))
        if patches:
            msg += f"; applies tuning patch {', '.join(sorted({p.func for p in patches}))} on this device"
        cite = _cite_line(ctx, s["path"], b.line, max(b.line, b.body_end), [n.split(".")[-1] for n in b.names] + names)
        ev = [Evidence(s["path"], cite, None, f"gated by {', '.join(names)}", ctx.snippet(s["path"], cite))]
        for c in (patches or calls)[:3]:
            ev.append(Evidence(s["path"], c.line, c.end_line, f"runs on {dev.short}: {c.func}", ctx.snippet(s["path"], c.line)))
        findings.append(Finding(rule.id, msg, rule.severity, ev, {
            "site": where, "gates": names, "test": b.test, "value": v, "reference": ref_vals,
            "taken": list(taken) if taken else None, "calls": called, "patches": sorted({p.func for p in patches})}))
    _place_definitions(ctx, model, defs, sites)
    return findings


def _place_definitions(ctx, model, defs: list, sites: list) -> None:
    """A gate's definition is a fact about the device, not a site on the step: it is placed where
    the gate is read. Read by a server argument the scenario resolves (a model override picking the
    MoE runner on ``get_platform().is_sm100``): on the step, that argument cited; read by an ``if``
    in the dispatch layers: placed as the best of those ``if`` lines; read nowhere the step goes:
    elsewhere, saying so (its own message, which binds no model size, is kept)."""
    from ..placement import ELSEWHERE, ON_STEP, PLACEMENTS, place, step_sites

    s = step_sites(ctx) if defs else None
    if s is None:
        return
    G = ctx.tree.graph
    args = {}
    if getattr(ctx.model, "num_experts", 0):
        from ..runtime import runtime_view

        view = runtime_view(ctx)
        args = view.server_args if view is not None else {}
    # the gates each resolved argument's test reads: platform properties through the platform's
    # table (`get_platform().is_sm100`), plain names only where one gate has that name
    by_name: dict = {}
    for _, q, names in defs:
        for n in names:
            by_name.setdefault(n, set()).add(q)
    reads: dict = {}
    for k, a in sorted(args.items()):
        if not (a.get("test") and a.get("path")):
            continue
        got = set()
        for d in re.findall(r"[\w.]*\(\)\.\w+|[\w.]+", a["test"]):
            q = model.platform_property(d) if "." in d else None
            if q:
                got.add(q)
            elif "." not in d and len(by_name.get(d, ())) == 1:
                got |= by_name[d]
        for q in got:
            reads.setdefault(q, []).append((k, a))
    for f, q, names in defs:
        read = reads.get(q, [])
        if read:
            f.data["placement"] = ON_STEP
            for k, a in read[:3]:
                f.evidence.append(Evidence(a["path"], a["line"], None, f"read deciding {k} = {a['value']}", ctx.snippet(a["path"], a["line"])))
            f.message += "; read deciding " + ", ".join(f"{k} = {a['value']} [{a['path']}:{a['line']}]" for k, a in read[:3])
            continue
        # the `if`s of the dispatch layers that test it, and every call of it (a kernel wrapper's
        # `if not _is_fa3_supported(): raise` on the step's attention path)
        at = [(x["path"], x["branch"].line) for x in sites if q in x["gates"]]
        at += sorted({(d["path"], d["line"]) for _, _, d in G.in_edges(q, data=True)
                      if d.get("kind") == "calls" and d.get("path") and d.get("line")}) if q in G else []
        got = [(place(s, pth, ln), pth, ln) for pth, ln in at]
        best = min(got, key=lambda g: PLACEMENTS.index(g[0]["placement"])) if got else ({"placement": ELSEWHERE, "tests": []}, None, None)
        f.data["placement"] = best[0]["placement"]
        if best[0]["tests"]:
            f.data["placement_tests"] = best[0]["tests"]
        if best[0]["placement"] == ON_STEP:
            f.evidence.append(Evidence(best[1], best[2], None, "read here, on the mapped step", ctx.snippet(best[1], best[2])))
            f.message += f"; read on the mapped step at {best[1]}:{best[2]}"
        elif best[0]["placement"] == ELSEWHERE:
            f.message += ("; not read on the mapped step by a call, an `if` of the dispatch layers or a server argument "
                          "resolved for this scenario (elsewhere)")

