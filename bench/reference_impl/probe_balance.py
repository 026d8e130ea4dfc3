"""Device probe: how much of the prefill path's time is owed to experts whose tokens do not
fill whole blocks. Each routing is timed with the tuned config (and a few candidates):

  random     the benchmark's routing (distinct random experts per token)
  even-N     every expert gets exactly N slots (slot m*topk + j -> expert (m*topk + j) % E),
             so N = 128 fills one BLOCK_M=128 block and N = 136 needs a second one with 8 rows

If a block's cost is its weight dequant (paid once per block whatever its token count),
even-136 costs ~2x even-128 per step; if it is the MMAs, ~1.06x.

  python bench/reference_impl/probe_balance.py [--models ...] [--counts 120,128,136,160]
"""
import argparse
import json
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
from probe_decode import WGMMA_CANDS, kernel_times  # noqa: E402


def even_ids(M, E, topk, dev):
    s = torch.arange(M * topk, device=dev, dtype=torch.int32).view(M, topk)
    return s % E


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--counts", default="120,128,136,160")
    ap.add_argument("--cands", default="", help="indices into probe_decode.WGMMA_CANDS")
    args = ap.parse_args()
    dev = torch.cuda.get_device_name()
    for mname in args.models.split(","):
        c = MODELS[mname]
        E, H, I, topk = c["E"], c["H"], c["I"], c["topk"]
        kw = dict(clamp_limit=c["clamp"], routed_scaling_factor=c["rsf"])
        base = make_problem(1, E, H, I, topk, device="cuda", seed=1)
        runs = [("random", 4096, None)] + [(f"even-{n}", n * E // topk, n) for n in map(int, args.counts.split(","))]
        for name, M, n in runs:
            q = make_problem(M, E, H, I, topk, device="cuda", seed=7)
            ids = q["topk_ids"] if n is None else even_ids(M, E, topk, "cuda")
            p = dict(base, hidden_states=q["hidden_states"], topk_ids=ids, topk_weights=q["topk_weights"])
            counts = torch.bincount(ids.flatten().long(), minlength=E)
            tflop = 6 * M * topk * H * I / 1e12
            cfgs = [("tuned", get_config(4096, E, topk, H, I, dev))]
            cfgs += [(f"cand{i}", WGMMA_CANDS[int(i)]) for i in args.cands.split(",") if i]
            for label, cf in cfgs:
                t = time_graph(lambda: grouped_mxfp4_moe(**p, config=cf, **kw))
                print(f"{mname} {name} M={M} counts {int(counts.min())}..{int(counts.max())} {label} "
                      f"{t:.4f} ms {tflop / t * 1e3:.0f} TFLOP/s {t / M * 1e3:.3f} us/token", flush=True)
            print("   kernels (us):", json.dumps(kernel_times(lambda: grouped_mxfp4_moe(**p, config=cfgs[0][1], **kw))),
                  flush=True)


if __name__ == "__main__":
    main()
