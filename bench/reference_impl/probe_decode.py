"""Quick device probe of the decode (mma) path, or with --family wgmma of the prefill
path: correctness against the reference and time against the tuned config, for a few
candidate configs. Prints one line each.

  python bench/reference_impl/probe_decode.py [--ms 1,64] [--models ...] [--family wgmma]
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
from reference_impl import grouped_mxfp4_moe, reference_mxfp4_moe  # noqa: E402
from reference_impl import moe as moe_mod  # noqa: E402
from reference_impl.moe import poisoned_forward  # noqa: E402
from reference_impl.configs import get_config  # noqa: E402
from bench_moe import MODELS, time_graph, rel, copy_bw, tma  # noqa: E402


def mma(g1, g2, regs=(None, None)):
    """A decode-path config; regs: each GEMM's register cap a thread (maxnreg), or None."""
    keys = ("Q", "num_warps", "w_cache", "atom_vec")
    c = {"path": "mma", "gemm1": dict(zip(keys, g1)), "gemm2": dict(zip(keys, g2))}
    for g, r in zip(("gemm1", "gemm2"), regs):
        if r:
            c[g]["maxnreg"] = r
    return c


# the probes in probes/ (commit 9d2e4c7; the logs left the tree) were run with earlier versions of this list (and of the kernel's
# knobs: chunks per trip, register prefetch, register caps, cp.async stages, L2 prefetch,
# scale words, column tiles; bench/NOTES.md, v6 and v7)
# v10 (probe30): one warp a program lost everywhere (at most 32 resident CTAs an SM). probe31:
# programmatic dependent launch of the two GEMMs won 1-3% at every M; the down GEMM's weights
# prefetched into L2 by the gate/up GEMM (evict_last, gate/up's own loads evict_first) lost at
# DSV4 M=1 (its 36 MB did not stay in L2) and at M >= 4; that code is in the history only
BASE = mma((1, 2, ".cg"), (1, 2, ".cg", 8))
PDL = {"pdl": True}
# v11 (probes 32-33, with --baseline): a 3-instruction dequant (mask, one multiply making both
# shifted copies, mask), clamped chunk indices and a register prefetch of each warp's next chunk
# (kept above the multiplies by a block boundary) were each slower than v10's kernel at DSV4;
# that code is in the history only (bench/NOTES.md, v11)
# v11, register caps (no spills at these caps, SASS): gate/up 70 -> 64 registers = 28 -> 32 warps an
# SM, which also lets 4 warps a program fit one wave at DSV4 M=1; down 52 -> 48 / 40 = 39 -> 42 / 51
G1, G1W4, G2 = (1, 2, ".cg"), (1, 4, ".cg"), (1, 2, ".cg", 8)
CANDS = [{**BASE, **PDL}, {**mma(G1, G2, (64, 48)), **PDL}, {**mma(G1, G2, (64, 40)), **PDL},
         {**mma(G1W4, G2, (64, 40)), **PDL}, {**mma(G1W4, (1, 4, ".cg", 8), (64, 48)), **PDL},
         {**mma(G1, G2, (None, 40)), **PDL}]
# v12: the weights through a TMA ring in shared memory (kernels/decode_tma.py, config key "tma" =
# ring stages), each GEMM alone and both
G2C = (1, 2, ".cg", 8)


TUNED_LIKE = {**mma(G1, G2C, (None, 40)), **PDL}
CANDS = [{**BASE, **PDL}, TUNED_LIKE, tma(TUNED_LIKE, 3, 0), tma(TUNED_LIKE, 0, 3), tma(BASE | PDL, 3, 3),
         tma(BASE | PDL, 2, 2), tma(BASE | PDL, 4, 4), tma({**mma(G1, (1, 2, ".cg", 8), (None, 48)), **PDL}, 3, 3)]
# probe36: the TMA form with 2-stage rings in both GEMMs won 1-10% over the tuned configs; 3 and 4
# stages were no better. probe37: its variants (more warps, two tiles a program, register caps)
CANDS36 = CANDS
T2 = tma(BASE | PDL, 2, 2)


def tweak(c, g1=None, g2=None):
    return {**c, "gemm1": {**c["gemm1"], **(g1 or {})}, "gemm2": {**c["gemm2"], **(g2 or {})}}


CANDS = [T2, tweak(T2, {"num_warps": 4}), tweak(T2, {"Q": 2}), tweak(T2, {"Q": 2}, {"Q": 2}),
         tweak(T2, {"maxnreg": 64}), tma(TUNED_LIKE, 2, 0), tweak(T2, {"num_warps": 4, "maxnreg": 64}),
         tweak(T2, None, {"num_warps": 4})]
