"""Benchmark of reference_impl.grouped_mxfp4_moe on the GPU, with its peers
measured in the same run:
  * SGLang 0.5.13.post1's slot path (mxfp4_moe_forward_triton), imported by path
    from a module file extracted from the wheel at run time (never stored here);
  * bf16 peer: weights dequantized to bf16 ahead of time + torch._grouped_mm;
  * ceilings: device-to-device copy bandwidth and a dense 8192^3 bf16 matmul.
Every forward is captured in a CUDA graph and timed by replay, L2 flushed before
each timed replay, median of the reps. Writes results.json to --out (copy it to recon/data/anchors/h200_grouped_reference_impl.json, then run report.py).

  python bench/reference_impl/bench_moe.py --out OUT [--slot-module PATH] [--tune]
"""
import argparse
import importlib.util
import json
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference_impl"))

from refimpl_data import make_problem  # noqa: E402
from reference_impl import grouped_mxfp4_moe, reference_mxfp4_moe  # noqa: E402
from reference_impl.reference import dequant_mxfp4  # noqa: E402
from reference_impl import arch  # noqa: E402
from reference_impl.configs import config_file_name, get_config  # noqa: E402
from reference_impl.moe import scale_vec_ok  # noqa: E402
from reference_impl.tune import capture_graph  # noqa: E402

MODELS = {
    "DeepSeek-V4-Flash": dict(E=256, H=4096, I=2048, topk=8, clamp=None, rsf=2.5),
    "gpt-oss-120b": dict(E=128, H=2880, I=2880, topk=4, clamp=7.0, rsf=None),
}
MS = [1, 4, 16, 64, 256, 1024, 4096]


