"""The one-launch decode path (kernels/decode_fused.py) and prepacked weights on the GPU: results
against the reference at the real shapes, the deterministic mode, graph replay with new routing,
scratch poisoned with NaN, several blocks an expert and dropped slots. Skips without CUDA."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the one-launch path runs on a GPU only", allow_module_level=True)

from refimpl_data import make_problem  # noqa: E402
from reference_impl import grouped_mxfp4_moe, prepack_mxfp4_moe, reference_mxfp4_moe  # noqa: E402
from reference_impl import moe  # noqa: E402

if moe._decode_fused is None or torch.cuda.get_device_capability() < (9, 0):
    pytest.skip("the one-launch path needs Gluon's Hopper modules and sm_90+", allow_module_level=True)

SHAPES = {"dsv4": dict(E=256, H=4096, I=2048, topk=8, rsf=2.5, clamp=None),
          "gptoss": dict(E=128, H=2880, I=2880, topk=4, rsf=None, clamp=7.0)}


def fused_cfg(q=1, nw=2, ctas=8, maxnreg=None, order=0):
    f = {"ctas_per_sm": ctas}
    if order:
        f["order"] = order
    if maxnreg:
        f["maxnreg"] = maxnreg
    return {"path": "mma", "gemm1": {"Q": q, "num_warps": nw, "tma": 2},
            "gemm2": {"Q": q, "num_warps": nw, "atom_vec": 8, "tma": 2}, "pdl": True, "fused": f}


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


_W = {}


def _problem(name, M, seed, **kw):
    s = SHAPES[name]
    if name not in _W:
        base = make_problem(1, s["E"], s["H"], s["I"], s["topk"], device="cuda", seed=7)
        _W[name] = (base, prepack_mxfp4_moe(base["w13_packed"], base["w2_packed"], base["w13_scale"],
                                            base["w2_scale"], s["H"], s["I"]))
    base, pk = _W[name]
    q = make_problem(M, s["E"], 32, 32, s["topk"], device="cuda", seed=seed, **kw)
    x = (torch.randn(M, s["H"], device="cuda", generator=torch.Generator("cuda").manual_seed(seed)) * 0.5)
    p = dict(base, hidden_states=x.to(torch.bfloat16), topk_ids=q["topk_ids"], topk_weights=q["topk_weights"])
    return p, pk, dict(routed_scaling_factor=s["rsf"], clamp_limit=s["clamp"])


def _packed(p, pk):
    return dict(p, w13_packed=pk, w2_packed=None, w13_scale=None, w2_scale=None)


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("M", [1, 3, 4, 16])
@pytest.mark.parametrize("cfg", [fused_cfg(), fused_cfg(2, 2, 4), fused_cfg(1, 4, 16)], ids=["q1w2", "q2w2c4", "q1w4c16"])
def test_fused_matches_reference(name, M, cfg):
    p, pk, kw = _problem(name, M, seed=M)
    ref = reference_mxfp4_moe(**p, **kw)
    for args in (p, _packed(p, pk)):
        out = moe.poisoned_forward(**args, **kw, config=cfg)
        assert torch.isfinite(out).all()
        assert rel(out, ref) < 1e-2, rel(out, ref)
        det = moe.poisoned_forward(**args, **kw, config=cfg, deterministic=True)
        assert rel(det, ref) < 1e-2
        assert torch.equal(det, grouped_mxfp4_moe(**args, **kw, config=cfg, deterministic=True))


@pytest.mark.parametrize("name", list(SHAPES))
def test_fused_several_blocks_an_expert_and_dropped_slots(name):
    """Up to 16 tokens on a pool of 3 experts (blocks of 8 slots: several an expert), 20% slots -1."""
    p, pk, kw = _problem(name, 16 if name == "dsv4" else 30, seed=5, dup_experts=SHAPES[name]["topk"] + 2,
                         invalid_frac=0.2)
    ref = reference_mxfp4_moe(**p, **kw)
    out = grouped_mxfp4_moe(**_packed(p, pk), **kw, config=fused_cfg())
    assert rel(out, ref) < 1e-2


@pytest.mark.parametrize("name", list(SHAPES))
def test_fused_graph_replay_with_new_routing_equals_eager(name):
    M = 4
    p, pk, kw = _problem(name, M, seed=11)
    args = _packed(p, pk)
    cfg = fused_cfg()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        grouped_mxfp4_moe(**args, **kw, config=cfg, deterministic=True)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = grouped_mxfp4_moe(**args, **kw, config=cfg, deterministic=True)
    for seed in (12, 13, 14):
        q, _, _ = _problem(name, M, seed=seed)
        args["hidden_states"].copy_(q["hidden_states"])
        args["topk_ids"].copy_(q["topk_ids"])
        args["topk_weights"].copy_(q["topk_weights"])
        g.replay()
        torch.cuda.synchronize()
        eager = grouped_mxfp4_moe(**args, **kw, config=cfg, deterministic=True)
        assert torch.equal(out, eager)
        assert rel(out, reference_mxfp4_moe(**p, **kw)) < 1e-2  # p shares the inputs args was given


@pytest.mark.parametrize("name", list(SHAPES))
def test_prepacked_equals_raw_bitwise(name):
    """The tuned config (three launches) gives the same bits from prepacked and raw weights."""
    p, pk, kw = _problem(name, 4, seed=21)
    a = grouped_mxfp4_moe(**p, **kw, deterministic=True)
    b = grouped_mxfp4_moe(**_packed(p, pk), **kw, deterministic=True)
    assert torch.equal(a, b)


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("M", [1, 4, 16])
def test_fused_block_by_block_order(name, M):
    """Experimental ticket order (items block by block, fused.order = 1): the reference, the
    deterministic mode bitwise equal to the default order, and several blocks an expert with dropped slots."""
    p, pk, kw = _problem(name, M, seed=60 + M)
    ref = reference_mxfp4_moe(**p, **kw)
    args = _packed(p, pk)
    out = moe.poisoned_forward(**args, **kw, config=fused_cfg(order=1))
    assert rel(out, ref) < 1e-2
    det = moe.poisoned_forward(**args, **kw, config=fused_cfg(order=1), deterministic=True)
    assert torch.equal(det, grouped_mxfp4_moe(**args, **kw, config=fused_cfg(), deterministic=True))
    p, pk, kw = _problem(name, 16, seed=66, dup_experts=SHAPES[name]["topk"] + 2, invalid_frac=0.2)
    assert rel(grouped_mxfp4_moe(**_packed(p, pk), **kw, config=fused_cfg(order=1)),
               reference_mxfp4_moe(**p, **kw)) < 1e-2
