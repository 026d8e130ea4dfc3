"""The one-launch decode path and prepacked weights against the shipped (tuned, three-launch) configs,
side by side in one process on the GPU: graph-replay times (the candidates of a row captured once and
replayed in turn, rotated, L2 flushed before each, median), correctness against the reference, and
the host overhead (eager call minus graph replay, each from a sync to a sync) with its breakdown.

  python bench/reference_impl/bench_fused.py --out OUT [--ms 1,4,16,64] [--reps 30]
"""
import argparse
import json
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference_impl"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from refimpl_data import make_problem  # noqa: E402
from reference_impl import grouped_mxfp4_moe, prepack_mxfp4_moe, reference_mxfp4_moe  # noqa: E402
from reference_impl import arch, moe  # noqa: E402
from reference_impl.configs import get_config  # noqa: E402
from reference_impl.tune import capture_graph  # noqa: E402
from bench_moe import MODELS, copy_bw, problem, rel  # noqa: E402


def fused(c, ctas=8, maxnreg=None, order=0):
    """The one-launch form of a decode config's GEMM knobs (both GEMMs through 2-stage TMA rings)."""
    nw = c["gemm1"]["num_warps"]
    f = {"ctas_per_sm": ctas, **({"maxnreg": maxnreg} if maxnreg else {}), **({"order": order} if order else {})}
    return {"path": "mma", "gemm1": {"Q": c["gemm1"]["Q"], "num_warps": nw, "tma": 2},
            "gemm2": {"Q": c["gemm2"]["Q"], "num_warps": nw, "atom_vec": 8, "tma": 2}, "pdl": True, "fused": f}


def q(q1, q2, nw):
    return {"gemm1": {"Q": q1, "num_warps": nw}, "gemm2": {"Q": q2, "num_warps": nw}}


def variants(M, S):
    if S > moe.FUSED_MAX_SLOTS:
        return {}
    return {"fused q1 w2 c8": fused(q(1, 1, 2)), "fused q1 w2 c4": fused(q(1, 1, 2), 4),
            "fused q1 w2 c16": fused(q(1, 1, 2), 16), "fused q1 w4 c8": fused(q(1, 1, 4)),
            "fused q2 w2 c8": fused(q(2, 2, 2)), "fused q1 w2 c8 r96": fused(q(1, 1, 2), 8, 96),
            # v15: items block by block (a block's down weights stream while later blocks' gate/up runs)
            "fused q1 w2 c8 o1": fused(q(1, 1, 2), order=1), "fused q1 w4 c8 o1": fused(q(1, 1, 4), order=1),
            "fused q2 w2 c8 o1": fused(q(2, 2, 2), order=1), "fused q1 w2 c8 r96 o1": fused(q(1, 1, 2), 8, 96, 1)}


_flush = None