def cfg(bm, g1, g2, vec=None):
    k = ("BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
    c = {"BLOCK_M": bm, "gemm1": dict(zip(k, g1)), "gemm2": dict(zip(k, g2))}
    if vec is not None:  # scale exponents as cp.async'd words (True) or bytes fetched a step ahead
        c["gemm1"]["scale_vec"] = c["gemm2"]["scale_vec"] = vec
    return c


def mma(g1, g2):
    """A decode-path (Gluon, mma.sync) config: (Q tiles of 16 rows, warps[, weight cache
    modifier[, atomics width[, register cap]]]) per GEMM; the GEMMs launched as programmatic
    dependents."""
    k = ("Q", "num_warps", "w_cache", "atom_vec", "maxnreg")
    return {"path": "mma", "gemm1": dict(zip(k, g1)), "gemm2": dict(zip(k, g2)), "pdl": True}


def tma(c, s1, s2):
    """Decode config c with each GEMM's weights through a TMA ring of s1 / s2 shared-memory stages
    (kernels/decode_tma.py; 0: direct loads)."""
    return {**c, "gemm1": {**c["gemm1"], **({"tma": s1} if s1 else {})},
            "gemm2": {**c["gemm2"], **({"tma": s2} if s2 else {})}}


def wgmma(bn, stages, nw=4, av=8):
    """A prefill-path (Gluon, wgmma, sm_90) config: BN tokens per block, TMA stages, warps,
    the down GEMM's atomics width."""
    g = {"STAGES": stages, "num_warps": nw}
    return {"path": "wgmma", "BLOCK_M": bn, "gemm1": dict(g), "gemm2": {**g, "atom_vec": av}}


def ws(bn, stages, cw, lag=1, down=None, parts=None):
    """The prefill path with the warp-specialized gate/up GEMM (cw warpgroup partitions);
    down=(stages, cw, lag): the down GEMM warp-specialized too; parts=(T0, T1): the block's
    first two token parts (default BN/4 each)."""
    g2 = {"STAGES": 3, "num_warps": 4, "atom_vec": 8}
    if down:
        g2 = {"STAGES": down[0], "ws": down[1], "LAG": down[2], "atom_vec": 8}
    c = {"path": "wgmma", "BLOCK_M": bn, "gemm1": {"STAGES": stages, "ws": cw, "LAG": lag}, "gemm2": g2}
    return {**c, "parts": list(parts)} if parts else c


# the tl.dot configs that won the earlier tunings (bench/NOTES.md), beside the decode path's
# and the prefill path's
WGMMA = [wgmma(64, 3), wgmma(128, 3), wgmma(128, 4), ws(128, 4, 4), ws(128, 4, 4, 1, (4, 4, 1)),
         ws(128, 4, 4, 1, (6, 4, 2)), ws(160, 4, 3, 1, (4, 3, 1), (64, 64)), ws(144, 4, 4, 1, (4, 4, 1), (64, 64)),
         ws(192, 4, 3, 1, (4, 3, 1), (64, 64))]
MMA = [mma((1, 2, ".cg"), (1, 2, ".cg")), mma((1, 2, ".cg"), (1, 2, ".cg", 8)), mma((1, 2, ".cg"), (2, 2, ".cg", 8)),
       mma((1, 2), (1, 2, "", 8)), mma((1, 4, ".cg"), (1, 4, ".cg", 8)),
       mma((1, 2, ".cg"), (1, 2, ".cg", 8, 40))]  # v11: the down GEMM at 40 registers, 51 warps an SM
# v12: the weights through 2-stage TMA rings (probes 36-37): both GEMMs, both with two tiles a
# program, or the gate/up GEMM only beside the 40-register down GEMM
MMA += [tma(mma((1, 2), (1, 2, "", 8)), 2, 2), tma(mma((2, 2), (2, 2, "", 8)), 2, 2),
        tma(mma((1, 2), (1, 2, ".cg", 8, 40)), 2, 0), tma(mma((2, 2), (2, 1, "", 8)), 2, 2)]  # probe38: one-warp down
SMALL = [cfg(16, (32, 128, 4, 5), (64, 128, 4, 5), False)] + MMA
MID = [cfg(16, (32, 256, 4, 4), (64, 256, 4, 4)), cfg(64, (64, 64, 4, 4), (128, 64, 4, 4))] + MMA[:4] + MMA[6:8] + MMA[9:] + WGMMA[:2]
LARGE = [cfg(128, (32, 128, 4, 3), (64, 128, 4, 3)), cfg(64, (64, 128, 8, 3), (128, 128, 8, 3)), MMA[1]] + WGMMA


def candidates(M):
    return SMALL if M <= 64 else MID if M <= 1024 else LARGE


_flush = None


SPIN_CYCLES = 200_000  # ~0.1 ms of GPU spin: longer than the host needs to queue a replay


def time_graph(fn, reps=20, warm=2, hide_launch=False):
    """Capture fn() in a CUDA graph, replay reps times with L2 flushed; median ms.
    hide_launch: the GPU spins (torch.cuda._sleep) between the flush and the start event, so
    the host has queued the replay before the GPU reaches it and the time is the graph's run on
    the device alone, as in a server whose host runs ahead; without it the host's launch
    latency of the replay is inside the time too."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    g = capture_graph(fn, warm=warm)
    ts = []
    for _ in range(reps):
        _flush.zero_()
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        if hide_launch:
            torch.cuda._sleep(SPIN_CYCLES)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def copy_bw():
    n = 2 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    ts = []
    for _ in range(10):
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        e0.record()
        b.copy_(a)
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1))
    ts.sort()
    return 2 * n / (ts[len(ts) // 2] * 1e-3)  # bytes read + written per second


def dense_bf16_tflops():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    ts = []
    for _ in range(10):
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        e0.record()
        a @ b
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1))
    ts.sort()
    return 2 * n ** 3 / (ts[len(ts) // 2] * 1e-3) / 1e12


def problem(mname, M, base, bw):
    """The benchmark's problem of M tokens for a model (activations and routing seeded by M, the
    weights of base) and its row: experts touched, their bytes, the memory roofline at copy
    bandwidth bw (bytes read + written per second) and the FLOPs."""
    c = MODELS[mname]
    E, H, I, topk = c["E"], c["H"], c["I"], c["topk"]
    q = make_problem(M, E, H, I, topk, device="cuda", seed=100 + M)
    p = dict(base, hidden_states=q["hidden_states"], topk_ids=q["topk_ids"], topk_weights=q["topk_weights"])
    uniq = int(torch.unique(p["topk_ids"]).numel())
    exp_bytes = (2 * I * H // 2 + 2 * I * H // 32) + (H * I // 2 + H * I // 32)
    row = {"model": mname, "E": E, "H": H, "I": I, "topk": topk, "M": M, "uniq": uniq,
           "bytes": uniq * exp_bytes, "roofline_ms": uniq * exp_bytes / bw * 1e3,
           "flops": 2 * M * topk * (2 * I * H + H * I)}
    return p, row


def bf16_peer(x, w13t, w2t, ids, tw, I, clamp, rsf):
    """Sort slots by expert with tensor ops, two torch._grouped_mm, weighted index_add."""
    M, topk = ids.shape
    E = w13t.shape[0]
    flat = ids.reshape(-1).long()
    key = torch.where(flat >= 0, flat, E)
    order = torch.argsort(key, stable=True)
    counts = torch.zeros(E + 1, dtype=torch.int64, device=x.device).scatter_add_(0, key, torch.ones_like(key))
    offs = torch.cumsum(counts[:E], 0).to(torch.int32)
    tok = order // topk
    h = torch._grouped_mm(x[tok], w13t, offs=offs)
    gate, up = h[:, :I].float(), h[:, I:].float()
    if clamp:
        gate, up = gate.clamp(max=clamp), up.clamp(-clamp, clamp)
    a = (torch.nn.functional.silu(gate) * up).to(torch.bfloat16)
    d = torch._grouped_mm(a, w2t, offs=offs).float()
    w = (tw.reshape(-1)[order] * (key[order] < E)).float()
    out = torch.zeros(M, x.shape[1], dtype=torch.float32, device=x.device).index_add_(0, tok, d * w[:, None])
    if rsf:
        out = out * rsf
    return out.to(torch.bfloat16)


def load_slot(path):
    spec = importlib.util.spec_from_file_location("sglang_slot_path", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.mxfp4_moe_forward_triton


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--slot-module", default=None)
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--tune-max-m", type=int, default=1 << 30, help="tune only M up to this; others use the config file")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--slot-max-m", type=int, default=64)
    ap.add_argument("--budget-s", type=float, default=1e9)
    args = ap.parse_args()
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    dev_name = torch.cuda.get_device_name()
    bw = copy_bw()
    dense = dense_bf16_tflops()
    print(f"{dev_name}: copy {bw / 1e12:.2f} TB/s, dense bf16 {dense:.0f} TFLOP/s", flush=True)
    slot = load_slot(args.slot_module) if args.slot_module else None
    res = {"device": dev_name, "torch": torch.__version__, "copy_bw_Bps": bw, "dense_bf16_tflops": dense,
           "timing": "CUDA graph replay, L2 flushed before each rep, median", "rows": []}
    for mname in args.models.split(","):
        c = MODELS[mname]
        E, H, I, topk = c["E"], c["H"], c["I"], c["topk"]
        kw = dict(clamp_limit=c["clamp"], routed_scaling_factor=c["rsf"])
        base = make_problem(1, E, H, I, topk, device="cuda", seed=1)
        w13t = dequant_mxfp4(base["w13_packed"], base["w13_scale"], torch.bfloat16).transpose(1, 2)
        w2t = dequant_mxfp4(base["w2_packed"], base["w2_scale"], torch.bfloat16).transpose(1, 2)
        tuned = {}
        for M in map(int, args.ms.split(",")):
            if time.time() - t_start > args.budget_s:
                print("budget reached, stopping", flush=True)
                break
            p, row = problem(mname, M, base, bw)
            flops, roof_ms = row["flops"], row["roofline_ms"]
            cands = candidates(M) if args.tune and M <= args.tune_max_m else [get_config(M, E, topk, H, I, dev_name, arch.for_device(torch.device("cuda", 0)),
                                                                                     arch.device_props(0))]
            # a scale_vec=True candidate the shape cannot take runs as its byte twin: skip it
            cands = [cf for cf in cands if not (cf["gemm1"].get("scale_vec") and not (
                scale_vec_ok(cf["gemm1"], H) and scale_vec_ok(cf["gemm2"], I)))]
            best = None
            for cf in cands:
                try:
                    t = time_graph(lambda: grouped_mxfp4_moe(**p, config=cf, **kw))
                except Exception as ex:  # a config that does not build/fit
                    print("config failed", cf, repr(ex)[:200], flush=True)
                    continue
                if len(cands) > 1:
                    print(f"  M={M} {t:.4f} ms {json.dumps(cf)}", flush=True)
                if best is None or t < best[0]:
                    best = (t, cf)
            t, cf = best
            tuned[M] = cf
            out = grouped_mxfp4_moe(**p, config=cf, **kw)
            row.update(ms=t, config=cf, frac_roofline=roof_ms / t, tflops=flops / (t * 1e-3) / 1e12,
                       frac_dense=flops / (t * 1e-3) / 1e12 / dense)
            row["ms_det"] = time_graph(lambda: grouped_mxfp4_moe(**p, config=cf, deterministic=True, **kw))
            if M <= 64:
                row["err_vs_reference"] = rel(out, reference_mxfp4_moe(**p, **kw))
            try:
                row["bf16_ms"] = time_graph(lambda: bf16_peer(p["hidden_states"], w13t, w2t, p["topk_ids"],
                                                               p["topk_weights"], I, c["clamp"], c["rsf"]))
                row["err_bf16_vs_ours"] = rel(out, bf16_peer(p["hidden_states"], w13t, w2t, p["topk_ids"],
                                                             p["topk_weights"], I, c["clamp"], c["rsf"]))
                row["x_bf16"] = row["bf16_ms"] / t
            except Exception as ex:
                row["bf16_error"] = repr(ex)[:300]
            if slot is not None and M <= args.slot_max_m:
                sp = dict(p, w13_scale=p["w13_scale"].float(), w2_scale=p["w2_scale"].float())
                fn = lambda: slot(**sp, **kw)  # noqa: E731
                fn()  # autotune outside the graph
                row["slot_ms"] = time_graph(fn, reps=5, warm=1)
                row["x_slot"] = row["slot_ms"] / t
                row["err_vs_slot"] = rel(out, fn())
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                              if k != "config"}), flush=True)
            res["rows"].append(row)
            with open(os.path.join(args.out, "results.json"), "w") as f:
                json.dump(res, f, indent=1)
        if args.tune and tuned:
            fn = config_file_name(E, I, dev_name)
            with open(os.path.join(args.out, fn), "w") as f:
                json.dump({str(k): v for k, v in tuned.items()}, f, indent=1)
        w13t = w2t = base = None  # free the dequantized copies before the next model
        torch.cuda.empty_cache()
    print(f"total {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
