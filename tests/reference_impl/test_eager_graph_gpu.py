"""Eager calls of small batches as one CUDA-graph replay (moe._eager_graph) on the GPU: bitwise equal
to the launches in the deterministic mode with new routing and inputs on every call (dropped slots
too), raw and prepacked weights; each call's output its own tensor; scalars and weights that change
take their own graph; a caller's own capture still records the launches. Skips without CUDA."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the eager graph is a CUDA graph", allow_module_level=True)

from refimpl_data import make_problem  # noqa: E402
from reference_impl import grouped_mxfp4_moe, prepack_mxfp4_moe, reference_mxfp4_moe  # noqa: E402
from reference_impl import moe  # noqa: E402

SHAPES = {"dsv4": dict(E=256, H=4096, I=2048, topk=8, rsf=2.5, clamp=None),
          "gptoss": dict(E=128, H=2880, I=2880, topk=4, rsf=None, clamp=7.0)}
_W = {}


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def weights(name):
    s = SHAPES[name]
    if name not in _W:
        base = make_problem(1, s["E"], s["H"], s["I"], s["topk"], device="cuda", seed=11)
        _W[name] = (base, prepack_mxfp4_moe(base["w13_packed"], base["w2_packed"], base["w13_scale"],
                                            base["w2_scale"], s["H"], s["I"]))
    return _W[name]


def inputs(name, M, seed, packed, invalid_frac=0.0):
    s = SHAPES[name]
    base, pk = weights(name)
    q = make_problem(M, s["E"], 32, 32, s["topk"], device="cuda", seed=seed, invalid_frac=invalid_frac)
    x = torch.randn(M, s["H"], device="cuda", generator=torch.Generator("cuda").manual_seed(seed)) * 0.5
    p = dict(base, hidden_states=x.to(torch.bfloat16), topk_ids=q["topk_ids"], topk_weights=q["topk_weights"])
    if packed:
        p = dict(p, w13_packed=pk, w2_packed=None, w13_scale=None, w2_scale=None)
    return p, dict(routed_scaling_factor=s["rsf"], clamp_limit=s["clamp"]), dict(base, **{k: p[k] for k in (
        "hidden_states", "topk_ids", "topk_weights")})


def graphs_of(packed, name):
    holder = weights(name)[1]._graphs if packed else moe._RAW_GRAPHS
    return [v for v in holder.values() if isinstance(v, moe._EagerGraph)]


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("M", [1, 4, 16])
@pytest.mark.parametrize("packed", [False, True], ids=["raw", "prepacked"])
def test_eager_graph_equals_the_launches(monkeypatch, name, M, packed):
    n0 = len(graphs_of(packed, name))
    outs = []
    for trial in range(4):  # new routing and inputs each call; the second call captures
        p, kw, raw = inputs(name, M, seed=100 * M + trial, packed=packed, invalid_frac=0.1 * trial)
        det = grouped_mxfp4_moe(**p, **kw, deterministic=True)
        monkeypatch.setattr(moe, "_EAGER_GRAPH", False)
        launched = grouped_mxfp4_moe(**p, **kw, deterministic=True)
        monkeypatch.setattr(moe, "_EAGER_GRAPH", True)
        assert torch.equal(det, launched), f"trial {trial}"
        atom = grouped_mxfp4_moe(**p, **kw)
        ref = reference_mxfp4_moe(**raw, **kw)
        assert rel(det, ref) <= 1e-2 and rel(atom, ref) <= 1e-2
        outs.append((det, det.clone()))
    assert len(graphs_of(packed, name)) >= n0 + 2, "no eager graph was captured (deterministic and atomics)"
    for out, copy in outs:  # every call's output is its own tensor, not overwritten by later replays
        assert torch.equal(out, copy)


@pytest.mark.parametrize("name", list(SHAPES))
def test_eager_graph_new_scalars_and_new_weights(name):
    """A changed clamp_limit / routed_scaling_factor (kernel arguments, fixed in a graph) and weights at
    other addresses each take their own graph: results stay those of the reference."""
    s = SHAPES[name]
    p, kw, raw = inputs(name, 1, seed=3, packed=False)
    for kw2 in (kw, dict(kw, clamp_limit=0.5), dict(kw, routed_scaling_factor=0.25)):
        ref = reference_mxfp4_moe(**raw, **kw2)
        for _ in range(3):
            assert rel(grouped_mxfp4_moe(**p, **kw2, deterministic=True), ref) <= 1e-2
    other = make_problem(1, s["E"], s["H"], s["I"], s["topk"], device="cuda", seed=12)
    p2 = dict(p, **{k: other[k] for k in ("w13_packed", "w2_packed", "w13_scale", "w2_scale")})
    ref2 = reference_mxfp4_moe(**dict(raw, **{k: other[k] for k in ("w13_packed", "w2_packed", "w13_scale",
                                                                       "w2_scale")}), **kw)
    for _ in range(3):
        assert rel(grouped_mxfp4_moe(**p2, **kw, deterministic=True), ref2) <= 1e-2
        assert rel(grouped_mxfp4_moe(**p, **kw, deterministic=True), reference_mxfp4_moe(**raw, **kw)) <= 1e-2


@pytest.mark.parametrize("packed", [False, True], ids=["raw", "prepacked"])
def test_caller_capture_after_eager_graphs(packed):
    """Eager graphs exist for the shape; a caller then captures the wrapper in its own graph (the
    launches are recorded there, not the eager graph) and replays it with new routing: equal to eager."""
    name, M = "gptoss", 2
    p, kw, _ = inputs(name, M, seed=21, packed=packed)
    for _ in range(3):
        grouped_mxfp4_moe(**p, **kw, deterministic=True)
    static = dict(p)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        grouped_mxfp4_moe(**static, **kw, deterministic=True)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = grouped_mxfp4_moe(**static, **kw, deterministic=True)
    for trial in range(3):
        q, _, raw = inputs(name, M, seed=40 + trial, packed=packed, invalid_frac=0.1 * trial)
        for k in ("hidden_states", "topk_ids", "topk_weights"):
            static[k].copy_(q[k])
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, grouped_mxfp4_moe(**static, **kw, deterministic=True))
        assert rel(out, reference_mxfp4_moe(**raw, **kw)) <= 1e-2
