"""Host overhead of an eager call (issue 19): eager time minus graph-replay time at small M, the
wrapper's modes side by side in one process, with the breakdown of each and what the host's
primitives cost on this machine.

Modes (module switches of reference_impl.moe, all in one run):
  v14 launches   the launches through the compiled kernels' launchers with Triton's launch metadata
                 and hooks (the code before this change: _EAGER_GRAPH and _LEAN_LAUNCH off)
  lean launches  the same launches without the metadata and hook calls (no hook registered)
  eager graph    small-M eager calls replay a graph captured once per plan and weights

Each (shape, M, weights, mode) is timed in rounds, the modes in turn within a round (the host is
noisy: only medians and ratios within this run are quoted). "graph" is a caller's CUDA graph of the
same call (its replay, sync to sync); eager - graph is the host overhead.

  python bench/reference_impl/bench_host.py --out OUT [--ms 1,4,16] [--rounds 15] [--n 20]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import triton
import triton.language as tl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference_impl"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from refimpl_data import make_problem  # noqa: E402
from reference_impl import grouped_mxfp4_moe, prepack_mxfp4_moe, reference_mxfp4_moe  # noqa: E402
from reference_impl import moe  # noqa: E402
from reference_impl.tune import capture_graph  # noqa: E402
from bench_moe import MODELS  # noqa: E402

MODES = {"v14 launches": dict(_EAGER_GRAPH=False, _LEAN_LAUNCH=False),
         "lean launches": dict(_EAGER_GRAPH=False, _LEAN_LAUNCH=True),
         "eager graph": dict(_EAGER_GRAPH=True, _LEAN_LAUNCH=True)}


def set_mode(m):
    for k, v in MODES[m].items():
        setattr(moe, k, v)


def pairs(fn, g, n):
    """n (eager us, graph-replay us), each from a sync to a sync, alternating."""
    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        out.append(((t1 - t0) * 1e6, (time.perf_counter() - t1) * 1e6))
    return out


def breakdown(fn, n=200):
    """Median host us between the wrapper's stage marks (moe._mark), per stage."""
    acc = {}
    for _ in range(n):
        torch.cuda.synchronize()
        moe._PROFILE = []
        fn()
        marks = moe._PROFILE
        moe._PROFILE = None
        per = {}
        for (_, t0), (name, t1) in zip(marks, marks[1:]):
            per[name] = per.get(name, 0.0) + (t1 - t0) * 1e6
        for k, v in per.items():
            acc.setdefault(k, []).append(v)
    torch.cuda.synchronize()
    return {k: round(statistics.median(v), 1) for k, v in acc.items()}


@triton.jit
def _tiny(x_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n) + 1, mask=o < n)


def host_us(fn, n=2000):
    """Median host us of one fn() call (no sync in between; the GPU keeps up)."""
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e6)
        if len(ts) % 200 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return round(statistics.median(ts), 2)


