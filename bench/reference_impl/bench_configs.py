"""Side by side in one process on the GPU: the shipped tuned configs, the heuristic defaults (no
file) and, where given, a tuner's output folder, at every benchmark M of both model shapes; and
the host overhead of an eager call (eager time minus graph-replay time) with its breakdown by
stage of the wrapper. Each config is checked against reference_mxfp4_moe before it is timed.

  python bench/reference_impl/bench_configs.py --out OUT [--tuned-dir DIR] [--before MODULE]

--before: a module path (e.g. reference_impl.moe_before) of the wrapper before a change, whose
eager overhead and outputs are measured beside the current one's (deterministic outputs must be
bitwise equal).
"""
import argparse
import dataclasses
import importlib
import json
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from reference_impl import arch, configs, moe, reference_mxfp4_moe  # noqa: E402
from reference_impl.moe import grouped_mxfp4_moe  # noqa: E402
from reference_impl.tune import MODELS, MS, make_problem, rel, time_graphs  # noqa: E402


def eager_and_graph_us(fn, reps=200):
    """Median wall time (us) of one call run to completion on the GPU, eagerly and as a graph
    replay, each rep after a sync: the difference is the host's work the graph skips."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    out = {}
    for name, call in (("eager", fn), ("graph", g.replay)):
        ts = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            call()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        ts.sort()
        out[name] = ts[len(ts) // 2] * 1e6
    # the host alone: back-to-back calls with no sync, GPU kept busy in front so the host never waits
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    out["host_only"] = (time.perf_counter() - t0) / reps * 1e6
    torch.cuda.synchronize()
    return out


def copy_bw():
    """Device-to-device copy bandwidth, bytes read + written per second (median of 10)."""
    a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ts = []
    for i in range(13):
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        e0.record()
        b.copy_(a)
        e1.record()
        torch.cuda.synchronize()
        if i >= 3:
            ts.append(e0.elapsed_time(e1))
    ts.sort()
    return 2 * a.numel() / (ts[len(ts) // 2] * 1e-3)


def breakdown_us(fn, reps=300):
    """Mean host time (us) of each stage the wrapper marks (moe._mark), over reps calls."""
    fn()
    torch.cuda.synchronize()
    acc = {}
    for _ in range(reps):
        moe._PROFILE = []
        fn()
        marks = moe._PROFILE
        moe._PROFILE = None
        for (_, t0), (name, t1) in zip(marks, marks[1:]):
            acc[name] = acc.get(name, 0.0) + (t1 - t0)
        torch.cuda.synchronize()
    return {k: v / reps * 1e6 for k, v in acc.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tuned-dir", default=None)
    ap.add_argument("--before", default=None)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--with-dot", action="store_true", help="also the tl.dot kernels' defaults (the path of GPUs "
                    "without the Gluon paths), for their H200 efficiency")
    ap.add_argument("--no-overhead", action="store_true")
    ap.add_argument("--profile", action="store_true", help="cProfile 200 eager calls at M=1 (top 30 by own time)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    dev = torch.device("cuda", 0)
    name = torch.cuda.get_device_name(dev)
    a = arch.for_device(dev)
    props = arch.device_props(0)
    before = importlib.import_module(args.before).grouped_mxfp4_moe if args.before else None
    res = {"device": name, "arch": a.name, "sm_count": props.sm_count, "smem_per_block": props.smem_per_block,
           "torch": torch.__version__, "timing": "CUDA graph replay, L2 flushed before each, the configs of a row replayed in turn (order rotated), median of --reps",
           "rows": [], "overhead": []}
    res["copy_bw_Bps"] = copy_bw()
    path = os.path.join(args.out, "bench_configs.json")
    for mname in args.models.split(","):
        s = MODELS[mname]
        kw = dict(clamp_limit=s["clamp"], routed_scaling_factor=s["rsf"])
        weights = None
        tuned_file = configs.find_config_file(s["E"], s["I"], name)
        shipped = configs.load_table(os.path.join(configs.CONFIG_DIR, configs.config_file_name(s["E"], s["I"], name)),
                                     a)
        mine = None
        if args.tuned_dir:
            f = os.path.join(args.tuned_dir, configs.config_file_name(s["E"], s["I"], name))
            mine = configs.load_table(f, a) if os.path.exists(f) else None
        for M in map(int, args.ms.split(",")):
            p = make_problem(M, s, seed=100 + M, weights=weights)
            weights = {k: p[k] for k in ("w13_packed", "w2_packed", "w13_scale", "w2_scale")}
            ref = reference_mxfp4_moe(**p, **kw)
            near = lambda t: t[min(t, key=lambda k: (abs(k - M), k))]  # noqa: E731
            cands = {"tuned": near(shipped), "default": configs.default_config(M, s["E"], s["topk"], s["H"], s["I"],
                                                                               a, props)}
            if mine:
                cands["tuner"] = near(mine)
            if args.with_dot:
                cands["dot"] = configs.default_config(M, s["E"], s["topk"], s["H"], s["I"],
                                                      dataclasses.replace(a, mma=False, wgmma=False), props)
            cands["control"] = cands["tuned"]  # the tuned config timed twice: the noise floor of a ratio
            uniq = int(torch.unique(p["topk_ids"]).numel())
            exp_bytes = 2 * s["I"] * s["H"] // 2 + 2 * s["I"] * s["H"] // 32 + s["H"] * s["I"] // 2 + s["H"] * s["I"] // 32
            row = {"model": mname, "M": M, "configs": cands, "uniq": uniq, "bytes": uniq * exp_bytes,
                   "flops": 2 * M * s["topk"] * 3 * s["I"] * s["H"]}
            for k, c in cands.items():
                out = grouped_mxfp4_moe(**p, config=c, **kw)
                row[f"err_{k}"] = rel(out, ref)
                assert row[f"err_{k}"] <= 1e-2 and bool(torch.isfinite(out).all()), (mname, M, k, row[f"err_{k}"])
            ms = time_graphs({k: (lambda c=c: grouped_mxfp4_moe(**p, config=c, **kw)) for k, c in cands.items()},
                             reps=args.reps)
            row.update({f"ms_{k}": v for k, v in ms.items()})
            for k in cands:
                row[f"frac_{k}"] = row["ms_tuned"] / row[f"ms_{k}"]
            if before is not None and M in (1, 64, 4096):  # identical results: deterministic bitwise
                c = cands["tuned"]
                row["det_bitwise_equal_before"] = bool(torch.equal(
                    grouped_mxfp4_moe(**p, config=c, deterministic=True, **kw),
                    before(**p, config=c, deterministic=True, **kw)))
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                              if k != "configs"}), flush=True)
            res["rows"].append(row)
            if M in (1, 16) and not args.no_overhead:  # host overhead with no config passed: the production call
                o = {"model": mname, "M": M, "config_file": tuned_file}
                o["now"] = eager_and_graph_us(lambda: grouped_mxfp4_moe(**p, **kw))
                o["breakdown_now"] = breakdown_us(lambda: grouped_mxfp4_moe(**p, **kw))
                if before is not None:
                    o["before"] = eager_and_graph_us(lambda: before(**p, **kw))
                    o["bitwise_equal_before_det"] = bool(torch.equal(
                        grouped_mxfp4_moe(**p, deterministic=True, **kw), before(**p, deterministic=True, **kw)))
                key = next(k for k in moe._PLANS if k[0] == M and k[1] == s["E"] and not k[6])
                o["fast_launched_kernels"] = len(moe._PLANS[key].launched)
                print(json.dumps(o), flush=True)
                if args.profile and M == 1:
                    import cProfile
                    import pstats
                    pr = cProfile.Profile()
                    pr.enable()
                    for _ in range(200):
                        grouped_mxfp4_moe(**p, **kw)
                    pr.disable()
                    torch.cuda.synchronize()
                    pstats.Stats(pr).sort_stats("tottime").print_stats(30)
                res["overhead"].append(o)
            with open(path, "w") as f:
                json.dump(res, f, indent=1)
        weights = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
