"""Where the host time of one decode-path launch goes (H200 machine, Triton 3.6): the compiled
kernel's own launcher (k.run, which encodes each TMA descriptor on every launch) against the launch
with the prepacked weights' descriptors encoded once (moe._launch_encoded), and the wrapper's call."""
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference_impl"))
from refimpl_data import make_problem  # noqa: E402
from reference_impl import grouped_mxfp4_moe, prepack_mxfp4_moe, moe  # noqa: E402


def us(fn, n=2000):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return dt


for name, (E, H, I, topk) in {"dsv4": (256, 4096, 2048, 8), "gptoss": (128, 2880, 2880, 4)}.items():
    p = make_problem(1, E, H, I, topk, device="cuda", seed=1)
    pk = prepack_mxfp4_moe(p["w13_packed"], p["w2_packed"], p["w13_scale"], p["w2_scale"], H, I)
    pp = dict(p, w13_packed=pk, w2_packed=None, w13_scale=None, w2_scale=None)
    cfg = {"path": "mma", "gemm1": {"Q": 1, "num_warps": 2, "tma": 2},
           "gemm2": {"Q": 1, "num_warps": 2, "atom_vec": 8, "tma": 2}, "pdl": True, "fused": {"ctas_per_sm": 8}}
    for _ in range(3):
        grouped_mxfp4_moe(**pp, config=cfg)
    pl = [v for k, v in moe._PLANS.items() if k[0] == 1 and k[1] == E and v.fused][0]
    (key, (k, extra, dl)), = [(kk, v) for kk, v in pl.launched.items() if kk[0] == "fused"]
    print(name, "desc_launch", "none" if dl is None else "ok", "scratch", k.run.global_scratch_size,
          k.run.profile_scratch_size, "n_regs", k.n_regs, "spills", k.n_spills, flush=True)
    print(name, "wrapper call (fused, prepacked) us", round(us(lambda: grouped_mxfp4_moe(**pp, config=cfg), 500), 1))
    moe._ENCODE_ONCE = False
    moe._PLANS.clear()
    for _ in range(3):
        grouped_mxfp4_moe(**pp, config=cfg)
    print(name, "wrapper call, descriptors encoded per launch, us",
          round(us(lambda: grouped_mxfp4_moe(**pp, config=cfg), 500), 1))
    moe._ENCODE_ONCE = True
    moe._PLANS.clear()
    for ptr in (False, True):
        moe._PTR_INTS = ptr
        for c, label in ((cfg, "fused"), (None, "shipped")):
            for _ in range(3):
                grouped_mxfp4_moe(**pp, config=c)
            print(name, f"wrapper call ({label}, prepacked, addresses as ints={ptr}) us",
                  round(us(lambda: grouped_mxfp4_moe(**pp, config=c), 500), 1), flush=True)
    print(name, "torch.empty(M, H) us", round(us(lambda: torch.empty(1, H, dtype=torch.bfloat16, device="cuda")), 1))
    print(name, "empty python fn us", round(us(lambda: None), 2))
