"""How many ops of a kernel map recon decides: per scenario, the op leaves of every layer kind,
decided (reached whatever recon could not decide) vs undecided (reached only under a test it could
not decide, in either sense), the (op, undecided test) pairs left open, the tests the step's premise
decided (``premise_decided``: a size test on the step's tensors), and the undecided tests most ops
depend on. Run it on two revisions of recon to compare (``PYTHONPATH`` picks the one measured).

    PYTHONPATH=. python bench/decided_ops.py [--json out.json]

Scenarios: 0.5.23 DeepSeek-V4-Flash on H200, 0.5.20 gpt-oss-120b on H200 (released wheels, read
from the cache; the first run of a cold release takes minutes)."""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time

SCENARIOS = (("0.5.23", "h200", "deepseek-v4-flash"), ("0.5.20", "h200", "gpt-oss-120b"))


def count(m: dict) -> dict:
    per, tests = {}, collections.Counter()
    for lay in m.get("layers", []):
        leaves = lay.get("leaves", [])
        dec = sum(1 for lf in leaves if lf.get("decided", not lf.get("when")))
        # (op, undecided test) pairs: a test decided off an op that keeps another shows here
        pairs = sum(len(lf.get("tests") or lf.get("when") or []) for lf in leaves if not lf.get("decided", not lf.get("when")))
        per[lay["kind"]] = {"decided": dec, "undecided": len(leaves) - dec, "open_pairs": pairs,
                            "premise_decided": len(lay.get("premise_decided", []))}
        for lf in leaves:
            if not lf.get("decided", not lf.get("when")):
                for t in lf.get("tests") or []:
                    tests[t["test"][:90]] += 1
    tot = {k: sum(v[k] for v in per.values()) for k in ("decided", "undecided", "open_pairs", "premise_decided")}
    return {"layers": per, "total": tot, "top_tests": tests.most_common(12)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    from recon.checks import CheckContext
    from recon.kernels.kmap import build_map
    from recon.profiles import load_device, load_model
    from recon.target import from_version
    from recon.tree import load

    out = {}
    for ver, dev, model in SCENARIOS:
        t0 = time.time()
        tree = load(from_version(ver))
        m = build_map(CheckContext(tree, load_device(dev), load_model(model)))
        c = count(m)
        c["wall_s"] = round(time.time() - t0, 1)
        out[f"{ver} {dev} {model}"] = c
        print(f"\n== {ver} {dev} {model}  ({c['wall_s']} s)")
        print(f"{'layer':<18}{'decided':>9}{'undecided':>11}{'open (op, test)':>17}{'premise decided':>17}")
        for k, v in list(c["layers"].items()) + [("total", c["total"])]:
            print(f"{k:<18}{v['decided']:>9}{v['undecided']:>11}{v['open_pairs']:>17}{v['premise_decided']:>17}")
        print("tests most undecided ops depend on:")
        for t, n in c["top_tests"]:
            print(f"  {n:>4}  {t}")
        sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
