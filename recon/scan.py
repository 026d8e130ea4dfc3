"""Running rules over a loaded tree for a device and a model."""

from __future__ import annotations

import ast
import pickle
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .cache import cache_dir, load_pickle, save_pickle

from .checks import CheckContext, registry
from .findings import Finding
from .progress import phase
from .rules import Rule


@dataclass
class ScanResult:
    findings: list[Finding]
    errors: list[tuple[str, str]] = field(default_factory=list)  # (rule id, one-line error) of checks that crashed
    context: CheckContext | None = None


def cache_key(ctx: CheckContext, rules: list[Rule]) -> str | None:
    """Findings depend on what the scenario's view does (the tree's content, recon's code and data,
    the device, the model, the flags and env: :func:`recon.derived.scenario_key`) and the rules."""
    from .derived import scenario_key

    rule_bytes = b"".join(Path(r.source).read_bytes() if r.source and Path(r.source).is_file() else r.id.encode() for r in rules)
    return scenario_key(ctx, "rules", rule_bytes)


def run_rules(tree, device, model, rules: list[Rule], use_cache: bool = True, server_flags: dict | None = None,
              env: dict | None = None) -> ScanResult:
    """Every rule's findings for a tree, device, model, flags and env (a context of their own);
    :func:`run_scenario` runs them for a scenario's context."""
    ctx = CheckContext(tree, device, model, server_flags=dict(server_flags or {}), env=dict(env or {}))
    return run_scenario(ctx, rules, use_cache)


def run_scenario(ctx: CheckContext, rules: list[Rule], use_cache: bool = True) -> ScanResult:
    """Every rule's findings for the scenario's context (its engine and view are the ones the checks
    read, and the ones the result's ``context`` carries); a check that crashes is reported and the
    others still run.

    Results are cached by everything they depend on, so a warm scan or spec costs a lookup.
    """
    key = cache_key(ctx, rules) if use_cache else None
    store = cache_dir() / "findings" / f"{key}.pkl" if key else None
    if store is not None:
        hit = load_pickle(store)
        if hit is not None:
            findings, errors, shared = hit
            with phase("checks", total=len(rules)) as ph:
                ph.advance(len(rules), note=f"{len(rules)} rules, {len(findings)} findings (cached)")
            ctx.cache.update(shared)
            return ScanResult(findings, errors, ctx)
    result = _run(ctx, rules)
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


class _TooBig(Exception):
    pass


class _SizeSink:
    """A file that only counts what is written to it, and stops the pickler past the bound: a large
    value (the gate model's tables, tens of MB) is not pickled whole just to be dropped."""

    def __init__(self):
        self.n = 0

    def write(self, b) -> int:
        self.n += len(b)
        if self.n > _MAX_SHARED_BYTES:
            raise _TooBig
        return len(b)


def _picklable(cache: dict) -> dict:
    out = {}
    for k, v in cache.items():
        if isinstance(v, ast.AST):
            continue
        sink = _SizeSink()
        try:
            pickle.Pickler(sink).dump(v)  # the same bytes as pickle.dumps, counted as they are framed
        except Exception:  # too big, or not picklable
            continue
        out[k] = v
    return out


def _run(ctx: CheckContext, rules: list[Rule]) -> ScanResult:
    checks = registry()
    findings: list[Finding] = []
    errors: list[tuple[str, str]] = []
    with phase("checks", total=len(rules)) as ph:
        for i, rule in enumerate(rules):
            ph.advance(i, note=rule.id)
            t0 = time.perf_counter()
            try:
                out = checks[rule.check](ctx, rule) or []
            except Exception as e:  # one broken check must not hide the others' findings
                tb = traceback.extract_tb(e.__traceback__)[-1]
                errors.append((rule.id, f"{type(e).__name__}: {e} (at {tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"))
                ph.item(rule.id, time.perf_counter() - t0, "crashed")
                continue
            ph.item(rule.id, time.perf_counter() - t0, f"{len(out)} finding{'' if len(out) == 1 else 's'}")
            for f in out:
                if not f.rule_id:
                    f.rule_id = rule.id
                findings.append(f)
        ph.advance(len(rules), note=f"{len(rules)} rules, {len(findings)} findings" + (f", {len(errors)} crashed" if errors else ""))
    try:  # each finding against the mapped step (recon.placement): on it, undecided, or elsewhere
        from .placement import place_findings
        # the map is the one op-arch-support built (ctx.cache): no phase of its own
        placed = place_findings(ctx, findings, {r.id: r for r in rules})
    except Exception as e:  # the map must not take the findings down with it
        tb = traceback.extract_tb(e.__traceback__)[-1]
        errors.append(("placement", f"{type(e).__name__}: {e} (at {tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"))
        placed = False
    if not placed and getattr(ctx.model, "num_experts", 0):
        _moe_files(ctx, findings, errors)
    findings.sort(key=Finding.sort_key)
    return ScanResult(findings, errors, ctx)


def _moe_files(ctx, findings, errors) -> None:
    """Without a map to place against: which findings sit in a file the MoE path runs code in."""
    try:
        from .runtime import runtime_view
        with phase("runtime view"):
            view = runtime_view(ctx)
        files = view.on_path_files()
        files |= {ctx.tree.graph.nodes[n]["path"] for n in list(files) if n in ctx.tree.graph and ctx.tree.graph.nodes[n].get("path")}
        for f in findings:
            p = f.primary
            f.data["on_moe_path"] = bool(p and p.path in files)
    except Exception as e:  # the view must not take the findings down with it
        tb = traceback.extract_tb(e.__traceback__)[-1]
        errors.append(("runtime-view", f"{type(e).__name__}: {e} (at {tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"))
