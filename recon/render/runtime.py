"""The runtime view as text a person reads at 100 columns: decisions first, then the chain."""

from __future__ import annotations


def _at(path, line) -> str:
    return f"{path}:{line}" if path else "-"


def _clip(text: str, n: int) -> str:
    """At most ``n`` characters, cut at a space and marked, so no name is cut in half."""
    if len(text) <= n:
        return text
    cut = text.rfind(" ", 0, n - 1)
    return text[: cut if cut > n // 2 else n - 1].rstrip() + " …"


def _cond(assumptions, n: int) -> str:
    return "; ".join(("" if a.get("holds", True) else "not ") + _clip(a["test"], n) for a in assumptions)


def render_text(view, verbose: bool = False) -> str:
    out = [f"{view.model} on {view.device}" + (f"  flags: {view.flags}" if view.flags else "")]
    out += [f"diagnostic: {d}" for d in view.diagnostics]
    out.append("")
    out.append("server arguments (decided):")
    for k, d in sorted(view.server_args.items()):
        out.append(f"  {k} = {d['value']}   [{d['source']}]")
        if d.get("test"):
            out.append(f"      when {_clip(d['test'], 180)}")
        if d.get("later"):
            sites = ", ".join(f"{_at(x['path'], x['line'])}" for x in d["later"][:3])
            out.append(f"      not decided with the arguments: written later by code this view does not evaluate ({sites})")
    for f in view.forks:
        sites = ", ".join(sorted({_at(a.get("path"), a.get("line")) for a in f["assumptions"] if a.get("path")}))
        out.append(f"  otherwise, if {_cond(f['assumptions'], 100)}: " + ", ".join(f"{k} = {v}" for k, v in f["changes"].items())
                   + (f"   [{sites}]" if sites else ""))
    moe = view.moe
    if getattr(view, "no_moe", ""):
        out.append("")
        out.append(f"MoE layer: none. {view.no_moe}")
    if moe:
        out.append("")
        out.append(f"MoE quant method: {moe.get('quant_method')!r} ({moe.get('source')})")
        if moe.get("config_class"):
            rs = moe.get("registry_site") or {}
            out.append(f"  config class {moe['config_class']}")
            out.append(f"      registered at {_at(rs.get('path'), rs.get('line'))}")
        for i, o in enumerate(moe.get("outcomes", [])):
            tag = "runs" if i == 0 else "or"
            cond = _cond(o["assumptions"], 80)
            what = o["method"] or ("raises" if o["raises"] else o["value"])
            out.append(f"  {tag}: {what}" + (f"   (assuming {cond})" if cond else ""))
            out.append(f"      returned at {_at(o['path'], o['line'])}")
        if moe.get("note"):
            out.append(f"  note: {moe['note']}")
        for s in moe.get("construction", []):
            out.append(f"  constructed with self.{s['attr']} = {s['value']}   [{_at(s['path'], s['line'])}]")
        for s in moe.get("switches", []):
            out.append(f"  switch self.{s['attr']} = {s['value']}   [{_at(s['path'], s['line'])}]")
        prim = view.decided_leaves()
        if prim:
            out.append("")
            out.append(f"kernels and ops reached from {moe.get('apply')} (whatever recon could not decide):")
            for lf in prim:
                out.append(f"  {lf['kind']}: {lf['name']}")
                if "required_by_release" in lf and lf["required_by_release"] is None:
                    out.append(f"      package {lf['package']} is not among the release's requirements ({lf['requirements']}): "
                               "it runs only where that package was installed besides SGLang")
                out.append(f"      {_at(lf['path'], lf['line'])}")
                for h in lf["via"]:
                    out.append(f"        <- {h['what'][:90]}  ({_at(h['path'], h['line'])})")
        for b in moe.get("built_once", [])[:6]:
            site = b["sites"][0] if b.get("sites") else [None, None]
            out.append(f"  built once per key, not per step (not walked): {b['node'].rsplit('.', 1)[-1]}   "
                       f"[{b['how']}; called at {_at(site[0], site[1])}]")
        if moe.get("apply") and not moe.get("leaves"):
            out.append("")
            out.append(f"kernels and ops reached from {moe['apply']}: none that recon can follow statically "
                       "(the chain ends in a dispatch resolved at run time; `recon query callees` shows what the graph links)")
        out += fork_lines(moe.get("forks", []))
    for a in view.alternatives:
        cond = _cond(a["assumptions"], 100)
        out.append("")
        out.append(f"if {cond}: " + ", ".join(f"{k} = {v}" for k, v in a["changes"].items()))
        out.append(f"  runs {a['method'] or 'no MoE method recon can resolve'}" + (": " + ", ".join(o.rsplit('.', 1)[-1] for o in a["ops"]) if a["ops"] else ""))

    out += notes_lines(view.notes, set() if verbose else set(getattr(view, "notes_idle", ())), verbose)
    return "\n".join(out) + "\n"


def _names(ops: list, n: int = 4) -> str:
    short = list(dict.fromkeys(o.rsplit(".", 1)[-1] if "/" not in o else o for o in ops))
    return ", ".join(short[:n]) + (f" (+{len(short) - n})" if len(short) > n else "") if short else "nothing recon names"


def notes_lines(notes: list, idle, verbose: bool, shown=frozenset()) -> list[str]:
    """The assumptions at the end of a text view: those whose flip changes a choice, one a line (not
    again those a layer already showed); the ones that change nothing counted (``-v`` lists them)."""
    keep = [n for n in notes if (verbose or n not in idle) and n not in shown]
    quiet = 0 if verbose else sum(1 for n in notes if n in idle)
    out = []
    if keep or quiet:
        out += ["", "assumed (environment defaults, checkpoint facts, tests taken one way):"]
        out += [f"  - {n}" for n in keep]
        if quiet:
            out.append(f"  and {quiet} more that change no kernel or op chosen; -v or --format json lists them")
    return out


def fork_lines(forks: list, indent: str = "  ") -> list[str]:
    """The tests on the path recon could not decide, each with its outcomes side by side: the ops
    reached when it holds and when it does not. No outcome is picked."""
    if not forks:
        return []
    out = ["", f"{indent.rstrip() or ''}undecided on this path (recon cannot tell which outcome runs; each is shown):".lstrip()]
    for f in forks:
        out.append(f"{indent}depends on `{_clip(f['test'], 110)}`  [{_at(f.get('path'), f.get('line'))}]")
        out.append(f"{indent}  if it holds: {_names(f['if_true'])}")
        out.append(f"{indent}  if not:      {_names(f['if_false'])}")
    return out
