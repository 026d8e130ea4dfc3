"""The agreement table as Markdown: totals, per release and per field, then each disagreement
class (field, SGLang's value, recon's value, where recon took it) with its count, its cells and
its cause as read from the SGLang source (``causes.json``, keyed by field and the two values)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

CAUSES = Path(__file__).resolve().parent / "causes.json"


def _pct(n: int, d: int) -> str:
    return f"{100.0 * n / d:.1f}%" if d else "-"


def _causes() -> list:
    try:
        return json.loads(CAUSES.read_text())
    except (OSError, ValueError):
        return []


def _cause(causes: list, field: str, key: str) -> str:
    import re
    for c in causes:
        if c["field"] == field and re.search(c["match"], key):
            return c["cause"]
    return ""


def _version(v: str):
    from packaging.version import Version
    try:
        return Version(v)
    except Exception:
        return Version("0")


def _short(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")[:240]


def _key(r: dict) -> str:
    return f"{r['field']}: sglang={r['sglang']!r} recon={r['recon']!r}"


def markdown(rows: list, cmd: str, notes: dict = None) -> str:
    causes = _causes()
    failed = [r for r in rows if r["verdict"] == "oracle-failed"]
    unprobed = [r for r in rows if r["verdict"] == "probe-not-run"]
    rows = [r for r in rows if r["verdict"] not in ("oracle-failed", "probe-not-run")]
    total = Counter(r["verdict"] for r in rows)
    n = len(rows)
    def part(sel):
        rs = [r for r in rows if sel(r["field"])]
        c = Counter(r["verdict"] for r in rs)
        return (f"{c['agree']} of {len(rs)} agree ({_pct(c['agree'], len(rs))}), {c['disagree']} disagree, "
                f"{c['undecided']} recon-undecided")
    probes = any(r["field"].startswith("oracle_") for r in rows)
    lines = ["# Oracle agreement: SGLang's own server-argument resolution (and what its loader builds) vs recon", "",
             f"Made by: `{cmd}`", "",
             f"{n} (release, device, model, flags, field) values: **{total['agree']} agree "
             f"({_pct(total['agree'], n)})**, {total['disagree']} disagree, {total['undecided']} recon-undecided, "
             f"{total['missing']} not tracked by recon.", "",
             f"Of the {n - total['missing']} values recon reports: **{_pct(total['agree'], n - total['missing'])} agree**, "
             f"{_pct(total['disagree'], n - total['missing'])} disagree, {_pct(total['undecided'], n - total['missing'])} undecided.", "",
             *([f"Server-argument fields: {part(lambda f: not f.startswith('oracle_'))}. "
                f"Past the arguments (`oracle_*`: the quant config SGLang's loader builds from config.json, the "
                f"method its `get_quant_method` returns for a MoE and a linear layer, the decode attention backend "
                f"class the registry's factory constructs; run where the table says): "
                f"{part(lambda f: f.startswith('oracle_'))}.", ""] if probes else []),
             "`__cell__` rows are cells SGLang itself rejects (or recon rejects): they agree when both refuse.", "",
             f"Cells the oracle's own environment could not run (left out above): {len(failed)}"
             + (f" in {len({r['release'] for r in failed})} releases (see the table below)" if failed else "") + ".", "",
             "## By release", "", "| release | values | agree | disagree | undecided | missing |", "|---|---|---|---|---|---|"]
    by = defaultdict(Counter)
    for r in rows:
        by[r["release"]][r["verdict"]] += 1
    for r in failed:
        by.setdefault(r["release"], Counter())
    why = dict(notes or {})
    for r in failed:
        why.setdefault(r["release"], str(r["sglang"]))
    for k in sorted(set(by) | set(why), key=_version):
        c = by.get(k, Counter())
        s = sum(c.values())
        if not s:
            lines.append(f"| {k} | not run: {_short(why.get(k, ''))} | | | | |")
            continue
        lines.append(f"| {k} | {s} | {c['agree']} ({_pct(c['agree'], s)}) | {c['disagree']} | {c['undecided']} | {c['missing']} |")
    lines += ["", "## By field", "", "| field | values | agree | disagree | undecided | missing |", "|---|---|---|---|---|---|"]
    byf = defaultdict(Counter)
    for r in rows:
        byf[r["field"]][r["verdict"]] += 1
    for k, c in sorted(byf.items()):
        s = sum(c.values())
        lines.append(f"| {k} | {s} | {c['agree']} ({_pct(c['agree'], s)}) | {c['disagree']} | {c['undecided']} | {c['missing']} |")
    if unprobed:
        lines += ["", "## Probe steps SGLang's code could not run here (left out above)", "",
                  "| count | field | why (first seen) | cells (first 2) |", "|---|---|---|---|"]
        whys = defaultdict(list)
        for r in unprobed:
            whys[(r["field"], str(r["sglang"]).split(" at ")[0][:120])].append(r)
        for (field, why), rs in sorted(whys.items(), key=lambda kv: -len(kv[1])):
            cells = "; ".join(f"{r['release']} {r['device']} {r['model']} {r['flags']}" for r in rs[:2])
            lines.append(f"| {len(rs)} | {field} | {_short(str(rs[0]['sglang']))} | {cells} |")
    lines += ["", "## Disagreement classes", "",
              "| count | field: SGLang vs recon | recon took it from | cells (first 4) | cause |", "|---|---|---|---|---|"]
    classes = defaultdict(list)
    for r in rows:
        if r["verdict"] in ("disagree", "undecided"):
            classes[(r["verdict"], _key(r))].append(r)
    for (verdict, key), rs in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        cells = "; ".join(f"{r['release']} {r['device']} {r['model']} {r['flags']}" for r in rs[:4])
        src = Counter(str(r["recon_source"])[:90] for r in rs).most_common(1)[0][0]
        cause = _cause(causes, rs[0]["field"], key)
        tag = "" if verdict == "disagree" else " (recon undecided)"
        lines.append(f"| {len(rs)} | `{key}`{tag} | {src.replace('|', '/')} | {cells} | {cause} |")
    return "\n".join(lines) + "\n"
