"""Draw the graded sample: the on-step findings of `recon scan --format json` for each scenario on
a release outside the tests, a seeded random sample of at most N (all when there are fewer).

    RECON_CACHE_DIR=/work/cache python bench/findings_precision/sample.py 0.5.16 > bench/findings_precision/sample.tsv

The placement counts of each scenario go to stderr; every undecided finding's tests (the test and
its file:line) to the file named by a second argument, when given, for the undecided-side check.
"""

import json
import random
import subprocess
import sys

SEED, N = 16, 30
SCENARIOS = [("h200", "gpt-oss-120b"), ("rtx-pro-6000", "gpt-oss-120b"), ("h200", "qwen3-30b-a3b"), ("b200", "deepseek-v3")]


def main(version: str, undecided_out: str = "") -> None:
    rows, undecided = [], []
    for dev, model in SCENARIOS:
        out = subprocess.run([sys.executable, "-m", "recon", "scan", "--sglang", version, "--device", dev, "--model", model,
                              "--format", "json"], capture_output=True, text=True, check=True).stdout
        doc = json.loads(out)
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


if __name__ == "__main__":
    main(*sys.argv[1:3])