def primitives():
    """What the host's building blocks cost here (median us a call)."""
    x = torch.zeros(4096, dtype=torch.bfloat16, device="cuda")
    y = torch.zeros_like(x)
    k = _tiny[(1,)](x, 4096, BLOCK=4096)
    stream = torch.cuda.current_stream().cuda_stream
    rt = triton.knobs.runtime
    ptr = x.data_ptr()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _tiny[(1,)](x, 4096, BLOCK=4096)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(3):
            _tiny[(1,)](x, 4096, BLOCK=4096)
    r = {}
    for name, f in {
        "python call of a no-op": lambda: None,
        "torch.empty(1, 4096) bf16": lambda: torch.empty(1, 4096, dtype=torch.bfloat16, device="cuda"),
        "tensor.copy_ (8 KB, device to device)": lambda: y.copy_(x),
        "tensor.clone (8 KB)": lambda: x.clone(),
        "Triton JIT launch kernel[grid](...)": lambda: _tiny[(1,)](x, 4096, BLOCK=4096),
        "compiled kernel's run with metadata and hooks": lambda: k.run(
            1, 1, 1, stream, k.function, k.packed_metadata, k.launch_metadata((1, 1, 1), stream, ptr, 4096),
            rt.launch_enter_hook, rt.launch_exit_hook, ptr, 4096, 4096),
        "compiled kernel's run, no metadata or hooks": lambda: k.run(
            1, 1, 1, stream, k.function, k.packed_metadata, None, None, None, ptr, 4096, 4096),
        "CUDAGraph.replay of 3 launches": lambda: g.replay(),
        "torch.cuda.is_current_stream_capturing": torch.cuda.is_current_stream_capturing,
    }.items():
        try:
            r[name] = host_us(f)
        except Exception as ex:  # noqa: BLE001
            r[name] = repr(ex)[:120]
    try:
        from cuda.bindings import driver as cud  # the CUDA driver's Python bindings, where installed
        import cuda.bindings
        r["cuda.bindings"] = getattr(cuda.bindings, "__version__", "?")
        r["cuda.bindings cuCtxGetCurrent"] = host_us(cud.cuCtxGetCurrent)
    except Exception as ex:  # noqa: BLE001
        r["cuda.bindings"] = f"not importable: {ex!r}"[:120]
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ms", default="1,4,16")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "primitives": primitives(), "rows": []}
    for k, v in res["primitives"].items():
        print(f"  {k:48s} {v}", flush=True)
    for mname in args.models.split(","):
        c = MODELS[mname]
        E, H, I, topk = c["E"], c["H"], c["I"], c["topk"]
        kw = dict(clamp_limit=c["clamp"], routed_scaling_factor=c["rsf"])
        base = make_problem(1, E, H, I, topk, device="cuda", seed=1)
        pk = prepack_mxfp4_moe(base["w13_packed"], base["w2_packed"], base["w13_scale"], base["w2_scale"], H, I)
        for M in map(int, args.ms.split(",")):
            q = make_problem(M, E, 32, 32, topk, device="cuda", seed=M)
            x = (torch.randn(M, H, device="cuda") * 0.5).to(torch.bfloat16)
            raw = dict(base, hidden_states=x, topk_ids=q["topk_ids"], topk_weights=q["topk_weights"])
            packed = dict(raw, w13_packed=pk, w2_packed=None, w13_scale=None, w2_scale=None)
            for wname, p in (("raw", raw), ("prepacked", packed)):
                fn = lambda p_=p: grouped_mxfp4_moe(**p_, **kw)  # noqa: E731
                # results: each mode's deterministic output against v14's launches (bitwise) and the reference
                outs = {}
                for m in MODES:
                    set_mode(m)
                    for _ in range(3):
                        outs[m] = grouped_mxfp4_moe(**p, **kw, deterministic=True)
                ref = reference_mxfp4_moe(**raw, **kw)
                same = {m: bool(torch.equal(outs[m], outs["v14 launches"])) for m in MODES}
                err = ((outs["eager graph"].double() - ref.double()).norm() / ref.double().norm()).item()
                graphs, samples = {}, {m: [] for m in MODES}
                for m in MODES:
                    set_mode(m)
                    for _ in range(5):
                        fn()
                    graphs[m] = capture_graph(fn, warm=2)
                for r in range(args.rounds):
                    for i in range(len(MODES)):
                        m = list(MODES)[(i + r) % len(MODES)]
                        set_mode(m)
                        samples[m] += pairs(fn, graphs[m], args.n)
                base_d = None
                for m in MODES:
                    set_mode(m)
                    e = statistics.median(a for a, _ in samples[m])
                    gr = statistics.median(b for _, b in samples[m])
                    d = statistics.median(a - b for a, b in samples[m])
                    base_d = d if base_d is None else base_d
                    bd = breakdown(fn)
                    row = dict(model=mname, M=M, weights=wname, mode=m, eager_us=e, graph_us=gr, overhead_us=d,
                               x_v14=d / base_d, breakdown=bd, bitwise_equal_v14=same[m], rel_err=err)
                    res["rows"].append(row)
                    print(f"  {mname:18s} M={M:<3d} {wname:9s} {m:14s} eager {e:7.1f} graph {gr:6.1f} -> "
                          f"{d:6.1f} us (x{d / base_d:.2f})  same={same[m]}  {bd}", flush=True)
                del graphs
                set_mode("eager graph")
            with open(os.path.join(args.out, "host.json"), "w") as f:
                json.dump(res, f, indent=1)
        base = pk = None
        moe._RAW_GRAPHS.clear()
        torch.cuda.empty_cache()
    print("\nM=1 summary (eager - graph, median us; ratio to v14 launches in this run):")
    for r in res["rows"]:
        if r["M"] == 1:
            print(f"  {r['model']:18s} {r['weights']:9s} {r['mode']:14s} {r['overhead_us']:6.1f} us  "
                  f"x{r['x_v14']:.2f}  eager {r['eager_us']:.1f} graph {r['graph_us']:.1f}")


if __name__ == "__main__":
    main()
