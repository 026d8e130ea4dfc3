"""Work on a layer's path that is not its kernel launch: what the step budget adds beside the kernels.

The kernel map names the kernels a layer launches; the same rules the spec reads find the rest of the
work on that path, and this module keeps the findings that sit where the map's launches are:

- ``per-call-weight-conversion``: a weight or scale tensor converted on every call (``.to(torch.float32)``
  of both MXFP4 scale tensors in the slot path), in the function that makes the launch;
- ``eager-epilogue``: the eager torch ops on a launch's output (each one more launch), whose kernel
  sites are the map's launch lines;
- ``missing-device-config``: whether the kernel a layer launches has a tuned config for the device, in
  the file that launches it (the lookup sits beside the launch), else the default it falls back to.

One implementation of each measure (the rule's check), so the map and the spec cannot disagree.
"""

from __future__ import annotations

from typing import Optional

PATH_RULES = ("per-call-weight-conversion", "eager-epilogue", "missing-device-config")


def _findings(ctx) -> dict[str, list]:
    """{rule id: findings} of the path rules, for the map's scenario (a crashing check gives none:
    the budget then says it has no such row, it never guesses one)."""
    from . import registry
    from ..rules import load_rules

    checks = registry()
    out: dict[str, list] = {}
    for rule in load_rules():
        if rule.id not in PATH_RULES or rule.check not in checks:
            continue
        try:
            out[rule.id] = list(checks[rule.check](ctx, rule))
        except Exception:  # noqa: BLE001 - a crashed check is a missing row, not a crashed map
            out[rule.id] = []
    return out


def _enclosing(tree, path: str, line: int) -> Optional[tuple[str, int]]:
    """(name, first line) of the innermost function of ``path`` holding ``line``."""
    from ..engine.asts import enclosing_function, module_ast

    try:
        mod = module_ast(tree, path)  # parsed once per loaded tree, not once per call site
    except (OSError, KeyError):
        return None
    best = enclosing_function(mod, line) if mod is not None else None
    return (best.name, best.lineno) if best is not None else None


def _launches(lay: dict) -> list[tuple[str, int]]:
    return [(o["path"], o["line"]) for o in lay.get("ops", []) if o.get("path") and o.get("line")]


def path_costs(ctx, layers: list[dict]) -> dict:
    """{layer kind: {"conversions": [...], "epilogue": {...}, "config": {...}}} for the layers whose
    launches the path rules' findings sit beside."""
    found = _findings(ctx)
    out: dict = {}
    for lay in layers:
        sites = _launches(lay)
        if not sites:
            continue
        files = {p for p, _ in sites}
        funcs = {f for f in (_enclosing(ctx.tree, p, ln) for p, ln in sites) if f}
        got: dict = {}
        for f in found.get("per-call-weight-conversion", []):
            d = f.data
            ev = f.primary
            if ev is None or ev.path not in files or not d.get("bytes_per_call"):
                continue
            fn = _enclosing(ctx.tree, ev.path, ev.line)
            if fn not in funcs:
                continue
            got.setdefault("conversions", []).append({
                "tensor": d["tensor"], "target": d["target"], "shape": d.get("shape"), "stored": d.get("stored"),
                "bytes_per_call": d["bytes_per_call"], "function": d["function"], "path": ev.path, "line": ev.line,
                "guard": d.get("guard")})
        for f in found.get("eager-epilogue", []):
            d = f.data
            if d.get("path") not in files or not set(d.get("kernel_sites", [])) & {ln for p, ln in sites if p == d["path"]}:
                continue
            n_ops = sum(len(x["ops"]) for x in d.get("ops", []))
            got["epilogue"] = {"function": d["function"], "path": d["path"], "line": d["line"], "launches": n_ops,
                               "ops": list(dict.fromkeys(o for x in d.get("ops", []) for o in x["ops"])),
                               "per_batch": [{"M": r["M"], "bytes": r["bytes"]} for r in d.get("per_batch", [])]}
        for f in found.get("missing-device-config", []):
            d = f.data
            at = (d.get("template_at") or "").rsplit(":", 1)[0]
            if at not in files:
                continue
            missing, present = d.get("missing") or [], d.get("present") or []
            got["config"] = {"tuned": not missing, "missing": len(missing), "of": len(missing) + len(present),
                             "device_files": d.get("device_files"), "default": d.get("default"),
                             "template_at": d.get("template_at"), "default_at": d.get("default_at")}
        if got:
            out[lay["kind"]] = got
    return out