def time_rotated(graphs, reps):
    """{name: median ms}: the graphs replayed in turn (order rotated each rep), L2 flushed before each."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    names = list(graphs)
    ts = {n: [] for n in names}
    for r in range(reps):
        for k in range(len(names)):
            n = names[(k + r) % len(names)]
            _flush.zero_()
            a, b = torch.cuda.Event(True), torch.cuda.Event(True)
            a.record()
            graphs[n].replay()
            b.record()
            torch.cuda.synchronize()
            ts[n].append(a.elapsed_time(b))
    return {n: sorted(v)[len(v) // 2] for n, v in ts.items()}


def host_overhead(fn, n=200):
    """(eager us, graph us, eager - graph us), each timed from a sync to a sync, medians."""
    g = capture_graph(fn, warm=2)
    e, r = [], []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        e.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        r.append(time.perf_counter() - t0)
    e, r = sorted(e)[n // 2] * 1e6, sorted(r)[n // 2] * 1e6
    return e, r, e - r


def breakdown(fn, n=300):
    """Mean host us between the wrapper's stage marks (moe._mark)."""
    acc = {}
    for _ in range(n):
        torch.cuda.synchronize()
        moe._PROFILE = []
        fn()
        marks = moe._PROFILE
        moe._PROFILE = None
        for (_, t0), (name, t1) in zip(marks, marks[1:]):
            acc[name] = acc.get(name, 0.0) + (t1 - t0) * 1e6 / n
    torch.cuda.synchronize()
    return {k: round(v, 1) for k, v in acc.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ms", default="1,4,16,64")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--only", default="", help="comma-separated candidate names to time (default: all)")
    ap.add_argument("--no-host", action="store_true", help="skip the host-overhead rows (bench_host.py has them)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    dev = torch.cuda.get_device_name()
    bw = copy_bw()
    print(f"{dev}: copy {bw / 1e12:.2f} TB/s", flush=True)
    res = {"device": dev, "copy_bw_Bps": bw, "rows": [], "overhead": []}
    a = arch.for_device(torch.device("cuda", 0))
    for mname in args.models.split(","):
        c = MODELS[mname]
        E, H, I, topk = c["E"], c["H"], c["I"], c["topk"]
        kw = dict(clamp_limit=c["clamp"], routed_scaling_factor=c["rsf"])
        base = make_problem(1, E, H, I, topk, device="cuda", seed=1)
        t0 = time.perf_counter()
        pk = prepack_mxfp4_moe(base["w13_packed"], base["w2_packed"], base["w13_scale"], base["w2_scale"], H, I)
        torch.cuda.synchronize()
        print(f"{mname}: prepack {1e3 * (time.perf_counter() - t0):.1f} ms (once)", flush=True)
        for M in map(int, args.ms.split(",")):
            p, row = problem(mname, M, base, bw)
            pp = dict(p, w13_packed=pk, w2_packed=None, w13_scale=None, w2_scale=None)
            shipped = get_config(M, E, topk, H, I, dev, a, arch.device_props(0))
            cands = {"shipped raw": (p, shipped), "shipped prepacked": (pp, shipped)}
            cands.update({n: (pp, cf) for n, cf in variants(M, M * topk).items()})
            if args.only:
                keep = set(args.only.split(","))
                cands = {n: v for n, v in cands.items() if n in keep}
            ref = reference_mxfp4_moe(**p, **kw)
            graphs, errs = {}, {}
            for n, (args_, cf) in cands.items():
                try:
                    out = moe.poisoned_forward(**args_, **kw, config=cf)
                    errs[n] = rel(out, ref)
                    if not (errs[n] < 1e-2):
                        print(f"  M={M} {n}: rel err {errs[n]:.3g}: dropped", flush=True)
                        continue
                    graphs[n] = capture_graph(lambda a_=args_, c_=cf: grouped_mxfp4_moe(**a_, **kw, config=c_), warm=2)
                except Exception as ex:
                    print(f"  M={M} {n}: failed {repr(ex)[:300]}", flush=True)
            t = time_rotated(graphs, args.reps)
            base_ms = t.get("shipped raw")
            for n in graphs:
                r = dict(row, cand=n, config=cands[n][1], ms=t[n], err=errs[n],
                         frac_roofline=row["roofline_ms"] / t[n], x_shipped=base_ms / t[n] if base_ms else None)
                res["rows"].append(r)
                print(f"  {mname} M={M} {n:22s} {t[n] * 1e3:8.1f} us  {100 * r['frac_roofline']:5.1f}% roof  "
                      f"x{r['x_shipped']:.3f}  err {errs[n]:.2e}", flush=True)
            del graphs
            with open(os.path.join(args.out, "fused.json"), "w") as f:
                json.dump(res, f, indent=1)
        if args.no_host:
            base = pk = None
            torch.cuda.empty_cache()
            continue
        # host overhead at M=1: the shipped config on raw tensors (today), on prepacked weights, and
        # the best one-launch config of M=1 on prepacked weights
        p, row = problem(mname, 1, base, bw)
        pp = dict(p, w13_packed=pk, w2_packed=None, w13_scale=None, w2_scale=None)
        m1 = [r for r in res["rows"] if r["model"] == mname and r["M"] == 1 and r["cand"].startswith("fused")]
        best = min(m1, key=lambda r: r["ms"])["config"] if m1 else None
        for n, (args_, cf) in {"shipped raw": (p, None), "shipped prepacked": (pp, None),
                               "fused prepacked": (pp, best)}.items():
            if n.startswith("fused") and best is None:
                continue
            fn = lambda a_=args_, c_=cf: grouped_mxfp4_moe(**a_, **kw, config=c_)  # noqa: E731
            for _ in range(5):
                fn()
            e, g, d = host_overhead(fn)
            bd = breakdown(fn)
            o = dict(model=mname, M=1, cand=n, eager_us=e, graph_us=g, overhead_us=d, breakdown=bd)
            res["overhead"].append(o)
            print(f"  {mname} M=1 host {n:18s} eager {e:6.1f} us graph {g:6.1f} us -> {d:6.1f} us  {bd}", flush=True)
        with open(os.path.join(args.out, "fused.json"), "w") as f:
            json.dump(res, f, indent=1)
        base = pk = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
