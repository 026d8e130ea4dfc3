"""Tune grouped_mxfp4_moe's configs on this GPU and write them where it finds them.

  python -m reference_impl.tune --model deepseek-v4-flash
  python -m reference_impl.tune --model gpt-oss-120b --budget 300
  python -m reference_impl.tune --hf-config path/to/config.json
  python -m reference_impl.tune --shape E=256,H=4096,I=2048,topk=8

For each batch size M it starts from the heuristic default (configs.default_config) and the
other paths' defaults this GPU may run (arch.py), then changes one knob at a time, keeping a
change that is faster (coordinate descent), until the M's share of the budget is spent. Every
candidate's output is checked against reference_mxfp4_moe (finite, relative error <= 1e-2)
before it is timed; time = median of CUDA-graph replays with L2 flushed before each. Writes
E=..,N=..,device_name=..,dtype=mxfp4.json into the user config folder (configs.user_config_dir(),
or --out-dir), which grouped_mxfp4_moe reads before the bundled files, and says where. Progress
goes to stderr as it runs; the candidates timed so far are kept beside the file
(<name>.progress.json), so a stopped run resumes where it was (--fresh starts over).

Bad input (no GPU, an unsupported GPU, a shape not a multiple of 32, an unreadable config.json):
one line on stderr, exit status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

MODELS = {
    "deepseek-v4-flash": dict(E=256, H=4096, I=2048, topk=8, clamp=None, rsf=2.5),
    "gpt-oss-120b": dict(E=128, H=2880, I=2880, topk=4, clamp=7.0, rsf=None),
}
MS = (1, 4, 16, 64, 256, 1024, 4096)
TOL = 1e-2


class BadInput(Exception):
    pass


def shape_from_hf_config(path: str) -> dict:
    """E, H, I, topk (and clamp, rsf) from a Hugging Face config.json of an MoE model."""
    try:
        with open(path) as f:
            c = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise BadInput(f"{path}: cannot read it as JSON ({e})")
    c = c.get("text_config", c)

    def first(*keys):
        for k in keys:
            if isinstance(c.get(k), (int, float)) and not isinstance(c.get(k), bool):
                return c[k]
        raise BadInput(f"{path}: none of {', '.join(keys)} found (not an MoE model's config?)")

    E = first("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts")
    topk = first("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "moe_topk")
    H = first("hidden_size")
    I = first("moe_intermediate_size", "intermediate_size")
    clamp = c.get("swiglu_limit")
    rsf = c.get("routed_scaling_factor")
    return dict(E=int(E), H=int(H), I=int(I), topk=int(topk), clamp=clamp if clamp else None,
                rsf=rsf if rsf not in (None, 1, 1.0) else None)


def shape_from_arg(s: str) -> dict:
    want = {"E", "H", "I", "topk"}
    try:
        kv = dict(part.split("=", 1) for part in s.split(","))
        d = {k.strip(): int(v) for k, v in kv.items() if k.strip() in want}
    except ValueError:
        raise BadInput(f"--shape {s!r}: expected E=..,H=..,I=..,topk=.. (integers)")
    if set(d) != want:
        raise BadInput(f"--shape {s!r}: expected E=..,H=..,I=..,topk=.. (missing {', '.join(sorted(want - set(d)))})")
    return dict(d, clamp=None, rsf=None)


def check_shape(s: dict) -> None:
    for k in ("H", "I"):
        if s[k] <= 0 or s[k] % 32:
            raise BadInput(f"{'hidden_size' if k == 'H' else 'intermediate_size'} {k}={s[k]} is not a positive "
                           "multiple of 32 (MXFP4 scale groups)")
    if s["E"] <= 0 or not 0 < s["topk"] <= s["E"]:
        raise BadInput(f"E={s['E']}, topk={s['topk']}: need 0 < topk <= E")


def check_device():
    """The GPU's architecture (arch.Arch), or BadInput."""
    import torch
    from . import arch
    if not torch.cuda.is_available():
        raise BadInput("no CUDA GPU found: the tuner times the kernels on the GPU it runs on")
    cc = torch.cuda.get_device_capability()
    try:
        return arch.for_capability(cc)
    except arch.UnsupportedArch as e:
        raise BadInput(f"{torch.cuda.get_device_name()}: {e}")


# --- the search space --------------------------------------------------------------------------

def _set(cfg: dict, path: tuple, value) -> dict:
    """A copy of cfg with cfg[path] = value (None removes the key)."""
    out = json.loads(json.dumps(cfg))
    d = out
    for k in path[:-1]:
        d = d[k]
    if value is None:
        d.pop(path[-1], None)
    else:
        d[path[-1]] = value
    return out


