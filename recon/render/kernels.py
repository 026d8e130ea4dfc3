"""The kernel map as text (100 columns), Markdown, and the diff of two maps."""

from __future__ import annotations

import re

from ..columns import fold_all, markdown
from .runtime import fork_lines, notes_lines
from ..safetext import inert, md_code, md_text

_ENV_NOTE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*( unset|=)")


def _op_label(q) -> str:
    """The last part of a qualified name; a path or a call as it is."""
    return q.rsplit(".", 1)[-1] if q and "/" not in q and "(" not in q else (q or "")


def _at(path, line) -> str:
    return f"{path}:{line}" if path else "-"


def _cond(a: dict) -> str:
    return ("" if a.get("holds") else "not ") + a["test"][:110]


def _head(lay: dict) -> list[str]:
    k = lay["kind"]
    if k == "attention":
        b = lay.get("backend_name") or {}
        out = [f"backend {b.get('value')!r}  [{b.get('field')} decided at {b.get('source')}" + (f" when {b['test'][:120]}" if b.get("test") else "") + "]"]
        for o in b.get("others", []):
            out.append(f"  or {o['value']!r} if {o['when'][:120]}  [{o['at']}]")
        if lay.get("registry"):
            r = lay["registry"]
            out.append(f"registry @{r['decorator']}({b.get('value')!r}) -> {_op_label(r['factory'])}  [{_at(r['path'], r['line'])}]")
        if lay.get("backend_class"):
            ret = lay.get("class_returned_at") or []
            out.append(f"class {_op_label(lay['backend_class'])}" + (f"  [built at {_at(ret[-1]['path'], ret[-1]['line'])}]" if ret else ""))
            for c in lay.get("other_classes", []):
                out.append(f"  or class {_op_label(c['class'])} if " + "; ".join(_cond(a) for a in c["assumptions"]))
        if lay.get("entry"):
            out.append(f"entry {_op_label(lay['entry'].rsplit('.', 1)[0])}.{lay['entry'].rsplit('.', 1)[1]}")
        return out
    if k == "dense_gemm":
        out = [f"quant method {lay.get('quant_method')!r} ({lay.get('quant_source')})"]
        if lay.get("method"):
            r = lay.get("method_returned_at") or {}
            how = r.get("how") or "get_quant_method returns it"
            out.append(f"linear method {_op_label(lay['method'])}  [{how} at {_at(r.get('path'), r.get('line'))}]")
            for o in lay.get("other_methods", []):
                out.append(f"  or {_op_label(o['method'])} if " + "; ".join(_cond(a) for a in o["assumptions"]))
        for attr, d in sorted((lay.get("dispatchers") or {}).items()):
            used = any(f"self.{attr}" in h["what"] for o in lay.get("ops", []) for h in o.get("via", []))
            if not used:
                continue
            out.append(f"self.{attr} = {_op_label(d['dispatcher'])}()  [{_at(d['path'], d['line'])}]")
            for c in d["choices"][:4]:
                cond = "; ".join(_cond(a) for a in c["assumptions"])
                tag = "returns" if c["primary"] else "or"
                last = c["returned_at"][-1] if c["returned_at"] else {}
                out.append(f"  {tag} {_op_label(c['function'])}" + (f" if {cond}" if cond else "") + f"  [{_at(last.get('path'), last.get('line'))}]")
        return out
    if k == "moe":
        b = lay.get("backend") or {}
        out = [f"moe_runner_backend = {b.get('value')}  [{b.get('source')}]",
               f"quant method {lay.get('quant_method')!r}: {_op_label(lay.get('config_class'))} -> {_op_label(lay.get('method'))}"]
        for a in lay.get("alternatives", [])[:3]:
            out.append(f"  or {_op_label(a.get('method'))} if " + "; ".join(x["test"][:90] for x in a["assumptions"]))
        rk = lay.get("recon_kernel")
        if rk:
            out.append(f"recon's grouped MXFP4 kernel runs here (written by recon apply, recon {rk['recon']}): "
                       + ", ".join(k["kernel"] for k in rk["kernels"][:4]) + (" ..." if len(rk["kernels"]) > 4 else ""))
        return out
    if k == "communication":
        out = [f"tp_size {lay.get('tp_size')}"]
        for st in lay.get("sites", []):
            out.append(f"site {st['in']}: {st['what']}  [{_at(st['path'], st['line'])}]")
            if st["when"]:
                out.append("    only if " + "; ".join(st["when"])[:200])
        return out
    return [f"class {_op_label(lay.get('class'))}" + (f" -> {_op_label(lay['entry'])}" if lay.get("entry") else "")]


def _op_name(o: dict) -> str:
    return o["name"] if o["kind"] in ("library", "torch_op") else _op_label(o["name"])