# probe38: the down GEMM (2.7 TB/s at DSV4 M=64 against the gate/up GEMM's 3.6) behind the tuned
# two-tile TMA gate/up GEMM: one warp a program, a deeper ring, more warps, register caps (no
# spills at these caps, SASS); and the gate/up GEMM capped or with a deeper ring
CANDS37 = CANDS
TQ2 = tweak(T2, {"Q": 2}, {"Q": 2})
CANDS = [TQ2, tweak(TQ2, None, {"num_warps": 1}), tweak(TQ2, None, {"Q": 1, "num_warps": 1}),
         tweak(TQ2, None, {"tma": 3}), tweak(TQ2, None, {"num_warps": 4}), tweak(TQ2, None, {"maxnreg": 72}),
         tweak(TQ2, {"maxnreg": 112}), tweak(TQ2, {"tma": 3})]
CANDS38 = CANDS


# v13 (probe39): each step's E8M0 scales loaded one step ahead ("ahead": 1); the candidates are
# functions of the tuned config of each size (the direct-load configs get the TMA form first).
# probe39: neutral (x0.98-1.02) at every DSV4 decode size and gpt-oss M >= 4; at gpt-oss M=1 the
# down GEMM's TMA form (4 warps) won x1.08-1.15 with or without it. probe40: one-warp gate/up
# programs lost (x0.84-0.93); Nsight at DSV4 M=1 put the largest stall on the long scoreboard
def with_(g1=None, g2=None):
    def make(tuned):
        c = {**tuned, "gemm1": {**tuned["gemm1"], **(g1 or {})}, "gemm2": {**tuned["gemm2"], **(g2 or {})}}
        for g in ("gemm1", "gemm2"):
            if c[g].get("tma"):
                c[g].pop("w_cache", None)
                c[g].pop("maxnreg", None)
            else:
                c[g].pop("ahead", None)
        return c
    return make


# probe41: the B pairs loaded a step ahead too ("ahead": 2)
CANDS = [lambda tuned: tuned, with_({"ahead": 2}, {"ahead": 2}), with_({"ahead": 2}), with_(None, {"ahead": 2}),
         with_({"ahead": 1}, {"ahead": 1}), with_(None, {"num_warps": 4, "Q": 1, "tma": 2, "ahead": 2})]
# probe41: neutral or slower (x0.97-1.03) everywhere but gpt-oss M=1, where the down GEMM's TMA form with
# 4 warps won x1.13-1.19 over the direct-load one: its ring fills before it waits for the gate/up GEMM
CANDS41 = CANDS
# probe42: deeper down-GEMM rings at M <= 4, so more (gpt-oss M=1 with 4 warps: all) of the down GEMM's
# weights arrive while the gate/up GEMM, which leaves DRAM half idle there, still runs
D = {"Q": 1, "tma": 6, "ahead": 2}
CANDS = [lambda tuned: tuned, with_(None, {**D, "num_warps": 4}), with_(None, {**D, "num_warps": 2}),
         with_(None, {**D, "num_warps": 4, "tma": 4}), with_(None, {**D, "num_warps": 4, "tma": 2}),
         with_({"Q": 1, "num_warps": 2, "tma": 2}, {**D, "num_warps": 2})]
PROFILED = (0, 1)  # candidates whose per-kernel times are printed (--profile overrides)


def wgmma(bn, stages, nw, pf=1, **extra):
    """A prefill-path config: BN tokens per block, TMA stages, warps (16 weight rows each),
    weight stages in flight in registers; extra keys go to both GEMMs (stack, atom_vec)."""
    g = {"STAGES": stages, "num_warps": nw, "PF": pf, **extra}
    return {"path": "wgmma", "BLOCK_M": bn, "gemm1": dict(g), "gemm2": dict(g)}


def mixed(c1, c2):
    """gemm1 from config c1, gemm2 from c2 (same BLOCK_M)."""
    return {**c1, "gemm2": c2["gemm2"]}


def ws(bn, stages, cw, lag=1, down=None, **extra):
    """gemm1 warp-specialized (cw warpgroup partitions sharing the B ring); gemm2 the
    one-warpgroup kernel, or with down=(stages, cw, lag) warp-specialized too; 16-byte atomics."""
    g2 = {"STAGES": 3, "num_warps": 4, "atom_vec": 8}
    if down:
        g2 = {"STAGES": down[0], "ws": down[1], "LAG": down[2], "atom_vec": 8}
    return {"path": "wgmma", "BLOCK_M": bn, "gemm1": {"STAGES": stages, "ws": cw, "LAG": lag, **extra}, "gemm2": g2}


