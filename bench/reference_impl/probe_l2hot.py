"""v16: what the down GEMM gains with its weights already in L2, the most an L2 prefetch could give.

Each call's down-GEMM launch is made twice in a row (moe._launch patched; the second launch adds
into the output again, so the results are wrong on purpose): the second finds the down weights the
first read still in L2 (36 MB at DeepSeek-V4-Flash M=1, 17 MB at gpt-oss-120b M=1, under the H200's
50 MB), so (both) - (one) is the down GEMM's time from L2. Per-kernel device times by torch.profiler
over eager calls, the GEMMs launched one after the other (pdl off), today's configs and the
L2-prefetching ones (gemm1.l2); the calls' own launches (no eager graph).

  python bench/reference_impl/probe_l2hot.py [--ms 1,4]
"""
import argparse
import copy
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference_impl"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reference_impl import arch, grouped_mxfp4_moe, moe, prepack_mxfp4_moe  # noqa: E402
from reference_impl.configs import get_config  # noqa: E402
from refimpl_data import make_problem  # noqa: E402
from bench_moe import MODELS, copy_bw, problem  # noqa: E402
from probe_decode import kernel_times  # noqa: E402

_real_launch = moe._launch
moe._EAGER_GRAPH = False  # every call through _body's launches (an eager graph would hold one mode's)


def _twice(pl, slot, kernel, grid, args, kw, pk=None):
    out = _real_launch(pl, slot, kernel, grid, args, kw, pk)
    if slot == "gemm2":
        _real_launch(pl, slot, kernel, grid, args, kw, pk)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="1,4")
    args = ap.parse_args()
    dev = torch.cuda.get_device_name()
    bw = copy_bw()
    print(f"{dev}: copy {bw / 1e12:.2f} TB/s", flush=True)
    a = arch.for_device(torch.device("cuda", 0))
    for mname, c in MODELS.items():
        E, H, I, topk = c["E"], c["H"], c["I"], c["topk"]
        kw = dict(clamp_limit=c["clamp"], routed_scaling_factor=c["rsf"])
        base = make_problem(1, E, H, I, topk, device="cuda", seed=1)
        pk = prepack_mxfp4_moe(base["w13_packed"], base["w2_packed"], base["w13_scale"], base["w2_scale"], H, I)
        for M in map(int, args.ms.split(",")):
            p, row = problem(mname, M, base, bw)
            pp = dict(p, w13_packed=pk, w2_packed=None, w13_scale=None, w2_scale=None)
            shipped = dict(get_config(M, E, topk, H, I, dev, a, arch.device_props(0)), pdl=False)
            for name, cf in (("shipped", shipped), ("l2 bulk last", _l2(shipped, 2)),
                             ("l2 lines normal", _l2(shipped, 4))):
                res = {}
                for mode in ("once", "twice"):
                    moe._launch = _twice if mode == "twice" else _real_launch
                    try:
                        kt = kernel_times(lambda c_=cf: grouped_mxfp4_moe(**pp, **kw, config=c_))
                    finally:
                        moe._launch = _real_launch
                    g2 = [v for k, v in kt.items() if "gemm2" in k]
                    g1 = [v for k, v in kt.items() if "gemm1" in k]
                    res[mode] = (g1[0] if g1 else None, g2[0] if g2 else None)
                (g1, once), (_, both) = res["once"], res["twice"]
                print(f"  {mname} M={M} {name:16s} gate/up {g1} us, down cold {once} us, down from L2 "
                      f"{both - once:.2f} us (both {both})", flush=True)
        base = pk = None
        torch.cuda.empty_cache()


def _l2(c, pol):
    c = copy.deepcopy(c)
    c["gemm1"]["l2"] = pol
    return c


if __name__ == "__main__":
    main()
