"""Real-shape GPU tests: DeepSeek-V4-Flash and gpt-oss-120b MoE shapes against the
PyTorch reference, and CUDA-graph capture/replay with new routing and inputs.
Skipped without CUDA. bench/reference_impl/run_device.sh tests runs them; bench/NOTES.md quotes the runs."""
import json

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("triton", reason="triton is not installed")

from refimpl_data import make_problem  # noqa: E402
from reference_impl import grouped_mxfp4_moe, reference_mxfp4_moe  # noqa: E402
from reference_impl.moe import poisoned_forward  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MODELS = {
    "dsv4flash": dict(E=256, H=4096, I=2048, topk=8, clamp=None, rsf=2.5),
    "gptoss120b": dict(E=128, H=2880, I=2880, topk=4, clamp=7.0, rsf=None),
}


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def problem(model, M, seed, **kw):
    c = MODELS[model]
    p = make_problem(M, c["E"], c["H"], c["I"], c["topk"], device="cuda", seed=seed, **kw)
    return p, dict(clamp_limit=c["clamp"], routed_scaling_factor=c["rsf"])


def matches_reference(p, kw, M, det, cfg, label):
    """One poisoned forward with cfg (None: the tuned config) against the fp32 reference
    (and fp64 at M <= 7): finite, relative error <= 1e-2."""
    out = poisoned_forward(**p, deterministic=det, config=cfg, **kw)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    e = rel(out, reference_mxfp4_moe(**p, **kw))
    print(f"{label} M={M} det={det} rel_err={e:.2e}")
    assert e <= 1e-2
    if M <= 7:
        e64 = rel(out, reference_mxfp4_moe(**p, compute_dtype=torch.float64, **kw))
        print(f"{label} M={M} det={det} rel_err_f64={e64:.2e}")
        assert e64 <= 1e-2


def graph_replay_matches(model, M, det, cfg, seed):
    """Capture one forward with cfg, replay it three times with new routing (more -1 slots
    each time) and new inputs: equal to eager (bitwise when deterministic) and to the reference."""
    p, kw = problem(model, M, seed=seed)
    static = dict(p)
    run = lambda: grouped_mxfp4_moe(**static, deterministic=det, config=cfg, **kw)  # noqa: E731
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = run()
    for trial in range(3):
        q, _ = problem(model, M, seed=seed + 1000 + trial, invalid_frac=0.1 * trial)
        for k in ("hidden_states", "topk_ids", "topk_weights"):
            static[k].copy_(q[k])
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        eager = run()
        if det:
            assert torch.equal(out, eager)
        else:
            assert rel(out, eager) <= 1e-2  # bf16 atomics: order-dependent rounding
        assert rel(out, reference_mxfp4_moe(**static, **kw)) <= 1e-2


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("M", [1, 7, 64, 300, 1024])
@pytest.mark.parametrize("det", [False, True])
def test_real_shapes_match_reference(model, M, det):
    p, kw = problem(model, M, seed=M * 17 + det, invalid_frac=0.05)
    matches_reference(p, kw, M, det, None, model)


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("M", [1, 16, 64, 512])
@pytest.mark.parametrize("det", [False, True])
def test_cuda_graph_replay_new_routing(model, M, det):
    graph_replay_matches(model, M, det, None, seed=M + 5)  # the tuned config of each M
    print(f"graph {model} M={M} det={det} ok")