# v9: 16-byte atomics in the down GEMM (atom_vec), the gate/up GEMM warp-specialized (ws), then
# the down GEMM too
WGMMA_CANDS = [wgmma(128, 4, 4, atom_vec=8), ws(128, 4, 4), ws(128, 4, 4, 1, (4, 4, 1)), ws(128, 4, 4, 1, (6, 4, 2)),
               ws(128, 4, 4, 1, (4, 2, 1)), wgmma(64, 3, 4, atom_vec=8), ws(64, 4, 4, 1, (4, 4, 1))]
# v10: blocks larger than 128 tokens (128 + 16, 128 + 32, 128 + 64), so fewer experts spill a
# few tokens into a second block that pays the whole dequant again (probe_balance.py)
WGMMA_CANDS += [{**ws(160, 4, 3, 1, (4, 3, 1)), "parts": [64, 64]}, {**ws(144, 4, 4, 1, (4, 4, 1)), "parts": [64, 64]},
                {**ws(192, 4, 3, 1, (4, 3, 1)), "parts": [64, 64]}, {**ws(160, 3, 3, 1, (3, 3, 1)), "parts": [64, 64]},
                {**ws(160, 4, 3, 2, (4, 3, 2)), "parts": [64, 64]}]
# v11: gpt-oss at M=4096 (46% of dense): 128 + 16 tokens with three partitions, a deeper ring,
# the down GEMM with four or two partitions (2880 columns: partial tiles) behind a three-partition gate/up
WGMMA_CANDS += [{**ws(144, 4, 3, 1, (4, 3, 1)), "parts": [64, 64]}, {**ws(160, 5, 3, 1, (5, 3, 1)), "parts": [64, 64]},
                {**ws(160, 4, 3, 1, (4, 4, 1)), "parts": [64, 64]}, {**ws(160, 4, 3, 1, (4, 2, 1)), "parts": [64, 64]},
                {**ws(144, 6, 3, 2, (6, 3, 2)), "parts": [64, 64]}]


