"""What a finding about one kernel learns from the kernel map: whether the kernel is on the step that
runs for the device, model and flags, and in which layer kind."""

from __future__ import annotations

from typing import Optional


def step_map(ctx) -> Optional[dict]:
    """The context's kernel map (built once per check run, cached on disk), or None when recon
    cannot make one for this tree (a tree without SGLang's model and layer classes)."""
    key = ("kernel_map", getattr(ctx, "flags_key", ""))
    if key not in ctx.cache:
        try:
            from .kmap import map_for
            ctx.cache[key] = map_for(ctx)
        except Exception:  # noqa: BLE001 - a finding stands without the map
            ctx.cache[key] = None
    return ctx.cache[key]


def on_step(ctx, kernel: str) -> Optional[dict]:
    """``{"on_step": bool, "layer": kind or None}`` for a kernel (graph qualname); None without a map."""
    m = step_map(ctx)
    if not m:
        return None
    for lay in m["layers"]:
        if any(o["name"] == kernel for o in lay.get("ops", [])):
            return {"on_step": True, "layer": lay["kind"]}
    for lay in m["layers"]:
        if any(o["name"] == kernel for o in lay.get("leaves", [])):
            return {"on_step": False, "layer": lay["kind"], "only_if": True}
    return {"on_step": False, "layer": None}


def suffix(got: Optional[dict]) -> str:
    if got is None:
        return ""
    if got["on_step"]:
        return f"; on the decode step for this device, model and flags ({got['layer']} layer, recon kernels)"
    if got.get("only_if"):
        return f"; reached from the {got['layer']} layer only under conditions the decode step does not take here (recon kernels)"
    return "; not among the decode-step kernels recon kernels maps for this device, model and flags"
