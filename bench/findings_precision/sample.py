"""Draw the graded sample: the on-step findings of `recon scan --format json` for each scenario on
a release outside the tests, a seeded random sample of at most N (all when there are fewer).

    RECON_CACHE_DIR=/work/cache python bench/findings_precision/sample.py 0.5.16 > bench/findings_precision/sample.tsv

The placement counts of each scenario go to stderr; every undecided finding's tests (the test and
its file:line) to the file named by a second argument, when given, for the undecided-side check.

With ``--all`` the sample is drawn as an expert reads one scan: from every placement (on-step,
undecided, elsewhere) of one scenario's findings, N of them (default 40), seeded, with each
finding's placement, evidence and message. ``--json FILE`` reads a saved
`recon scan --format json` output instead of running the scan (the same scan, so the same draw):

    recon scan --sglang 0.5.21 --device h200 --model gpt-oss-120b --format json -o scan.json
    python bench/findings_precision/sample.py --all --json scan.json > sample-0.5.21-all.tsv
"""

import argparse
import json
import random
import subprocess
import sys

SEED, N = 16, 30
SCENARIOS = [("h200", "gpt-oss-120b"), ("rtx-pro-6000", "gpt-oss-120b"), ("h200", "qwen3-30b-a3b"), ("b200", "deepseek-v3")]


def _scan(version: str, dev: str, model: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "recon", "scan", "--sglang", version, "--device", dev, "--model", model,
                          "--format", "json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main(version: str, undecided_out: str = "") -> None:
    rows, undecided = [], []
    for dev, model in SCENARIOS:
        doc = _scan(version, dev, model)
        counts = {}
        for f in doc["findings"]:
            counts[f["placement"]] = counts.get(f["placement"], 0) + 1
            if f["placement"] == "on-step":
                p = f["evidence"][0]
                rows.append((dev, model, f["rule_id"], f"{p['path']}:{p['line']}", f["message"]))
            elif f["placement"] == "undecided":
                p = f["evidence"][0]
                undecided.append((dev, model, f["rule_id"], f"{p['path']}:{p['line']}", " & ".join(f.get("data", {}).get("placement_tests") or f.get("placement_tests") or [])))
        print(f"# {dev} {model}: {counts}", file=sys.stderr)
    rnd = random.Random(SEED)
    pick = rows if len(rows) <= N else rnd.sample(rows, N)
    print("device\tmodel\trule\tsite\tmessage")
    for r in pick:
        print("\t".join(r))
    if undecided_out:
        with open(undecided_out, "w") as fh:
            fh.write("device\tmodel\trule\tsite\tdepends on\n")
            for r in undecided:
                fh.write("\t".join(r) + "\n")


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


def draw_all(findings: list, n: int, seed: int) -> list:
    """A seeded sample of n findings (all when fewer) from every placement, in scan order, each
    with its index in the scan (so a rerun of the same scan draws the same findings)."""
    idx = list(range(len(findings)))
    pick = idx if len(idx) <= n else sorted(random.Random(seed).sample(idx, n))
    return [(i, findings[i]) for i in pick]


def main_all(args) -> None:
    doc = json.load(open(args.json)) if args.json else _scan(args.version, args.device, args.model)
    fs = doc["findings"]
    counts = {}
    for f in fs:
        counts[f.get("placement")] = counts.get(f.get("placement"), 0) + 1
    print(f"# {doc.get('device')} {doc.get('model')}: {len(fs)} findings {counts}", file=sys.stderr)
    print("#\tindex\tplacement\trule\tsite\tmessage\tevidence\tdepends on")
    for k, (i, f) in enumerate(draw_all(fs, args.n, args.seed), 1):
        ev = " | ".join(f"{e.get('path')}:{e.get('line')} {_one_line(e.get('note') or e.get('snippet') or '')}"
                        for e in f.get("evidence") or [])
        p = (f.get("evidence") or [{}])[0]
        tests = f.get("data", {}).get("placement_tests") or f.get("placement_tests") or []
        print("\t".join([str(k), str(i), str(f.get("placement")), f["rule_id"], f"{p.get('path')}:{p.get('line')}",
                         _one_line(f["message"]), ev, " & ".join(tests)]))


if __name__ == "__main__":
    if "--all" in sys.argv[1:]:
        ap = argparse.ArgumentParser()
        ap.add_argument("--all", action="store_true")
        ap.add_argument("version", nargs="?", default="0.5.21")
        ap.add_argument("--device", default="h200")
        ap.add_argument("--model", default="gpt-oss-120b")
        ap.add_argument("--json", default="", help="a saved `recon scan --format json` output to draw from")
        ap.add_argument("-n", type=int, default=40)
        ap.add_argument("--seed", type=int, default=SEED)
        main_all(ap.parse_args())
    else:
        main(*sys.argv[1:3])
