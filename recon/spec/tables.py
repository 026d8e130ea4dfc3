"""Tables the spec draws from the findings: gates, gated sites, tensor-core entry points, dense FP8 configs."""

from __future__ import annotations


from ..names import short
from .common import path_line
from .roles import Roles


def gates(findings, roles: Roles) -> list[dict]:
    """Gate definitions evaluated for the device, with the devices each is true on."""
    out = []
    for f in findings:
        if roles.is_(f, "gates") and "gate" in f.data:
            d = f.data
            out.append({"gate": d["gate"], "value": d.get("value"), "true_on": sorted(d.get("true_on") or []), "at": path_line(f.primary.path, f.primary.line) if f.primary else "", "predicate": d.get("predicate", "")})
    out.sort(key=lambda g: (g["gate"], g["at"]))
    return out


def gated_sites(findings, files: set[str], roles: Roles) -> list[dict]:
    """Gated branches on the MoE path's files: which way each goes on this device and the others."""
    out = []
    for f in findings:
        if roles.is_(f, "gates") and "site" in f.data and f.primary and f.primary.path in files:
            d = f.data
            out.append({"site": short(d["site"]), "test": d.get("test"), "value": d.get("value"), "reference": dict(sorted((d.get("reference") or {}).items())), "at": path_line(f.primary.path, f.primary.line), "patches": d.get("patches", [])})
    out.sort(key=lambda s: s["at"])
    return out


def tensor_core_paths(findings, device, roles: Roles) -> list[dict]:
    out = []
    for f in findings:
        if not roles.is_(f, "tensor-core-paths"):
            continue
        d = f.data
        req = d.get("requires") or {}
        blockers = [f"needs {str(req.get('format', '?')).upper()} (group {req.get('group_size')}, {str(req.get('scale_dtype', '?')).upper()} scales); the model's experts are {str(d['model']['format']).upper()} (group {d['model']['group_size']}, {str(d['model']['scale_dtype']).upper()} scales)"]
        if not d.get("device_native"):
            blockers.append(f"{device.short} has no native {req.get('format')} tensor-core path")
        if "sm100" in d.get("entry", "") and device.compute_capability[0] != 10:
            blockers.append(f"named for sm_100; {device.short} is {device.sm}")
        out.append({
            "entry": d.get("entry"), "qualname": d.get("qualname"), "format": req.get("format"), "element": req.get("element"),
            "group_size": req.get("group_size"), "scale_dtype": req.get("scale_dtype"), "format_from": d.get("format_from"),
            "device_native": d.get("device_native"), "at": path_line(f.primary.path, f.primary.line) if f.primary else "",
            "callers": [{"symbol": short(c[0]), "at": path_line(c[1], c[2])} for c in d.get("callers", [])],
            "blockers": blockers, "adapt": list(d.get("adapt", [])),
        })
    # the closest to the model's format first: same scale dtype and group, then by name
    out.sort(key=lambda p: (p["format"] not in ("nvfp4", "mxfp4", "mxfp8"), p["entry"] or ""))
    return out


def dense_rows(findings, device, roles: Roles) -> list[dict]:
    out = []
    for f in findings:
        if not roles.is_(f, "dense-configs"):
            continue
        d = f.data
        out.append({
            "message": f.message, "kind": d.get("kind"), "template": d.get("template"), "template_at": d.get("template_at"),
            "lookup": d.get("lookup"), "folder": d.get("folder"), "folder_at": d.get("folder_at"),
            "device_config_name": d.get("device_config_name"), "device_files": d.get("device_files"),
            "existing_devices": dict(sorted((d.get("existing_devices") or {}).items())),
            "missing": list(d.get("missing", [])), "present": list(d.get("present", [])),
            "default": d.get("default"), "default_at": d.get("default_at"),
            "tuning_script": d.get("tuning_script"), "tuning_script_in_tree": d.get("tuning_script_in_tree"),
            "commands": list(d.get("commands", [])),
        })
    out.sort(key=lambda x: (x["template_at"] or "", x["kind"] or ""))
    return out


def counts(findings) -> dict:
    c: dict = {}
    for f in findings:
        c[f.rule_id] = c.get(f.rule_id, 0) + 1
    return dict(sorted(c.items()))