DECODE = {"path": "mma", "gemm1": {"Q": 1, "num_warps": 2}, "gemm2": {"Q": 1, "num_warps": 2}}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("M", [1, 7, 64, 300])
@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("q2,nw2,av", [(1, 2, 2), (2, 1, 2), (1, 2, 8), (2, 2, 8)], ids=["q1", "q2", "q1av8", "q2av8"])
def test_decode_path_matches_reference(model, M, det, q2, nw2, av):
    """The Gluon decode path (reference_impl/kernels/decode_mma.py), forced by config; av=8:
    the down GEMM's epilogue with 16-byte atomics (or stores, deterministic), and the two
    GEMMs launched as programmatic dependents (waiting in-kernel for the launch before)."""
    cfg = {**DECODE, "gemm2": {"Q": q2, "num_warps": nw2, "atom_vec": av}, "pdl": av == 8}
    p, kw = problem(model, M, seed=M * 29 + det + 7 * q2 + av, invalid_frac=0.05)
    matches_reference(p, kw, M, det, cfg, f"decode {model} q2={q2} av={av}")


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("M", [1, 64])
@pytest.mark.parametrize("nw1,regs", [(2, (64, 40)), (4, (64, 48))], ids=["nw2", "nw4"])
def test_decode_register_caps_match_reference(model, M, nw1, regs):
    """Both decode GEMMs under a register cap ("maxnreg"), as the tuned configs may ask."""
    cfg = {"path": "mma", "pdl": True, "gemm1": {"Q": 1, "num_warps": nw1, "maxnreg": regs[0]},
           "gemm2": {"Q": 1, "num_warps": 2, "atom_vec": 8, "maxnreg": regs[1]}}
    p, kw = problem(model, M, seed=M * 3 + nw1, invalid_frac=0.05)
    matches_reference(p, kw, M, False, cfg, f"decode {model} maxnreg {regs}")


@pytest.mark.parametrize("nw", [2, 4, 8])
def test_decode_path_k_chunks_not_a_multiple_of_the_warps(nw):
    """H = 384 and I = 640 are whole 128-value chunks (3 and 5) that 2, 4 or 8 warps do not share
    evenly: the last trip of some warps lies past K and must load nothing (moe._decode_mask)."""
    cfg = {**DECODE, "gemm1": {"Q": 1, "num_warps": nw}, "gemm2": {"Q": 1, "num_warps": nw, "atom_vec": 8}}
    p = make_problem(5, 8, 384, 640, 2, device="cuda", seed=nw, invalid_frac=0.1)
    matches_reference(p, dict(clamp_limit=None, routed_scaling_factor=None), 5, False, cfg, f"decode nw={nw}")


def tma(stages, nw=2, q=1, pdl=True, ahead=0):
    """The decode path's TMA form (kernels/decode_tma.py): both GEMMs' weights through a ring of
    `stages` shared-memory slots; ahead: their scales (1), or scales and activations (2), loaded
    a step ahead."""
    g = {"Q": q, "num_warps": nw, "tma": stages, **({"ahead": ahead} if ahead else {})}
    return {"path": "mma", "pdl": pdl, "gemm1": dict(g), "gemm2": {**g, "atom_vec": 8}}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("M", [1, 7, 64, 300])
@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("cfg", [tma(2), tma(3), tma(4, 4), tma(3, 2, 2), tma(3, pdl=False),
                                 {**tma(2, 2, 2), "gemm2": {"Q": 2, "num_warps": 1, "tma": 2, "atom_vec": 8}},
                                 tma(2, ahead=1), tma(2, 4, ahead=2), tma(3, 2, 2, ahead=2),
                                 {**tma(2, 2, 2, ahead=1),
                                  "gemm2": {"Q": 2, "num_warps": 1, "tma": 2, "atom_vec": 8, "ahead": 2}}],
                         ids=["st2", "st3", "st4nw4", "st3q2", "st3nopdl", "st2q2down1w", "st2ahead1", "st2nw4ahead2",
                              "st3q2ahead2", "st2q2down1wahead"])
def test_decode_tma_matches_reference(model, M, det, cfg):
    """The TMA form: gpt-oss's K = 2880 ends inside a TMA box (zero-filled past K by the copy
    engine), DSV4's does not; slots are reused (K / 128 / warps steps > stages)."""
    p, kw = problem(model, M, seed=M * 31 + det + 3 * cfg["gemm1"]["tma"], invalid_frac=0.05)
    matches_reference(p, kw, M, det, cfg, f"decode tma {model} {json.dumps(cfg['gemm1'])}")


def l2(cfg, pol, at=0):
    """cfg with the gate/up GEMM prefetching the down weights into L2 (policy pol at step at)."""
    return {**cfg, "gemm1": {**cfg["gemm1"], "l2": pol, **({"l2_at": at} if at else {})}}


L2_DIRECT = {**DECODE, "gemm1": {"Q": 1, "num_warps": 4, "w_cache": ".cg"},
             "gemm2": {"Q": 1, "num_warps": 4, "atom_vec": 8, "tma": 2}, "pdl": True}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("M", [1, 7, 64])
