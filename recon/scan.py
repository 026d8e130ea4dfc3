"""Running rules over a loaded tree for a device and a model."""

from __future__ import annotations

import ast
import hashlib
import pickle
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .cache import cache_dir, load_pickle, save_pickle

from .checks import CheckContext, registry
from .findings import Finding
from .rules import Rule


@dataclass
class ScanResult:
    findings: list[Finding]
    errors: list[tuple[str, str]] = field(default_factory=list)  # (rule id, one-line error) of checks that crashed
    context: CheckContext | None = None


def _cache_key(tree, device, model, rules: list[Rule], flags_key: str = "") -> str | None:
    """Findings depend on the tree's content, recon's code, the rules, the device and the model."""
    if not getattr(tree, "key", ""):
        return None
    here = Path(__file__).resolve().parent
    h = hashlib.sha1(tree.key.encode())
    for p in sorted(here.rglob("*.py")):
        h.update(p.read_bytes())
    for r in rules:
        h.update(Path(r.source).read_bytes() if r.source and Path(r.source).is_file() else r.id.encode())
    h.update(repr(device).encode())
    h.update(repr(model).encode())
    h.update(flags_key.encode())
    return h.hexdigest()


def run_rules(tree, device, model, rules: list[Rule], use_cache: bool = True, server_flags: dict | None = None,
              env: dict | None = None) -> ScanResult:
    """Every rule's findings; a check that crashes is reported and the others still run.

    Results are cached by everything they depend on, so a warm scan or spec costs a lookup.
    """
    proto = CheckContext(tree, device, model, server_flags=dict(server_flags or {}), env=dict(env or {}))
    key = _cache_key(tree, device, model, rules, proto.flags_key) if use_cache else None
    store = cache_dir() / "findings" / f"{key}.pkl" if key else None
    if store is not None:
        hit = load_pickle(store)
        if hit is not None:
            findings, errors, shared = hit
            proto.cache = shared
            return ScanResult(findings, errors, proto)
    result = _run(proto, rules)
    if store is not None and not result.errors:
        try:
            save_pickle(store, (result.findings, result.errors, _picklable(result.context.cache)))
        except Exception:  # a check left something unpicklable in its shared cache: skip caching
            pass
    return result


# Shared check state worth keeping with the findings: small derived results (gate values,
# backend choices, launch lists). Big intermediate structures (parsed modules, the gate
# interpreters with their models, file lines) are cheaper to rebuild than to unpickle: one
# findings entry once carried ~70-160 MB of them and a warm spec spent 4 s loading it.
_MAX_SHARED_BYTES = 1 << 20


def _picklable(cache: dict) -> dict:
    out = {}
    for k, v in cache.items():
        if isinstance(v, ast.AST):
            continue
        try:
            blob = pickle.dumps(v)
        except Exception:
            continue
        if len(blob) <= _MAX_SHARED_BYTES:
            out[k] = v
    return out


def _run(ctx: CheckContext, rules: list[Rule]) -> ScanResult:
    checks = registry()
    findings: list[Finding] = []
    errors: list[tuple[str, str]] = []
    for rule in rules:
        try:
            out = checks[rule.check](ctx, rule) or []
        except Exception as e:  # one broken check must not hide the others' findings
            tb = traceback.extract_tb(e.__traceback__)[-1]
            errors.append((rule.id, f"{type(e).__name__}: {e} (at {tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"))
            continue
        for f in out:
            if not f.rule_id:
                f.rule_id = rule.id
            findings.append(f)
    if getattr(ctx.model, "num_experts", 0):
        try:  # the spec and query read the view; keep it with the findings for warm runs
            from .runtime import runtime_view
            runtime_view(ctx)
        except Exception as e:  # the view must not take the findings down with it
            tb = traceback.extract_tb(e.__traceback__)[-1]
            errors.append(("runtime-view", f"{type(e).__name__}: {e} (at {tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"))
    findings.sort(key=Finding.sort_key)
    return ScanResult(findings, errors, ctx)
