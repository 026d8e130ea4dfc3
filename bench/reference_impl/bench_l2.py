"""v16: the down weights prefetched into L2 by the gate/up GEMM (gemm1 "l2" / "l2_at" in a decode
config), side by side with today's configs in one process on the GPU: graph-replay times (the
candidates of a row captured once and replayed in turn, rotated, L2 flushed before each, median),
correctness against the reference (poisoned scratch), on prepacked weights.

The flush before each replay writes 256 MB (normal priority) and then reads 128 MB with evict_last
loads, so lines an earlier replay prefetched as evict_last do not survive into the next one.

  --variant full      the shipped kernels
  --variant skeleton  no dequant and no MMA (probe_skeleton.py's group asm): what streaming both
                      GEMMs' weights costs with and without the prefetch (results wrong on purpose)

  python bench/reference_impl/bench_l2.py --out OUT [--variant full] [--ms 1,2,4,8] [--reps 30]
"""
import argparse
import copy
import json
import os
import sys

import torch
import triton
import triton.language as tl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference_impl"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@triton.jit
def _read_last(p, n, out, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(p + o, mask=o < n, other=0, eviction_policy="evict_last")
    tl.store(out + tl.program_id(0), tl.sum(v, 0))


def with_l2(c, pol, at=0, g1=None, g2=None):
    """Decode config c with the down weights prefetched (policy pol at gate/up step at), the GEMMs'
    knobs replaced by g1 / g2 where given."""
    c = copy.deepcopy(c)
    if g1 is not None:
        c["gemm1"] = dict(g1)
    if g2 is not None:
        c["gemm2"] = dict(g2)
    if pol:
        c["gemm1"]["l2"] = pol
        if at:
            c["gemm1"]["l2_at"] = at
    return c


def candidates(shipped, H, I):
    """{name: config} for one row: today's config first."""
    out = {"shipped": shipped}
    if shipped.get("path") != "mma":
        return out
    g1 = shipped["gemm1"]
    out["l2 last"] = with_l2(shipped, 2)
    out["l2 plain"] = with_l2(shipped, 1)
    out["l2 lines last"] = with_l2(shipped, 3)
    out["l2 lines normal"] = with_l2(shipped, 4)
    if g1.get("tma"):
        nk = -(-(-(-H // 128)) // g1["num_warps"])
        out["l2 last at 1/2"] = with_l2(shipped, 2, max(1, nk // 2))
        out["l2 lines last at 1/2"] = with_l2(shipped, 3, max(1, nk // 2))
        out["l2 lines last at end"] = with_l2(shipped, 3, max(1, nk - 2))
        for st in (3, 4):
            t1 = dict(g1, tma=st)
            out[f"g1 tma{st}"] = with_l2(shipped, 0, g1=t1)
            out[f"g1 tma{st} l2 lines last"] = with_l2(shipped, 3, g1=t1)
    for nw in (2, 4):  # the TMA gate/up form where today's is the direct-load one (gpt-oss)
        t1 = {"Q": g1["Q"], "num_warps": nw, "tma": 2}
        if not g1.get("tma") or g1["num_warps"] != nw:
            out[f"tma w{nw}"] = with_l2(shipped, 0, g1=t1)
            out[f"tma w{nw} l2 lines last"] = with_l2(shipped, 3, g1=t1)
    g2 = shipped["gemm2"]  # with the down weights in L2, other down-GEMM shapes may win
    for name, k in (("g2 w4 tma2", {"Q": 1, "num_warps": 4, "atom_vec": 8, "tma": 2}),
                    ("g2 w2 tma4", {"Q": 1, "num_warps": 2, "atom_vec": 8, "tma": 4})):
        if any(g2.get(x) != v for x, v in k.items()):
            out[f"l2 lines last {name}"] = with_l2(shipped, 3, g2=k)
    return out


def kernel_rows(cands, names):
    """{name: config without pdl} for the per-kernel profile (the GEMMs one after the other, so each
    kernel's time is its own, not a wait on the launch before)."""
    out = {}
    for n in names:
        if n in cands:
            out[n + " nopdl"] = dict(copy.deepcopy(cands[n]), pdl=False)
    return out


_flush = None


def time_rotated(graphs, reps):
    """{name: median ms}: the graphs replayed in turn (order rotated each rep), L2 flushed before each."""
    global _flush
    if _flush is None:
        _flush = (torch.empty(256 << 20, dtype=torch.uint8, device="cuda"),
                  torch.ones(32 << 20, dtype=torch.int32, device="cuda"), torch.empty(1 << 16, device="cuda"))
    big, last, sink = _flush
    names = list(graphs)
    ts = {n: [] for n in names}
    for r in range(reps):
        for k in range(len(names)):
            n = names[(k + r) % len(names)]
            big.zero_()
            _read_last[(last.numel() // 4096,)](last, last.numel(), sink, BLOCK=4096)
            a, b = torch.cuda.Event(True), torch.cuda.Event(True)
            a.record()
            graphs[n].replay()
            b.record()
            torch.cuda.synchronize()
            ts[n].append(a.elapsed_time(b))
    return {n: sorted(v)[len(v) // 2] for n, v in ts.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", default="full", choices=("full", "skeleton"))
    ap.add_argument("--ms", default="1,2,4,8")
    ap.add_argument("--models", default="DeepSeek-V4-Flash,gpt-oss-120b")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--only", default="", help="comma-separated candidate names (default: all)")
    ap.add_argument("--kernels", default="", help="candidates whose kernels are profiled one by one (pdl off)")
    args = ap.parse_args()
    if args.variant == "skeleton":  # before any kernel compiles
        from triton.experimental.gluon import language as gl
        from reference_impl.kernels import gluon_common
        from probe_skeleton import _asm
        gluon_common.GROUP_ASM = gl.constexpr(_asm("skeleton"))  # mma_tile reads its module's global
    from refimpl_data import make_problem
    from reference_impl import arch, grouped_mxfp4_moe, moe, prepack_mxfp4_moe, reference_mxfp4_moe
    from reference_impl.configs import get_config
    from reference_impl.tune import capture_graph
    from bench_moe import MODELS, copy_bw, problem, rel

    os.makedirs(args.out, exist_ok=True)
    dev = torch.cuda.get_device_name()
    bw = copy_bw()
    print(f"{dev}: copy {bw / 1e12:.2f} TB/s, variant {args.variant}", flush=True)
    res = {"device": dev, "copy_bw_Bps": bw, "variant": args.variant, "rows": []}
    a = arch.for_device(torch.device("cuda", 0))
    fname = os.path.join(args.out, f"l2_{args.variant}.json")
    for mname in args.models.split(","):
        c = MODELS[mname]
        E, H, I, topk = c["E"], c["H"], c["I"], c["topk"]
        kw = dict(clamp_limit=c["clamp"], routed_scaling_factor=c["rsf"])
        base = make_problem(1, E, H, I, topk, device="cuda", seed=1)
        pk = prepack_mxfp4_moe(base["w13_packed"], base["w2_packed"], base["w13_scale"], base["w2_scale"], H, I)
        for M in map(int, args.ms.split(",")):
            p, row = problem(mname, M, base, bw)
            pp = dict(p, w13_packed=pk, w2_packed=None, w13_scale=None, w2_scale=None)
            shipped = get_config(M, E, topk, H, I, dev, a, arch.device_props(0))
            cands = candidates(shipped, H, I)
            if args.only:
                keep = set(args.only.split(","))
                cands = {n: v for n, v in cands.items() if n in keep}
            ref = reference_mxfp4_moe(**p, **kw) if args.variant == "full" else None
            graphs, errs = {}, {}
            for n, cf in cands.items():
                try:
                    out = moe.poisoned_forward(**pp, **kw, config=cf)
                    if ref is not None:
                        errs[n] = rel(out, ref)
                        if not (errs[n] < 1e-2):
                            print(f"  M={M} {n}: rel err {errs[n]:.3g}: dropped", flush=True)
                            continue
                    graphs[n] = capture_graph(lambda c_=cf: grouped_mxfp4_moe(**pp, **kw, config=c_), warm=2)
                except Exception as ex:
                    print(f"  M={M} {n}: failed {repr(ex)[:300]}", flush=True)
            if args.kernels:
                from probe_decode import kernel_times
                for n, cf in kernel_rows(cands, args.kernels.split(",")).items():
                    kt = kernel_times(lambda c_=cf: grouped_mxfp4_moe(**pp, **kw, config=c_))
                    res.setdefault("kernels", []).append(dict(model=mname, M=M, cand=n, us=kt))
                    print(f"  {mname} M={M} {n:26s} kernels (us): {kt}", flush=True)
            t = time_rotated(graphs, args.reps)
            t0 = t.get("shipped")
            for n in graphs:
                r = dict(row, cand=n, config=cands[n], ms=t[n], err=errs.get(n),
                         frac_roofline=row["roofline_ms"] / t[n], x_shipped=t0 / t[n] if t0 else None)
                res["rows"].append(r)
                e = f"err {errs[n]:.2e}" if n in errs else ""
                print(f"  {mname} M={M} {n:26s} {t[n] * 1e3:8.1f} us  {100 * r['frac_roofline']:5.1f}% roof  "
                      f"x{r['x_shipped']:.3f}  {e}", flush=True)
            del graphs
            with open(fname, "w") as f:
                json.dump(res, f, indent=1)
        base = pk = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