def _ops_lines(lay: dict, width: int = 96) -> list[str]:
    out = []
    ops = lay.get("ops", [])
    # optional work: the other outcome of its test runs nothing in its place
    extra = [o for o in lay.get("leaves", []) if o.get("extra_if") and o not in ops]
    tail = [f"only if {' and '.join(t[:90] for t in o['extra_if'])}: {o['kind']} {_op_name(o)}  [{_at(o['path'], o['line'])}]"
            for o in extra[:4]]
    if not ops:
        out.append("runs: no kernel or library op recon can name (torch ops, or the path is not followed)" if lay["kind"] != "communication" else "")
        return [x for x in out + tail if x]
    for o in ops:
        decided = o.get("decided", not o.get("when"))
        out.append(f"{'runs' if decided else 'first outcome'} {o['kind']}: {_op_name(o)}  [{_at(o['path'], o['line'])}]")
        if not decided:
            # not a claim that it runs: the tests below pick it or another op (listed under "undecided")
            out.append("    only if " + "; ".join(("" if t["holds"] else "not ") + t["test"][:90] + f" [{_at(t.get('path'), t.get('line'))}]"
                                                for t in o.get("tests") or [])[:300]
                       if o.get("tests") else "    assuming " + "; ".join(w[:100] for w in o["when"])[:300])
        for h in o.get("via", []):
            out.append(f"    <- {h['what'][:width - 30]}  [{_at(h['path'], h['line'])}]")
    out += tail
    out += [x for x in fork_lines(lay.get("forks", []), "") if x]
    return out


def _gates(lay: dict, idle=frozenset()) -> list[str]:
    out = []
    for a in lay.get("gates", []) or []:
        out.append(f"gate: {_cond(a)}  [{_at(a.get('path'), a.get('line'))}]")
    for s in lay.get("switches", []) or []:
        out.append(f"switch: self.{s['attr']} = {s['value']}  [{_at(s['path'], s['line'])}]")
    for s in lay.get("construction", []) or []:
        out.append(f"built with: self.{s['attr']} = {s['value']}  [{_at(s['path'], s['line'])}]")
    for n in lay.get("env_read", []) or []:
        # an environment variable's value, or a test the primary rule took as false; one whose
        # flip changes nothing is counted at the end of the map, not shown
        if n not in idle:
            out.append(f"{'env' if _ENV_NOTE.match(n) else 'assumed'}: {n}")
    return out


def _roof(lay: dict) -> list[str]:
    out = []
    for r in lay.get("roofline", []):
        if r.get("bytes") is None:
            out.append(f"roofline: {r['basis']}")
            break
        flops = f", {r['flops'] / 1e9:.2f} GFLOP" if r.get("flops") is not None else ""
        out.append(f"roofline M={r['M']}: {r['bytes'] / 1e6:.1f} MB{flops} per step; floor {r['floor_us']} us ({r['basis']})")
    return out


def _will_run(lay: dict, arch: str) -> list[str]:
    """The mark on a layer whose op has no kernels for the device (or that recon does not know)."""
    out = []
    for w in lay.get("will_run", []):
        if w["runs"] is False:
            ver = f" {w['version']}" if w.get("version") else ""
            fix = f"; {w['package']} {w['first_with']} has them" if w.get("first_with") else ""
            out.append(f"!! WILL NOT RUN on {arch}: {_op_label(w['op'])} has no {arch} kernels ({w['package']}{ver}: "
                       f"{', '.join(w['built_for'])}){fix}  [{w['at']}]")
        elif w.get("first_with") or w.get("built_for"):
            out.append(f"?? {_op_label(w['op'])} has {arch} kernels only in {w['package']} {w.get('first_with') or '(no known version)'}: "
                       f"the installed version decides  [{w['at']}]")
        else:
            out.append(f"?? {_op_label(w['op'])}: not known whether it has {arch} kernels (no entry in recon's op data)  [{w['at']}]")
    return out