@pytest.mark.parametrize("cfg", [l2(tma(2), 2), l2(tma(2), 1, 3), l2(tma(2, 4, 2), 2, 1), l2(L2_DIRECT, 2)],
                         ids=["tma_last", "tma_plain_at3", "tma_q2nw4_last_at1", "direct_last"])
def test_l2_prefetch_changes_no_result(model, M, cfg):
    """The down weights prefetched into L2 by the gate/up GEMM (gemm1.l2) move bytes, never values:
    deterministic outputs bitwise equal to the same config without it, and right against the
    reference; several blocks of one expert at M = 64 (only its first block prefetches)."""
    p, kw = problem(model, M, seed=M * 7 + cfg["gemm1"]["l2"], invalid_frac=0.05)
    off = {**cfg, "gemm1": {k: v for k, v in cfg["gemm1"].items() if k not in ("l2", "l2_at")}}
    a = poisoned_forward(**p, deterministic=True, config=cfg, **kw)
    b = poisoned_forward(**p, deterministic=True, config=off, **kw)
    torch.cuda.synchronize()
    assert torch.equal(a, b)
    matches_reference(p, kw, M, False, cfg, f"l2 prefetch {model} {json.dumps(cfg['gemm1'])}")


@pytest.mark.parametrize("model", list(MODELS))
def test_l2_prefetch_graph_replay(model):
    graph_replay_matches(model, 1, True, l2(tma(2), 2), seed=91)
    graph_replay_matches(model, 4, False, l2(L2_DIRECT, 2), seed=92)


@pytest.mark.parametrize("nw", [2, 4, 8])
@pytest.mark.parametrize("ahead", [0, 1, 2], ids=["ahead0", "ahead1", "ahead2"])
def test_decode_tma_k_chunks_not_a_multiple_of_the_warps(nw, ahead):
    """As test_decode_path_k_chunks_not_a_multiple_of_the_warps, for the TMA form: a box past K
    lands as zeros and its scales and activations are masked (ahead: loaded a step early, so the
    last step's loads for the step after it lie past K and must load nothing)."""
    p = make_problem(5, 8, 384, 640, 2, device="cuda", seed=nw + 40 + 7 * ahead, invalid_frac=0.1)
    matches_reference(p, dict(clamp_limit=None, routed_scaling_factor=None), 5, False, tma(2, nw, ahead=ahead),
                      f"decode tma nw={nw} ahead={ahead}")


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("ahead", [0, 2], ids=["ahead0", "ahead2"])
def test_decode_tma_graph_replay(model, det, ahead):
    graph_replay_matches(model, 16, det, tma(3, ahead=ahead), seed=78)
    print(f"decode tma graph {model} det={det} ahead={ahead} ok")


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("av,pdl", [(2, False), (8, False), (8, True)], ids=["av2", "av8", "av8pdl"])
def test_decode_path_graph_replay(model, det, av, pdl):
    """Captured once, replayed with new routing and inputs; pdl: the captured graph holds
    programmatic-dependency edges between the routing and the two GEMMs."""
    graph_replay_matches(model, 16, det, {**DECODE, "gemm2": {**DECODE["gemm2"], "atom_vec": av}, "pdl": pdl},
                         seed=77)
    print(f"decode graph {model} det={det} av={av} pdl={pdl} ok")


def wgmma(bn, stages=3, nw=4, av=2):
    g = {"STAGES": stages, "num_warps": nw}
    return {"path": "wgmma", "BLOCK_M": bn, "gemm1": dict(g), "gemm2": {**g, "atom_vec": av}}


def ws(bn, stages, cw, lag=1, down=None, **extra):
    """The warp-specialized gate/up GEMM (kernels/prefill_ws.py), 16-byte atomics after;
    down=(stages, cw, lag): the down GEMM warp-specialized too."""
    g2 = {"STAGES": 3, "num_warps": 4, "atom_vec": 8}
    if down:
        g2 = {"STAGES": down[0], "ws": down[1], "LAG": down[2], "atom_vec": 8}
    return {"path": "wgmma", "BLOCK_M": bn, "gemm1": {"STAGES": stages, "ws": cw, "LAG": lag, **extra}, "gemm2": g2}