def _load_kernels(path, i):
    """Import a decode_mma.py from a path as a module (it has no relative imports); a version
    from before a knob existed gets it as an ignored keyword."""
    import importlib.util
    src = open(path).read()
    for knob in ("PF",):
        if f"{knob}: gl.constexpr" not in src:
            src = src.replace('WC: gl.constexpr = "",', f'WC: gl.constexpr = "", {knob}: gl.constexpr = False,')
    mod_path = os.path.join("/tmp", f"baseline{i}_decode_mma.py")
    with open(mod_path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"baseline{i}_decode_mma", mod_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tuned_problems(models, ms):
    """(model name, M, problem, its keywords, the tuned config) for each model and batch size, the
    weights made once a model and the routing fresh at each M (seeded by M, 5% of slots -1)."""
    dev = torch.cuda.get_device_name()
    for mname in models:
        c = MODELS[mname]
        E, H, I, topk = c["E"], c["H"], c["I"], c["topk"]
        kw = dict(clamp_limit=c["clamp"], routed_scaling_factor=c["rsf"])
        base = make_problem(1, E, H, I, topk, device="cuda", seed=1)
        for M in ms:
            q = make_problem(M, E, H, I, topk, device="cuda", seed=100 + M, invalid_frac=0.05)
            p = dict(base, hidden_states=q["hidden_states"], topk_ids=q["topk_ids"], topk_weights=q["topk_weights"])
            yield mname, M, p, kw, get_config(M, E, topk, H, I, dev)


def kernel_times(fn, reps=10):
    """Mean device time per kernel name over reps eager calls (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out = {}
    for ev in prof.key_averages():
        if ev.device_type.name == "CUDA" or getattr(ev, "self_device_time_total", 0):
            t = getattr(ev, "self_device_time_total", None) or getattr(ev, "self_cuda_time_total", 0)
            if t:
                out[ev.key[:60]] = round(t / reps, 2)
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:5])  # the five longest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="1,4,16,64,256")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--family", default="mma", choices=("mma", "wgmma"))
    ap.add_argument("--profile", default=",".join(map(str, PROFILED)), help="candidate indices to profile")
    ap.add_argument("--baseline", default="", help="other decode_mma.py files (earlier versions, comma-separated) "
                                                   "whose tuned-config times are printed beside the current one's")
    args = ap.parse_args()
    baselines = [(path, _load_kernels(path, i)) for i, path in enumerate(args.baseline.split(",")) if path]
    profiled = [int(i) for i in args.profile.split(",") if i]
    cands = CANDS if args.family == "mma" else WGMMA_CANDS
    bw = copy_bw()
    print(f"copy {bw / 1e12:.2f} TB/s", flush=True)
    dev = torch.cuda.get_device_name()
    for mname in args.models.split(","):
        c = MODELS[mname]
        E, H, I, topk = c["E"], c["H"], c["I"], c["topk"]
        kw = dict(clamp_limit=c["clamp"], routed_scaling_factor=c["rsf"])
        exp_bytes = (2 * I * H // 2 + 2 * I * H // 32) + (H * I // 2 + H * I // 32)
        base = make_problem(1, E, H, I, topk, device="cuda", seed=1)
        for M in map(int, args.ms.split(",")):
            q = make_problem(M, E, H, I, topk, device="cuda", seed=100 + M, invalid_frac=0.05)
            p = dict(base, hidden_states=q["hidden_states"], topk_ids=q["topk_ids"], topk_weights=q["topk_weights"])
            uniq = int(torch.unique(p["topk_ids"][p["topk_ids"] >= 0]).numel())
            roof = uniq * exp_bytes / bw * 1e3
            ref = reference_mxfp4_moe(**p, **kw)
            dot = get_config(M, E, topk, H, I, dev)
            cands_m = [cf(dot) if callable(cf) else cf for cf in cands]
            # timed twice, the first discarded: the first config timed in a process ran up to 6% slow
            # (probe35: the tuned config "x1.06" against itself as candidate 0), which favoured the candidates
            time_graph(lambda: grouped_mxfp4_moe(**p, config=dot, **kw))
            t_dot = time_graph(lambda: grouped_mxfp4_moe(**p, config=dot, **kw))
            tflop = 6 * int((p["topk_ids"] >= 0).sum()) * H * I / 1e12  # the FLOPs the MoE needs
            print(f"{mname} M={M} roof {roof:.4f} ms  dot {t_dot:.4f} ms ({roof / t_dot:.1%}, "
                  f"{tflop / t_dot * 1e3:.0f} TFLOP/s)", flush=True)
            for path, old_kernels in baselines if dot.get("path") == "mma" else ():
                new_kernels, moe_mod._decode_mma = moe_mod._decode_mma, old_kernels
                try:
                    e = rel(poisoned_forward(**p, config=dot, **kw), ref)
                    t_old = time_graph(lambda: grouped_mxfp4_moe(**p, config=dot, **kw))
                    print(f"   {os.path.basename(path)}, tuned config: err {e:.2e} {t_old:.4f} ms "
                          f"({roof / t_old:.1%}, x{t_old / t_dot:.2f} the current time)", flush=True)
                    if profiled:
                        print("     kernels (us):", kernel_times(lambda: grouped_mxfp4_moe(**p, config=dot, **kw)),
                              flush=True)
                finally:
                    moe_mod._decode_mma = new_kernels
            if baselines:
                t_again = time_graph(lambda: grouped_mxfp4_moe(**p, config=dot, **kw))
                print(f"   current kernels again: {t_again:.4f} ms", flush=True)
            for ci in profiled:
                try:
                    print(f"   kernels (us) of candidate {ci}:",
                          kernel_times(lambda: grouped_mxfp4_moe(**p, config=cands_m[ci], **kw)), flush=True)
                except Exception as ex:
                    print("   profiler failed", repr(ex)[:200])
            for cf in cands_m:
                try:
                    out = poisoned_forward(**p, config=cf, **kw)
                    outd = poisoned_forward(**p, config=cf, deterministic=True, **kw)
                    torch.cuda.synchronize()
                    e, ed = rel(out, ref), rel(outd, ref)
                    t = time_graph(lambda: grouped_mxfp4_moe(**p, config=cf, **kw))
                    print(f"   {json.dumps(cf)} err {e:.2e}/{ed:.2e} {t:.4f} ms ({roof / t:.1%}, "
                          f"{tflop / t * 1e3:.0f} TFLOP/s, x{t_dot / t:.2f} vs tuned)",
                          flush=True)
                except Exception as ex:
                    print(f"   {json.dumps(cf)} FAILED {repr(ex)[:300]}", flush=True)


if __name__ == "__main__":
    main()