def render_text(m: dict, verbose: bool = False) -> str:
    idle = set() if verbose else set(m.get("notes_idle", []))
    g = m["cuda_graph"]
    out = [f"{m['model']} on {m['device']} ({m['arch']}), {m['target']}: one decode step",
           f"model class {m.get('model_class') or '(not in this tree)'}; tp_size {m['tp_size']}; CUDA graph: "
           + ("captured" if g["captured"] else "not captured" if g["value"] else "not decided") + f" (disable_cuda_graph = {g['value']}, {g['source']})"]
    out += [f"diagnostic: {d}" for d in m.get("diagnostics", [])]
    for s in m.get("startup", []):
        out.append(f"start-up: {s['global']} = {s['value']}  [set in {s['set_in']}, {_at(s['path'], s['line'])}]")
    if m.get("budget"):
        out += [""] + budget_lines(m["budget"])
    for lay in m["layers"]:
        out.append("")
        ps = lay.get("per_step", {})
        launches = ps.get("launches")
        out.append(f"== {lay['kind']}" + (f"   ({launches} launches per step: {ps['basis']})" if launches else ""))
        body = _will_run(lay, m["arch"]) + _head(lay) + _gates(lay, idle) + _ops_lines(lay) + _roof(lay)
        if lay.get("note"):
            body.append(f"note: {lay['note']}")
        out += ["  " + x for x in body if x]
    if m.get("prefill"):
        p = m["prefill"]
        out.append("")
        out.append(f"== prefill at M={p['M']} (not captured in the CUDA graph)")
        out += ["  " + x for x in _will_run(p["attention"], m["arch"]) + _head(p["attention"]) + _ops_lines(p["attention"])]
        for key in ("dense_gemm_roofline", "moe_roofline"):
            r = p.get(key)
            if r:
                out.append(f"  {key.split('_roofline')[0]} roofline: {r['bytes'] / 1e6:.1f} MB, {r['flops'] / 1e9:.1f} GFLOP; floor {r['floor_us']} us")
    out += notes_lines(m.get("notes", []), idle, verbose, shown={n for lay in m["layers"] for n in lay.get("env_read", []) or []})
    return "\n".join(out) + "\n"


def render_md(m: dict, verbose: bool = False) -> str:
    g = m["cuda_graph"]
    idle = set() if verbose else set(m.get("notes_idle", []))
    t, c = md_text, md_code  # names, paths and values come from the tree: inert Markdown (recon.safetext)
    flag = f"disable_cuda_graph = {g['value']}"
    out = [f"# Kernel map: {t(m['model'])} on {t(m['device'])} ({t(m['arch'])})", "",
           f"{t(m['target'])}, one decode step. Model class {c(m.get('model_class'))}, tp_size {t(m['tp_size'])}, CUDA graph "
           + ("captured" if g["captured"] else "not captured") + f" ({c(flag)}, {t(g['source'])}).", "",
           "| layer | runs | per step | floor (M=min..max) |", "|---|---|---|---|"]
    for lay in m["layers"]:
        ops = ", ".join(c(_op_label(o["name"]), cell=True) for o in lay.get("ops", [])) or "(no named op)"
        if any(w["runs"] is False for w in lay.get("will_run", [])):
            ops += " **(will not run on " + t(m["arch"]) + ")**"
        floors = [str(r["floor_us"]) + " us" for r in lay.get("roofline", []) if r.get("floor_us") is not None]
        out.append(f"| {t(lay['kind'])} | {ops} | {t(lay.get('per_step', {}).get('launches') or '-')} | {' .. '.join(floors) or '-'} |")
    for lay in m["layers"]:
        # inside the fence each line is inert; a fence longer than any backtick run in it stays closed
        body = fold_all(inert(x) for x in _will_run(lay, m["arch"]) + _head(lay) + _gates(lay, idle) + _ops_lines(lay) + _roof(lay))
        fence = "`" * max(3, 1 + max((len(r) for x in body for r in re.findall(r"`+", x)), default=0))
        out += ["", f"## {t(lay['kind'])}", "", fence] + body + [fence]
    keep = [n for n in m.get("notes", []) if n not in idle]
    quiet = len(m.get("notes", [])) - len(keep)
    if keep or quiet:
        out += ["", "## Assumed", ""] + [f"- {t(n)}" for n in keep]
        if quiet:
            out.append(f"- and {quiet} more that change no kernel or op chosen (`--format json` lists them)")
    return markdown("\n".join(out)) + "\n"  # prose at 100 columns; table rows whole (recon.columns)