def parts(cfg, t0, t1):
    """cfg with token parts (t0, t1, BLOCK_M - t0 - t1) instead of quarters and a half."""
    return {**cfg, "parts": [t0, t1]}


# bn96: the plain kernels with a 64-row head and a 32-row tail box; ws3bn160: three partitions
# (160 registers each) and blocks of 128 + 32 tokens; ws4bn144: four partitions, 128 + 16
PREFILL = [wgmma(64), wgmma(128, 4), wgmma(128, 3, 8), wgmma(128, 3, 4, 8), ws(128, 4, 4), ws(64, 6, 4, 2),
           ws(128, 4, 2, 1, maxnreg=128), ws(128, 4, 4, 1, (4, 4, 1)), ws(64, 4, 4, 1, (6, 2, 2)),
           parts(wgmma(96, 3, 4, 8), 32, 32), parts(ws(160, 4, 3, 1, (4, 3, 1)), 64, 64),
           parts(ws(144, 4, 4, 1, (4, 4, 1)), 64, 64)]
PREFILL_IDS = ["bn64", "bn128", "bn128nw8", "bn128av8", "ws4", "ws4bn64lag2", "ws2", "ws4down4", "ws4down2lag2",
               "bn96", "ws3bn160", "ws4bn144"]


sm90 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                          reason="the prefill path's wgmma needs sm_90")


@sm90
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("M", [1, 7, 300, 1024])
@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("cfg", PREFILL, ids=PREFILL_IDS)
def test_prefill_path_matches_reference(model, M, det, cfg):
    """The Gluon prefill path (reference_impl/kernels/prefill_wgmma.py, prefill_ws.py),
    forced by config: blocks with one, two and three token parts, gpt-oss's K tails,
    poisoned buffers."""
    p, kw = problem(model, M, seed=M * 31 + det + cfg["BLOCK_M"], invalid_frac=0.05)
    matches_reference(p, kw, M, det, cfg, f"prefill {model} {json.dumps(cfg)}")


@sm90
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("cfg", [parts(ws(160, 4, 3, 1, (4, 3, 1)), 64, 64), parts(ws(144, 4, 4, 1, (4, 4, 1)), 64, 64),
                                 ws(128, 4, 4, 1, (4, 4, 1))], ids=["ws3bn160", "ws4bn144", "ws4down4"])
def test_prefill_blocks_past_128_tokens(model, det, cfg):
    """Every expert gets 135 or 136 tokens (slot s goes to expert s % E; every 29th slot is -1):
    every block runs all three token parts, the third one (the tail box of BLOCK_M > 128, or an
    expert's second block at 128) partly filled. The random routings of the other tests stay
    below 128 tokens an expert."""
    c = MODELS[model]
    M = 140 * c["E"] // c["topk"]
    p, kw = problem(model, M, seed=91 + det)
    s = torch.arange(M * c["topk"], device="cuda", dtype=torch.int32)
    p["topk_ids"] = torch.where(s % 29 == 0, -1, s % c["E"]).view(M, c["topk"])
    counts = torch.bincount(p["topk_ids"][p["topk_ids"] >= 0].long(), minlength=c["E"])
    assert 129 <= int(counts.min()) and int(counts.max()) <= 140
    matches_reference(p, kw, M, det, cfg, f"prefill {model} {json.dumps(cfg)} (135 tokens an expert)")


@sm90
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("cfg", [wgmma(128), ws(128, 4, 4), ws(128, 4, 4, 1, (4, 4, 1)),
                                 parts(ws(160, 4, 3, 1, (4, 3, 1)), 64, 64)],
                         ids=["plain", "ws4", "ws4down4", "ws3bn160"])
def test_prefill_path_graph_replay(model, det, cfg):
    graph_replay_matches(model, 512, det, cfg, seed=78)
    print(f"prefill graph {model} det={det} {json.dumps(cfg)} ok")


@pytest.mark.parametrize("cfg", [DECODE, pytest.param(wgmma(64), marks=sm90),
                                 pytest.param(ws(64, 4, 4, 1, (4, 4, 1)), marks=sm90)],
                         ids=["decode", "prefill", "prefill_ws"])
