"""One decode-path MoE forward for Nsight Compute (profiling starts after warm-up).

  ncu --clock-control none --profile-from-start off -k regex:decode_gemm \
      --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
      --section Occupancy python3 bench/reference_impl/ncu_decode.py --M 64
"""
import argparse
import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference_impl"))
from refimpl_data import make_problem  # noqa: E402
from reference_impl import grouped_mxfp4_moe  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--M", type=int, default=64)
ap.add_argument("--config", default=None, help="a kernel config as JSON (default: the tuned one)")
args = ap.parse_args()
p = make_problem(args.M, 256, 4096, 2048, 8, device="cuda", seed=100 + args.M)
kw = dict(routed_scaling_factor=2.5, config=json.loads(args.config) if args.config else None)
for _ in range(2):
    grouped_mxfp4_moe(**p, **kw)  # compile, warm
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
grouped_mxfp4_moe(**p, **kw)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
