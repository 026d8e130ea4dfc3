"""Bug recall of recon's will-it-run rules on SGLang's own reports: for each case in cases.yaml,
recon (op-arch-support, family-gate, triton-smem-budget) is run on the release that shipped the bug and on the release
that no longer has it; recalled = the buggy release gets a finding of the case's rule naming its op
and file; false alarm = the fixed release gets one. Writes results.json and results.md beside it.

    RECON_CACHE_DIR=/work/cache python bench/hazards_recall/run.py
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
RULES = ("op-arch-support", "family-gate", "triton-smem-budget")


def findings(version: str, device: str, model: str, env: dict | None = None) -> list[dict]:
    from recon.profiles import load_device, load_model
    from recon.rules import load_rules
    from recon.scan import run_rules
    from recon.target import resolve
    from recon.tree import load

    rules = [r for r in load_rules() if r.id in RULES]
    res = run_rules(load(resolve(sglang=version)), load_device(device), load_model(model), rules, env=env)
    if res.errors:
        raise SystemExit(f"{version} {device}: {res.errors}")
    return [{"rule": f.rule_id, "severity": f.severity, "op": f.data.get("op") or ",".join(f.data.get("ops", [])),
             "at": f"{f.primary.path}:{f.primary.line}", "files": sorted({e.path for e in f.evidence}), "message": f.message}
            for f in res.findings if f.severity in ("error", "warning")]


def matches(case: dict, f: dict) -> bool:
    return (re.fullmatch(case["rule"], f["rule"]) is not None and re.search(case["op"], f["op"] or "") is not None
            and any(re.search(case["file"], p) for p in f["files"]))


def main() -> None:
    sys.setrecursionlimit(20000)
    cases = yaml.safe_load((HERE / "cases.yaml").read_text())
    rows = []
    for c in cases:
        t0 = time.time()
        # a case may set environment variables as the report's deployment did (``env:``)
        bug = findings(c["buggy"], c["device"], c["model"], c.get("env"))
        fix = findings(c["fixed"], c["device"], c["model"], c.get("env"))
        hit = [f for f in bug if matches(c, f)]
        fa = [f for f in fix if matches(c, f)]
        rows.append({**c, "recalled": bool(hit), "false_alarm": bool(fa), "hits": hit, "false_alarms": fa,
                     "other_on_fixed": [f for f in fix if f not in fa], "seconds": round(time.time() - t0)})
        print(f"{c['id']}: recalled={bool(hit)} false_alarm={bool(fa)} ({rows[-1]['seconds']} s)", flush=True)
    (HERE / "results.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    n = len(rows)
    lines = ["# Will-it-run bug recall (bench/hazards_recall)", "",
             f"recall {sum(r['recalled'] for r in rows)}/{n}, false alarms on the fixed releases {sum(r['false_alarm'] for r in rows)}/{n}", "",
             "| case | report | device, model (env) | bug in | fixed in | recalled | false alarm | what recon said on the buggy release |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        said = "; ".join(f"{h['rule']} {h['severity']} at {h['at']}" for h in r["hits"][:2]) or "nothing matching"
        lines.append(f"| {r['id']} | {r['report']} | {r['device']}, {r['model']}{' (' + ', '.join(f'{k}={v}' for k, v in r['env'].items()) + ')' if r.get('env') else ''} | {r['buggy']} | {r['fixed']} | "
                     f"{'yes' if r['recalled'] else 'no'} | {'yes' if r['false_alarm'] else 'no'} | {said} |")
    (HERE / "results.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