def render_diff(a: dict, b: dict, rows: list[dict]) -> str:
    out = [f"kernel map diff: {a['target']} / {a['device']}  ->  {b['target']} / {b['device']}  ({a['model']})"]
    if not rows:
        out.append("no layer changes")
    for r in rows:
        out.append("")
        out.append(f"== {r['kind']}")
        x, y = r["before"] or {}, r["after"] or {}
        for key in ("backend", "class"):
            if x.get(key) != y.get(key):
                out.append(f"  {key}: {x.get(key)} -> {y.get(key)}")
        for st in sorted(set(x.get("settings", [])) - set(y.get("settings", []))):
            out.append(f"  - {st}")
        for st in sorted(set(y.get("settings", [])) - set(x.get("settings", []))):
            out.append(f"  + {st}")
        for side in r.get("unnamed", []):
            out.append(f"  {side}: no kernel or library op recon can name on this path (torch ops, or not followed)")
        for o in r.get("ops_removed", []):
            out.append(f"  - {o}")
        for o in r.get("ops_added", []):
            out.append(f"  + {o}")
        for side, rk in (("before", (r.get("recon_kernel") or {}).get("before")), ("after", (r.get("recon_kernel") or {}).get("after"))):
            if rk:
                out.append(f"  {side}: recon's grouped MXFP4 kernel (written by recon apply, recon {rk['recon']})")
        if x.get("launches") != y.get("launches"):
            out.append(f"  launches per step: {x.get('launches')} -> {y.get('launches')}")
        tu = r.get("time_us") or {}
        for mm in sorted({*(tu.get("before") or {}), *(tu.get("after") or {})}, key=int):
            p, q = (tu.get("before") or {}).get(mm), (tu.get("after") or {}).get(mm)
            out.append(f"  time per step at M={mm}: {_timed(p)} -> {_timed(q)}")
    from ..kernels.kmap import budget_totals

    ta, tb = budget_totals(a) or {}, budget_totals(b) or {}
    changed = [mm for mm in sorted(set(ta) & set(tb), key=int) if ta[mm] != tb[mm]]
    if changed:
        out.append("")
    for mm in changed:
        ratio = f" ({tb[mm] / ta[mm]:.2f}x)" if ta[mm] else ""
        out.append(f"step total at M={mm}: {_us(ta[mm])} us -> {_us(tb[mm])} us{ratio}")
    return "\n".join(out) + "\n"


def _timed(t) -> str:
    """A budget time as the diff prints it: its microseconds and how they were had."""
    if not t:
        return "-"
    return f"{'>= ' if 'floor' in t['how'] else ''}{_us(t['us'])} us ({t['how']})"


def _us(x) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.2f}"


def budget_lines(b: dict) -> list[str]:
    """The step budget as a table within 100 columns: one line of numbers per row, then what each row is."""
    ms = b["M"]
    bw = b["bandwidth"]
    dec = b["decode_M"]

    def cols(m, floor, time):
        return f" {floor:>10} {time:>10}" if m in dec else f" {floor:>12}"

    out = ["step budget, us per step (floor = max(bytes / bandwidth, FLOPs / tensor rate);",
           "  time: m measured, p predicted; a row without one stands at its floor, at least)",
           f"  bandwidth {bw['tbs']} TB/s: {bw['basis']}",
           "  " + f"{'#':>2} {'work':<16} {'launch':>6} {'TC':>3}"
           + "".join(cols(m, f"M={m} floor", "time") if m in dec else cols(m, f"M={m} floor", "") for m in ms) + f" {'share':>6}"]
    tc = {True: "yes", False: "no", None: "-"}
    for i, r in enumerate(b["rows"], 1):
        cells = ""
        for m, p in zip(ms, r["points"]):
            t = r["time"].get(str(m))
            cells += cols(m, _us(p["floor_us"]), (_us(t["us"]) + " " + t["how"][0]) if t else "")
        sh = r["share"].get(str(ms[0]))
        work = f"{r['kind']} {r['part']}" if r.get("part") and r["part"] != "kernels" else r["kind"]
        out.append("  " + f"{i:>2} {work[:16]:<16} {str(r['launches_per_step'] or '-'):>6} {tc[r['tensor_cores']]:>3}" + cells
                   + f" {(f'{100 * sh:.1f}%' if sh else '-'):>6}")
    tot = "".join(cols(m, _us(b["total"][str(m)]["floor_us"]), _us(b["total"][str(m)]["today_us"])) for m in ms)
    out.append("  " + f"{'':>2} {'step total':<16} {'':>6} {'':>3}" + tot)
    out.append(f"  share: of the step's time at M={ms[0]}; TC: tensor cores")
    rk = b.get("recon_kernel") or {}
    if rk.get("supported"):
        out.append(f"  recon's kernel (recon apply) may run paths {'/'.join(rk['paths'])} on {rk['arch']} ({rk['source']})")
    elif rk:
        out.append(f"  recon's kernel (recon apply) does not run on {rk.get('arch')}: {rk.get('why_not')}")
    for i, r in enumerate(b["rows"], 1):
        out.append(f"  {i:>2} {r['op']}")
        if r.get("config"):
            out.append(f"     config {r['config']}")
        if r.get("at"):
            out.append(f"     at {r['at']}")
        if r.get("fix"):
            out.append(f"     fix: {r['fix']}")
        out += [f"     time from {s}" for s in sorted({t["source"] for t in r["time"].values() if t})]
    return [w for x in out for w in _wrap(x)]


def _wrap(line: str, width: int = 100) -> list[str]:
    """One line as lines of at most ``width`` columns, continued under its own indent (paths stay whole)."""
    import textwrap

    if len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False) or [line]