def test_scales_above_one(cfg):
    """E8M0 exponents 115..140 (scales up to 2**13) and every byte value, so every e2m1
    code, the 0.5 subnormal inside the kernel included, meets the fp64 reference (both
    Gluon paths: they share the dequant and the scale fold)."""
    E, H, I, topk, M = 2, 256, 128, 1, 3
    g = torch.Generator(device="cuda").manual_seed(3)
    kw = dict(generator=g, device="cuda")
    w13 = torch.randint(-128, 128, (E, 2 * I, H // 2), dtype=torch.int16, **kw).to(torch.int8)
    w2 = torch.randint(-128, 128, (E, H, I // 2), dtype=torch.int16, **kw).to(torch.int8)
    s13 = torch.randint(115, 141, (E, 2 * I, H // 32), dtype=torch.int32, **kw).to(torch.uint8)
    s2 = torch.randint(115, 141, (E, H, I // 32), dtype=torch.int32, **kw).to(torch.uint8)
    x = (torch.randn(M, H, **kw) * 0.01).to(torch.bfloat16)
    ids = torch.tensor([[0], [1], [-1]], dtype=torch.int32, device="cuda")
    p = dict(hidden_states=x, w13_packed=w13, w2_packed=w2, w13_scale=s13, w2_scale=s2, topk_ids=ids,
             topk_weights=torch.ones(M, topk, device="cuda"), hidden_size=H, intermediate_size=I)
    out = poisoned_forward(**p, deterministic=True, config=cfg)
    ref = reference_mxfp4_moe(**p, compute_dtype=torch.float64)
    assert torch.isfinite(out).all()
    assert rel(out[:2], ref[:2]) <= 1e-2
    assert out[2].abs().max().item() == 0.0  # a -1 slot contributes nothing


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("M", [1, 16, 300])
def test_fast_launch_gives_the_jit_launch_results(monkeypatch, model, M):
    """With no config passed the plan is cached and, from its second call on, the kernels go
    through the compiled kernels' own launchers (moe._launch): new routing and inputs each call,
    deterministic outputs bitwise equal to the JIT's launches, and to the reference."""
    from reference_impl import moe
    for trial in range(3):
        p, kw = problem(model, M, seed=500 + M + trial, invalid_frac=0.05 * trial)
        fast = grouped_mxfp4_moe(**p, deterministic=True, **kw)
        monkeypatch.setattr(moe, "_FAST_LAUNCH", False)
        slow = grouped_mxfp4_moe(**p, deterministic=True, **kw)
        monkeypatch.setattr(moe, "_FAST_LAUNCH", True)
        assert torch.equal(fast, slow)
        assert rel(fast, reference_mxfp4_moe(**p, **kw)) <= 1e-2
        atom = grouped_mxfp4_moe(**p, **kw)  # the atomics' output mode, fast-launched too
        assert rel(atom, slow) <= 1e-2
    key = next(k for k in moe._PLANS if k[0] == M and k[6])
    assert moe._PLANS[key].launched, "the fast launcher was never used"
    # the same plan without the clamp (a constexpr of the gate/up kernel): not the clamped kernel
    kw = dict(kw, clamp_limit=None if kw["clamp_limit"] else 0.5)
    for _ in range(2):
        out = grouped_mxfp4_moe(**p, deterministic=True, **kw)
        assert rel(out, reference_mxfp4_moe(**p, **kw)) <= 1e-2


@pytest.mark.parametrize("model", list(MODELS))
def test_wrapper_keeps_no_tensor_alive(model):
    """The wrapper's caches (plans, fast launches) hold no tensor: once the caller drops its
    weights and outputs, the memory is free again (a cache of TMA descriptors once held the
    weights of every earlier call)."""
    import gc
    torch.cuda.synchronize()
    gc.collect()
    before = torch.cuda.memory_allocated()
    p, kw = problem(model, 16, seed=4)
    for _ in range(3):  # first call, then the cached plan and fast launches
        out = grouped_mxfp4_moe(**p, **kw)
    torch.cuda.synchronize()
    del p, out
    gc.collect()
    assert torch.cuda.memory_allocated() <= before + (1 << 20)
