"""backend-selection and misleading-backend-name: string-valued backend choices, resolved for a device.

Pattern: one method stores a constant in an attribute under arch gates
(``layer._dsv4_mxfp4_backend = "sm120_triton"`` in ``process_weights_after_loading``) and another
method compares the same attribute with the same constant (``if layer._dsv4_mxfp4_backend ==
"sm120_triton":`` in ``apply``). The setter is walked statement by statement with the gates
evaluated for the device (:mod:`recon.engine.gatemodel`), which tells the value this device stores;
the comparison then tells which part of the comparing method runs, and the graph's ``calls`` and
``launches`` edges from that part give the chain down to the kernel.

``misleading-backend-name`` reuses the resolution: a class named for one backend (Marlin, Cutlass,
FlashInfer, DeepGEMM, Triton, ...) whose method, on this device, runs a chain that never touches
that backend and does touch another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from ..findings import Evidence, Finding
from . import check
from ..runtime.selections import SelectionScope, selection_chain, fmt_chain, resolve_selections
from . import Devices



@dataclass(frozen=True)
class BackendSelectionParams:
    attribute_pattern: str = SelectionScope.attribute_pattern  # attributes that hold a backend choice
    paths: str = SelectionScope.paths  # files searched
    reference_devices: Devices = ("h200",)  # what they store and run, beside this device's

    @property
    def scope(self) -> SelectionScope:
        return SelectionScope(self.attribute_pattern, self.paths)


@dataclass(frozen=True)
class MisleadingBackendNameParams:
    attribute_pattern: str = SelectionScope.attribute_pattern
    paths: str = SelectionScope.paths
    # backend names (regexes) a class may be named for; the first alternative is the label
    backends: list[str] = ("marlin", "cutlass", "flashinfer", "deep_gemm|deepgemm", "triton", "aiter", "trtllm", "cutedsl", "humming")

    @property
    def scope(self) -> SelectionScope:
        return SelectionScope(self.attribute_pattern, self.paths)


@dataclass
class BackendChoiceData:
    """A backend attribute set in one method and compared in another, resolved for the device."""

    attribute: str
    value: Any  # the constant this device stores
    compared_with: Any  # the constant (or tuple of constants) it is compared with
    taken: Optional[bool]
    set_in: list  # [qualname, path, line]
    taken_in: list  # [qualname, path, line]
    chain: list  # [[qualname, path, line], ...] from the comparison down to the kernel
    kernels: list  # Triton kernels on the chain
    values: list  # every value the setters store
    reference: dict  # reference device short name -> {value, taken, chain}


@dataclass
class MisleadingNameData:
    """A class named for one backend whose method runs another on this device."""

    class_: str  # written "class" in the finding's data
    named_for: str
    runs: list
    actual: list
    backend: Any
    not_run: list

@check("backend_selection", params=BackendSelectionParams, payload=(BackendChoiceData,))
def backend_selection(ctx, rule) -> list[Finding]:
    params: BackendSelectionParams = rule.params
    refs = [d for d in params.reference_devices if d.name != ctx.device.name]
    findings = []
    dev = ctx.device
    for s in resolve_selections(ctx, params.scope):
        if s["value"] is None:
            continue  # the device stores none of the compared values: nothing to say
        short_cls = s["class"].rsplit(".", 1)[-1]
        meth = s["taken_in"].rsplit(".", 1)[-1]
        setter = s["set_in"].rsplit(".", 1)[-1] if s["set_in"] else "?"
        what = "takes" if s["taken"] else "skips"
        ref_txt = []
        ref_data = {}
        for d in refs:
            rs = [x for x in resolve_selections(ctx, params.scope, d) if x["taken_in"] == s["taken_in"] and x["compare_line"] == s["compare_line"]]
            if rs:
                ref_data[d.short] = {"value": rs[0]["value"], "taken": rs[0]["taken"], "chain": [list(c) for c in rs[0]["chain"]]}
                if rs[0]["value"] != s["value"]:
                    ref_txt.append(f"on {d.short} it is {rs[0]['value']!r} and runs {fmt_chain(rs[0]['chain'][1:]) or 'the other path'}")
        kernels = [q for q, _, _ in s["chain"] if ctx.tree.graph.nodes.get(q, {}).get("kind") == "triton_kernel"]
        msg = (f"{short_cls}.{setter} sets {s['attribute']} = {s['value']!r} on {dev.short} ({dev.sm}); "
               f"{short_cls}.{meth} {what} `{s['attribute']} {s['op']} {s['const']!r}` and runs "
               f"{fmt_chain(s['chain'][1:]) or 'the code after it'}")
        if ref_txt:
            msg += "; " + "; ".join(ref_txt)
        ev = []
        if s["set_line"]:
            ev.append(Evidence(s["path"], s["set_line"], None, f"{s['attribute']} = {s['value']!r} set here on {dev.short}", ctx.snippet(s["path"], s["set_line"])))
        ev.append(Evidence(s["path"], s["compare_line"], None, f"compared here ({what} the branch)", ctx.snippet(s["path"], s["compare_line"])))
        for q, p, ln in s["chain"][1:4]:
            if p and ln:
                ev.append(Evidence(p, ln, None, f"calls {q.rsplit('.', 1)[-1]}", ctx.snippet(p, ln)))
        findings.append(Finding(rule.id, msg, rule.severity, ev, {
            "attribute": s["attribute"], "value": s["value"], "compared_with": s["const"], "taken": s["taken"],
            "set_in": [s["set_in"], s["path"], s["set_line"]], "taken_in": [s["taken_in"], s["path"], s["compare_line"]],
            "chain": [list(c) for c in s["chain"]], "kernels": kernels, "values": s["all_values"], "reference": ref_data}))
    return findings


@check("misleading_backend_name", params=MisleadingBackendNameParams, payload=(MisleadingNameData,))
def misleading_backend_name(ctx, rule) -> list[Finding]:
    params: MisleadingBackendNameParams = rule.params
    tokens = list(params.backends)
    G = ctx.tree.graph
    findings = []
    seen = set()
    for s in resolve_selections(ctx, params.scope):
        if s["value"] is None or not s["taken"] and s["range"] is None:
            continue
        cls = s["class"].rsplit(".", 1)[-1]
        named = [t for t in tokens if re.search(t, cls, re.I)]
        if not named:
            continue
        chain_names = [q for q, _, _ in s["chain"][1:]]
        home = s["class"].rsplit(".", 1)[0]
        # judge by what runs: callee names, and their modules unless it is the class's own module
        text = " ".join(q.rsplit(".", 1)[-1] + ("" if q.startswith(home + ".") else " " + q.rsplit(".", 1)[0]) for q in chain_names).lower()
        if not chain_names or any(re.search(t, text, re.I) for t in named):
            continue
        others = [t for t in tokens if t not in named and re.search(t, text + " " + str(s["value"]), re.I)]
        if not others:
            continue
        key = (s["taken_in"], s["compare_line"])
        if key in seen:
            continue
        seen.add(key)
        # what the name promises: the calls of the path not taken on this device
        meth = s["taken_in"]
        end = G.nodes.get(meth, {}).get("end_line", 10**9)
        b = s["branch"]
        other_rng = None
        if b is not None:
            other_rng = (b.else_line or b.end_line + 1, b.end_line if b.else_line else end) if s["taken"] else (b.line, b.body_end)
        skipped = [q for q, _, _ in (selection_chain(ctx, meth, *other_rng, depth=1) if other_rng else []) if any(re.search(t, q, re.I) for t in named)]
        label = named[0].split("|")[0]
        runs = fmt_chain(s["chain"][1:])
        msg = (f"{cls} is named for {label} but on {ctx.device.short} ({ctx.device.sm}) {cls}.{meth.rsplit('.', 1)[-1]} runs "
               f"{runs} ({'/'.join(o.split('|')[0] for o in others)}, backend {s['value']!r})"
               + (f"; the {label} path ({', '.join(q.rsplit('.', 1)[-1] for q in skipped[:3])}) never runs here" if skipped else ""))
        ev = [Evidence(s["path"], s["compare_line"], None, f"{s['attribute']} {s['op']} {s['const']!r}", ctx.snippet(s["path"], s["compare_line"]))]
        cls_line = G.nodes.get(s["class"], {}).get("line")
        if cls_line:
            ev.append(Evidence(G.nodes[s["class"]]["path"], cls_line, None, f"class named for {label}", ctx.snippet(G.nodes[s["class"]]["path"], cls_line)))
        for q, p, ln in s["chain"][1:3]:
            if p and ln:
                ev.append(Evidence(p, ln, None, f"runs {q.rsplit('.', 1)[-1]}", ctx.snippet(p, ln)))
        findings.append(Finding(rule.id, msg, rule.severity, ev, {
            "class": s["class"], "named_for": label, "runs": [list(c) for c in s["chain"]], "actual": [o.split("|")[0] for o in others],
            "backend": s["value"], "not_run": skipped}))
    return findings