def knobs(cfg: dict, a) -> list:
    """The changes to try one at a time from a config of cfg's path on architecture a: lists of
    patches {key path: value} (None removes the key), one list a knob."""
    path = cfg.get("path", "dot")
    one = lambda key, values: [{key: v} for v in values]  # noqa: E731
    out = []
    if path == "mma":
        for g in ("gemm1", "gemm2"):
            out += [one((g, "Q"), (1, 2)), one((g, "num_warps"), (1, 2, 4))]
            if a.mma_tma:
                out.append(one((g, "tma"), (None, 2, 3) if g == "gemm1" or cfg[g].get("atom_vec") == 8 else (None,)))
                if cfg[g].get("tma"):
                    out.append(one((g, "ahead"), (None, 1, 2)))
            out.append(one((g, "w_cache"), (None, ".cg")))
        out.append(one(("gemm2", "maxnreg"), (None, 40, 64)))
    elif path == "wgmma":
        # the block size and the warp-specialized partitions together (registers bound the pair)
        out.append([{("BLOCK_M",): bm, ("gemm1", "ws"): cw, ("gemm2", "ws"): cw}
                    for bm, cw in ((64, None), (128, None), (128, 4), (144, 4), (160, 3))])
        out += [one(("gemm1", "ws"), (None, 3, 4)), one(("gemm2", "ws"), (None, 3, 4)),
                one(("gemm1", "STAGES"), (3, 4, 5)), one(("gemm2", "STAGES"), (3, 4, 5))]
    else:
        out.append(one(("BLOCK_M",), (16, 32, 64, 128)))
        for g in ("gemm1", "gemm2"):
            out += [one((g, "BLOCK_N"), (32, 64, 128)), one((g, "BLOCK_K"), (64, 128, 256)),
                    one((g, "num_warps"), (4, 8)), one((g, "num_stages"), (2, 3, 4, 5))]
    return out


def apply(cfg: dict, patch: dict) -> dict:
    """cfg with a knob's patch applied, made consistent (_fixup)."""
    for key, v in patch.items():
        cfg = _set(cfg, key, v)
    return _fixup(cfg)


def _fixup(cfg: dict) -> dict:
    """Make a one-knob change consistent: the wgmma token parts follow BLOCK_M (64 + 64 + tail
    past 128 tokens, quarters below); ws needs STAGES > LAG and drops num_warps; ahead needs tma."""
    c = json.loads(json.dumps(cfg))
    if c.get("path") == "wgmma":
        bm = c["BLOCK_M"]
        if bm > 128:
            c["parts"] = [64, 64]
        else:
            c.pop("parts", None)
        for g in ("gemm1", "gemm2"):
            if c[g].get("ws"):
                c[g].pop("num_warps", None)
                c[g].setdefault("LAG", 1)
                if bm == 160 and c[g]["ws"] == 4:
                    c[g]["ws"] = 3  # four 160-token partitions do not fit the register file
            else:
                c[g].pop("LAG", None)
                c[g]["num_warps"] = 4
        c["gemm2"]["atom_vec"] = 8
    if c.get("path") == "mma":
        for g in ("gemm1", "gemm2"):
            if not c[g].get("tma"):
                c[g].pop("ahead", None)
    return c


def seeds(M: int, s: dict, a, props) -> list:
    """The starting points: the default, then the other paths' defaults this GPU may run."""
    import dataclasses
    from . import configs
    out = [configs.default_config(M, s["E"], s["topk"], s["H"], s["I"], a, props)]
    r = M * s["topk"] / max(1, min(s["E"], M * s["topk"]))
    alts = []
    if a.mma and r > 16:
        alts.append(configs._mma_default(M, s["E"], s["topk"], s["H"], s["I"], a, props))
    if a.wgmma and r <= 16 and M * s["topk"] >= 64:
        alts.append(configs._wgmma_default(M, s["E"], s["topk"], props))
    if not a.mma or r > 16:
        alts.append(configs.default_config(M, s["E"], s["topk"], s["H"], s["I"],
                                           dataclasses.replace(a, mma=False, wgmma=False), props))
    for c in alts:
        if c not in out:
            out.append(c)
    return out


# --- measuring ---------------------------------------------------------------------------------

