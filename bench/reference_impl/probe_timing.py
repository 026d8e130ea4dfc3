"""How much of a decode-size time is the host's launch of the graph replay: each tuned config
timed both ways (bench_moe.time_graph with and without hide_launch), alternating, 3 rounds.

  python bench/reference_impl/probe_timing.py [--ms 1,4,16,64] [--models ...]
"""
import argparse
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench", "reference_impl"))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference_impl"))
from refimpl_data import make_problem  # noqa: E402
from reference_impl import grouped_mxfp4_moe  # noqa: E402
from reference_impl.configs import get_config  # noqa: E402
from bench_moe import MODELS, time_graph  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="1,4,16,64")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    dev = torch.cuda.get_device_name()
    for mname in args.models.split(","):
        c = MODELS[mname]
        E, H, I, topk = c["E"], c["H"], c["I"], c["topk"]
        kw = dict(clamp_limit=c["clamp"], routed_scaling_factor=c["rsf"])
        base = make_problem(1, E, H, I, topk, device="cuda", seed=1)
        for M in map(int, args.ms.split(",")):
            q = make_problem(M, E, H, I, topk, device="cuda", seed=100 + M, invalid_frac=0.05)
            p = dict(base, hidden_states=q["hidden_states"], topk_ids=q["topk_ids"], topk_weights=q["topk_weights"])
            cfg = get_config(M, E, topk, H, I, dev)
            fn = lambda: grouped_mxfp4_moe(**p, config=cfg, **kw)  # noqa: E731
            time_graph(fn)
            rounds = [(time_graph(fn), time_graph(fn, hide_launch=True)) for _ in range(3)]
            shown = "  ".join(f"{a * 1e3:.1f}/{b * 1e3:.1f}" for a, b in rounds)
            print(f"{mname} M={M} us, launch inside / hidden: {shown}", flush=True)


if __name__ == "__main__":
    main()
