"""How much of a decode-size time is the host's launch of the graph replay: each tuned config
timed both ways (bench_moe.time_graph with and without hide_launch), alternating, 3 rounds.

  python bench/reference_impl/probe_timing.py [--ms 1,4,16,64] [--models ...]
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench", "reference_impl"))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference_impl"))
from reference_impl import grouped_mxfp4_moe  # noqa: E402
from bench_moe import MODELS, time_graph  # noqa: E402
from probe_decode import tuned_problems  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="1,4,16,64")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    for mname, M, p, kw, cfg in tuned_problems(args.models.split(","), map(int, args.ms.split(","))):
        fn = lambda: grouped_mxfp4_moe(**p, config=cfg, **kw)  # noqa: E731
        time_graph(fn)
        rounds = [(time_graph(fn), time_graph(fn, hide_launch=True)) for _ in range(3)]
        shown = "  ".join(f"{a * 1e3:.1f}/{b * 1e3:.1f}" for a, b in rounds)
        print(f"{mname} M={M} us, launch inside / hidden: {shown}", flush=True)


if __name__ == "__main__":
    main()