def make_problem(M: int, s: dict, seed: int, weights=None):
    """Random MXFP4 weights (E8M0 exponents 121..125) and M tokens routed to distinct experts."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    kw = dict(generator=g, device="cuda")
    E, H, I, topk = s["E"], s["H"], s["I"], s["topk"]
    if weights is None:
        weights = dict(
            w13_packed=torch.randint(-128, 128, (E, 2 * I, H // 2), dtype=torch.int16, **kw).to(torch.int8),
            w2_packed=torch.randint(-128, 128, (E, H, I // 2), dtype=torch.int16, **kw).to(torch.int8),
            w13_scale=torch.randint(121, 126, (E, 2 * I, H // 32), dtype=torch.int32, **kw).to(torch.uint8),
            w2_scale=torch.randint(121, 126, (E, H, I // 32), dtype=torch.int32, **kw).to(torch.uint8))
    x = (torch.randn(M, H, **kw) * 0.5).to(torch.bfloat16)
    ids = torch.rand(M, E, **kw).argsort(-1)[:, :topk].to(torch.int32)
    tw = torch.rand(M, topk, **kw).softmax(-1)
    return dict(weights, hidden_states=x, topk_ids=ids, topk_weights=tw, hidden_size=H, intermediate_size=I)


_FLUSH = None


def capture_graph(fn, warm: int = 1):
    """``fn`` run ``warm`` times on a side stream (compiles, allocates), then captured in a CUDA graph."""
    import torch
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for _ in range(warm):
            fn()
    torch.cuda.current_stream().wait_stream(st)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def time_graphs(fns: dict, reps: int = 20) -> dict:
    """Each fn captured in a CUDA graph; the graphs replayed in turn (the order rotated each round,
    so none always runs first after the others), L2 flushed before each replay: median ms each."""
    import torch
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    graphs = [(k, capture_graph(fn)) for k, fn in fns.items()]
    ts = {k: [] for k in fns}
    for r in range(reps):
        for i in range(len(graphs)):
            k, g = graphs[(i + r) % len(graphs)]
            _FLUSH.zero_()
            e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
            e0.record()
            g.replay()
            e1.record()
            torch.cuda.synchronize()
            ts[k].append(e0.elapsed_time(e1))
    del graphs
    return {k: sorted(v)[len(v) // 2] for k, v in ts.items()}


def time_graph(fn, reps: int = 20) -> float:
    """fn captured in a CUDA graph, replayed reps times with L2 flushed before each: median ms."""
    return time_graphs({"fn": fn}, reps)["fn"]


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def measure(cfg: dict, p: dict, kw: dict, ref) -> float:
    """Checked against the reference, then timed: ms; ValueError if wrong."""
    import torch
    from .moe import grouped_mxfp4_moe
    out = grouped_mxfp4_moe(**p, config=cfg, **kw)
    torch.cuda.synchronize()
    if not bool(torch.isfinite(out).all()):
        raise ValueError("non-finite output")
    e = rel(out, ref)
    if not e <= TOL:
        raise ValueError(f"relative error {e:.2e} against reference_mxfp4_moe")
    return time_graph(lambda: grouped_mxfp4_moe(**p, config=cfg, **kw))


def _key(cfg: dict) -> str:
    return json.dumps(cfg, sort_keys=True)


def _log(msg: str) -> None:
    print(f"[tune] {msg}", file=sys.stderr, flush=True)


def tune_m(M, s, a, props, p, kw, ref, tried: dict, deadline: float, save) -> tuple:
    """Coordinate descent from the seeds until deadline: (best ms, best config). tried: config key ->
    ms or an error string (resumed runs reuse it)."""
    from . import configs

    def run(c):
        k = _key(c)
        if k not in tried:
            try:
                configs.validate(c, a, "candidate")
                tried[k] = measure(c, p, kw, ref)
            except Exception as e:  # a candidate that does not build, fit or check out
                tried[k] = f"error: {type(e).__name__}: {str(e)[:200]}"
            save()
            v = tried[k]
            _log(f"M={M} {len(tried)} tried, {v if isinstance(v, str) else f'{v:.4f} ms'} {k}")
        return tried[k]

    best = None
    for c in seeds(M, s, a, props):
        t = run(c)
        if isinstance(t, float) and (best is None or t < best[0]):
            best = (t, c)
        if time.time() > deadline and best:
            return best
    if best is None:
        raise RuntimeError(f"M={M}: no candidate ran (last: {t})")
    improved = True
    while improved and time.time() < deadline:
        improved = False
        for knob in knobs(best[1], a):
            for patch in knob:
                if time.time() > deadline:
                    return best
                c = apply(best[1], patch)
                if _key(c) == _key(best[1]):
                    continue
                t = run(c)
                if not (isinstance(t, float) and t < best[0] * 1.02):
                    continue
                # a close or better time: the two timed again side by side, replayed in turn
                pair = time_graphs({"best": _fn(best[1], p, kw), "cand": _fn(c, p, kw)})
                if pair["cand"] < pair["best"] * 0.99:
                    _log(f"M={M} better: {pair['cand']:.4f} ms against {pair['best']:.4f} ms side by side")
                    best = (pair["cand"], c)
                    improved = True
    return best


def _fn(cfg, p, kw):
    from .moe import grouped_mxfp4_moe
    return lambda: grouped_mxfp4_moe(**p, config=cfg, **kw)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reference_impl.tune", description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", choices=sorted(MODELS))
    src.add_argument("--hf-config", metavar="CONFIG_JSON", help="a Hugging Face config.json of an MoE model")
    src.add_argument("--shape", metavar="E=..,H=..,I=..,topk=..")
    ap.add_argument("--ms", default=",".join(map(str, MS)), help="batch sizes to tune (comma-separated)")
    ap.add_argument("--budget", type=float, default=600.0, help="seconds for the whole shape (default 600)")
    ap.add_argument("--out-dir", default=None, help="where the config file goes (default: the user config folder)")
    ap.add_argument("--fresh", action="store_true", help="ignore the progress of an earlier run")
    args = ap.parse_args(argv)
    try:
        s = MODELS[args.model] if args.model else (shape_from_hf_config(args.hf_config) if args.hf_config
                                                   else shape_from_arg(args.shape))
        check_shape(s)
        try:
            ms = sorted({int(m) for m in args.ms.split(",")})
        except ValueError:
            raise BadInput(f"--ms {args.ms!r}: expected comma-separated batch sizes")
        if not ms or ms[0] <= 0:
            raise BadInput(f"--ms {args.ms!r}: batch sizes must be positive")
        a = check_device()
    except BadInput as e:
        print(f"reference_impl.tune: {e}", file=sys.stderr)
        return 2
    return run_tuning(s, ms, a, args)


def run_tuning(s, ms, a, args) -> int:
    import torch
    from . import arch, configs
    from .reference import reference_mxfp4_moe
    t0 = time.time()
    dev = torch.device("cuda", torch.cuda.current_device())
    props = arch.device_props(dev.index)
    name = torch.cuda.get_device_name(dev)
    out_dir = args.out_dir or configs.user_config_dir()
    os.makedirs(out_dir, exist_ok=True)
    fname = os.path.join(out_dir, configs.config_file_name(s["E"], s["I"], name))
    prog_path = fname + ".progress.json"
    progress = {}
    if os.path.exists(prog_path) and not args.fresh:
        with open(prog_path) as f:
            progress = json.load(f)
        _log(f"resuming from {prog_path}")
    shape_key = _key({k: s[k] for k in ("E", "H", "I", "topk", "clamp", "rsf")})
    if progress.get("shape") != shape_key:
        progress = {"shape": shape_key, "ms": {}}

    def save():
        tmp = prog_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(progress, f)
        os.replace(tmp, prog_path)

    table = {}
    if os.path.exists(fname) and not args.fresh:
        with open(fname) as f:
            table = json.load(f)
    _log(f"{name} ({a.name}, {props.sm_count} SMs): E={s['E']} H={s['H']} I={s['I']} topk={s['topk']}, "
         f"M in {ms}, budget {args.budget:.0f} s -> {fname}")
    kw = dict(clamp_limit=s["clamp"], routed_scaling_factor=s["rsf"])
    weights = None
    for i, M in enumerate(ms):
        st = progress["ms"].setdefault(str(M), {"tried": {}, "done": False})
        if st["done"] and str(M) in table:
            _log(f"M={M}: done in an earlier run ({st['best_ms']:.4f} ms)")
            continue
        left = args.budget - (time.time() - t0)
        deadline = time.time() + max(0.0, left) / (len(ms) - i)
        p = make_problem(M, s, seed=1000 + M, weights=weights)
        weights = {k: p[k] for k in ("w13_packed", "w2_packed", "w13_scale", "w2_scale")}
        ref = reference_mxfp4_moe(**p, **kw)
        best_ms, best = tune_m(M, s, a, props, p, kw, ref, st["tried"], deadline, save)
        st.update(done=True, best_ms=best_ms, best=best)
        table[str(M)] = best
        save()
        tmp = fname + ".tmp"
        with open(tmp, "w") as f:
            json.dump({k: table[k] for k in sorted(table, key=int)}, f, indent=1)
        os.replace(tmp, fname)
        _log(f"M={M}: best {best_ms:.4f} ms of {len(st['tried'])} tried ({time.time() - t0:.0f} s) {_key(best)}")
    print(f"wrote {fname} ({len(table)} batch sizes, {time.time() - t0:.0f} s); grouped_mxfp4_moe reads it "
          f"before the bundled configs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
