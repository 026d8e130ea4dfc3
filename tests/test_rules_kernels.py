"""Kernel rules (CUDA-core reductions, inner-loop dequant, low occupancy, eager epilogues,
per-call weight conversions): their YAML examples on synthetic trees, and the facts they must show
on real SGLang 0.5.13.post1 and 0.5.23, with every cited line re-read."""

from __future__ import annotations

import copy

import pytest

from recon.checks import CheckContext, registry
from recon.profiles import load_device, load_model
from recon.rules import load_rules

MINE = ["triton-cuda-core-reduction", "triton-inner-loop-dequant", "low-occupancy-launch", "eager-epilogue", "per-call-weight-conversion"]
SLOT = "sglang/srt/layers/moe/fused_moe_triton/mxfp4_moe_sm120_triton.py"


@pytest.fixture(scope="module")
def rules():
    rs = {r.id: r for r in load_rules()}
    return {i: rs[i] for i in MINE}


@pytest.fixture(scope="module")
def device():
    return load_device("NVIDIA RTX PRO 6000 Blackwell Server Edition")


@pytest.fixture(scope="module")
def model():
    m = copy.copy(load_model("DeepSeek-V4-Flash"))
    if getattr(m, "num_attention_heads", None) is None:
        m.num_attention_heads = 64  # DeepSeek-V4-Flash: 64 heads (the seed: 1 batch x 64 heads)
    return m


def run(tree, device, model, rule):
    return registry()[rule.check](CheckContext(tree, device, model), rule)


def assert_lines_hold(tree, findings):
    """Every cited line exists and holds the snippet the finding shows."""
    for f in findings:
        assert f.evidence, f.message
        for e in f.evidence:
            lines = tree.lines(e.path)
            assert 1 <= e.line <= len(lines), (e.path, e.line)
            if e.snippet:
                assert e.snippet.splitlines()[0] == lines[e.line - 1].strip()


def test_helper_in_another_file_is_followed(rules, device, model, synthetic):
    """The decode helper imported from another module is found through the graph's call edge."""
    tree = synthetic(
        {
            "sglang/srt/fp4.py": "import triton\nimport triton.language as tl\n\n@triton.jit\ndef dec(n):\n    e = (n >> 1) & 3\n    return tl.math.exp2(e.to(tl.float32))\n",
            "sglang/srt/k.py": (
                "import triton\nimport triton.language as tl\nfrom sglang.srt.fp4 import dec\n\n@triton.jit\n"
                "def k(B, C, K, BLOCK: tl.constexpr):\n    acc = tl.zeros([BLOCK], dtype=tl.float32)\n"
                "    for i in range(0, K, BLOCK):\n        p = tl.load(B + i + tl.arange(0, BLOCK))\n"
                "        acc += dec(p & 0x0F)\n    tl.store(C + tl.arange(0, BLOCK), acc)\n"
            ),
        }
    )
    out = run(tree, device, model, rules["triton-inner-loop-dequant"])
    assert len(out) == 1
    assert any(e.path == "sglang/srt/fp4.py" and "exp2" in e.snippet for e in out[0].evidence)


def test_unresolved_grid_is_not_judged(rules, device, synthetic):
    """Without the model's head count the grid (B, H) is a note naming what is missing, not a warning."""
    m = copy.copy(load_model("DeepSeek-V4-Flash"))
    m.num_attention_heads = None
    code = (
        "import triton\nimport triton.language as tl\n\n@triton.jit\ndef attn(Q, O, T, BLOCK: tl.constexpr):\n"
        "    acc = tl.zeros([BLOCK], dtype=tl.float32)\n    for t in range(0, T, BLOCK):\n        acc += tl.load(Q + t + tl.arange(0, BLOCK))\n"
        "    tl.store(O + tl.arange(0, BLOCK), acc)\n\ndef run(q, o):\n    B, _, H, D = q.shape\n    grid = (B, H)\n    attn[grid](q, o, 512, BLOCK=16)\n"
    )
    out = run(synthetic({"sglang/srt/example.py": code}), device, m, rules["low-occupancy-launch"])
    assert [f.severity for f in out] == ["note"]
    assert out[0].data["missing"] == {"H": "num_attention_heads"} and out[0].data["judged"] is False


# ── real SGLang 0.5.13.post1 (the seed) ──


def test_0513_slot_kernel_reduction(tree_0513, rules, device, model):
    out = run(tree_0513, device, model, rules["triton-cuda-core-reduction"])
    slot = [f for f in out if f.data["kernel"] == "_mxfp4_slot_gemv_kernel"]
    assert len(slot) == 1
    f = slot[0]
    lines = tree_0513.lines(SLOT)
    sums = [e for e in f.evidence if "tl.sum" in e.note]
    assert [lines[e.line - 1].strip() for e in sums] == [
        "acc += tl.sum(a_even[None, :] * val_lo, axis=1)",
        "acc += tl.sum(a_odd[None, :] * val_hi, axis=1)",
    ]
    assert all(e.path == SLOT for e in sums)
    tiles = f.data["tiles"]
    assert tiles["ranges"]["BLOCK_N"] == [32, 128] and tiles["ranges"]["BLOCK_K"] == [64, 128]
    assert len(tiles["configs"]) == 4 and tiles["ranges"]["num_warps"] == [4, 8]
    assert f.data["shape"]["one_row_per_program"] and f.data["shape"]["accumulator_shape"] == ["BLOCK_N"]
    assert f.data["shape"]["single_row_program_ids"][0]["name"] == "slot_id"
    # the legacy GEMM kernel in the same file uses tl.dot: not reported
    assert not any(f.data["kernel"] == "_mxfp4_gemm_kernel" for f in out)
    assert_lines_hold(tree_0513, out)


def test_0513_slot_kernel_dequant(tree_0513, rules, device, model):
    out = run(tree_0513, device, model, rules["triton-inner-loop-dequant"])
    f = next(f for f in out if f.data["kernel"] == "_mxfp4_slot_gemv_kernel")
    lines = tree_0513.lines(SLOT)
    unpack = [lines[l - 1] for l in f.data["unpack_lines"]]
    assert any("& 0x0F" in l for l in unpack) and any(">> 4" in l for l in unpack)
    h = f.data["helpers"][0]
    assert h["name"] == "_dequant_fp4_lut" and "exp2" in h["decode_functions"]
    assert any("exp2" in lines[l - 1] for l in h["decode_lines"])
    assert_lines_hold(tree_0513, out)


def test_0513_tiled_sparse_decode_grid(tree_0513, rules, device, model):
    out = run(tree_0513, device, model, rules["low-occupancy-launch"])
    f = next(f for f in out if f.data["kernel_name"] == "_tiled_sparse_decode_kernel")
    launch = f.evidence[0]
    assert "_tiled_sparse_decode_kernel[grid" in tree_0513.lines(launch.path)[launch.line - 1]
    first = f.data["per_batch"][0]
    assert first["M"] == 1 and first["programs"] == [64, 64] and first["programs"][1] < device.sm_count
    assert f.data["symbols"]["H"]["value"] == 64 and f.data["symbols"]["B"]["from"] == "M"
    assert f.data["low_up_to_batch"] == 2  # 128 programs at batch 2, 256 >= 188 at batch 4
    # the slot GEMV grid is large enough at decode: not reported
    assert not any(x.data["kernel_name"] == "_mxfp4_slot_gemv_kernel" for x in out)
    assert_lines_hold(tree_0513, out)


def test_0513_eager_epilogue(tree_0513, rules, device, model):
    out = run(tree_0513, device, model, rules["eager-epilogue"])
    f = next(f for f in out if f.data["function"] == "mxfp4_moe_forward_triton")
    lines = tree_0513.lines(SLOT)
    cited = " ".join(lines[e.line - 1] for e in f.evidence)
    for op in ("F.silu(", "torch.clamp(", ".sum(dim=1)", "_mxfp4_slot_gemv_kernel[grid1]", "_mxfp4_slot_gemv_kernel[grid2]"):
        assert op in cited
    # gate = intermediate[:, :I].float(): [8, 2048] bf16 read + fp32 written at batch 1
    first = next(o for o in f.data["ops"] if ".float()" in o["ops"])
    assert first["bytes"][1] == 8 * 2048 * (2 + 4)
    assert f.data["per_batch"][-1]["bytes"] > 32 * f.data["per_batch"][0]["bytes"]
    assert_lines_hold(tree_0513, out)


def test_0513_scale_conversion_every_call(tree_0513, rules, device, model):
    out = run(tree_0513, device, model, rules["per-call-weight-conversion"])
    by = {f.data["tensor"]: f for f in out if f.data["function"] == "mxfp4_moe_forward_triton"}
    assert set(by) == {"w13_scale", "w2_scale"}
    f = by["w13_scale"]
    lines = tree_0513.lines(SLOT)
    assert ".to(torch.float32)" in lines[f.evidence[0].line - 1] and "w13_scale" in lines[f.evidence[0].line - 1]
    assert "w13_scale.dtype != torch.float32" in lines[f.evidence[1].line - 1]
    assert f.data["shape"] == [256, 4096, 128] and f.data["stored_bytes"] == 1 and f.data["target_bytes"] == 4
    assert f.data["bytes_per_call"] == 256 * 4096 * 128 * 5
    # the benchmarking-only mxfp4_gemm_triton also converts B_scale, but is no forward path
    assert not any(x.data["function"] == "mxfp4_gemm_triton" for x in out)
    assert_lines_hold(tree_0513, out)


# ── real SGLang 0.5.23 (newest; the slot kernel file is gone) ──


def test_new_no_stale_slot_facts(tree_new, rules, device, model):
    assert not tree_new.target.source.exists(SLOT)
    for rid in MINE:
        out = run(tree_new, device, model, rules[rid])
        assert not any(e.path == SLOT for f in out for e in f.evidence), rid
        assert not any(f.data.get("kernel") == "_mxfp4_slot_gemv_kernel" or f.data.get("function") == "mxfp4_moe_forward_triton" for f in out), rid
        assert_lines_hold(tree_new, out)


def test_new_tiled_sparse_decode_moved_and_still_low(tree_new, rules, device, model):
    out = run(tree_new, device, model, rules["low-occupancy-launch"])
    f = next(f for f in out if f.data["kernel_name"] == "_tiled_sparse_decode_kernel")
    assert f.evidence[0].path != "sglang/srt/layers/attention/flash_mla_sm120_triton.py"
    assert "_tiled_sparse_decode_kernel[grid" in tree_new.lines(f.evidence[0].path)[f.evidence[0].line - 1]
    assert f.data["per_batch"][0]["programs"] == [64, 64]


def test_new_reductions_cite_tl_sum(tree_new, rules, device, model):
    out = run(tree_new, device, model, rules["triton-cuda-core-reduction"])
    assert any(f.data["kernel"] == "_tiled_sparse_decode_kernel" for f in out)
    for f in out:
        for e in f.evidence:
            if "tl.sum" in e.note:
                assert "tl.sum(" in tree_new.lines(e.path)[e.line - 1]


def test_new_epilogue_real(tree_new, rules, device, model):
    out = run(tree_new, device, model, rules["eager-epilogue"])
    assert out
    for f in out:
        assert f.data["kernel_sites"]
        cited = [tree_new.lines(e.path)[e.line - 1] for e in f.evidence if e.note.startswith("eager op")]
        assert cited and all(any(tok in c for tok in ("*", "+", "/", "-", ".", "(")) for c in cited)


NOT_GEMV = '''import triton
import triton.language as tl


@triton.jit
def norm_kernel(X, Y, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    sum_sq = tl.zeros((), dtype=tl.float32)
    for k in range(0, N, BLOCK):
        x = tl.load(X + row * N + k + offs)
        sum_sq += tl.sum(x * x, axis=0)
    tl.store(Y + row, sum_sq)


@triton.jit
def pick_kernel(L, Y, E: tl.constexpr, K: tl.constexpr):
    row = tl.program_id(0)
    logits = tl.load(L + row * E + tl.arange(0, E))
    for i in range(0, K):
        top = tl.argmax(logits, axis=0)
        v = tl.sum(logits * (tl.arange(0, E) == top), axis=0)
        tl.store(Y + row * K + i, v)


@triton.jit
def pool_kernel(KV, S, Y, T, D: tl.constexpr, BLOCK_T: tl.constexpr):
    row = tl.program_id(0)
    d = tl.arange(0, D)
    acc = tl.zeros([D], dtype=tl.float32)
    for t in range(0, T, BLOCK_T):
        ts = t + tl.arange(0, BLOCK_T)
        kv = tl.load(KV + ts[:, None] * D + d[None, :])
        w = tl.exp(tl.load(S + ts[:, None] * D + d[None, :]))
        acc += tl.sum(kv * w, axis=0)
    tl.store(Y + row * D + d, acc)


@triton.jit
def gemv_kernel(W, X, Y, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    offs_n = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        offs_k = k + tl.arange(0, BLOCK_K)
        x = tl.load(X + row * K + offs_k)
        w = tl.load(W + offs_n[:, None] * K + offs_k[None, :])
        acc += tl.sum(w * x[None, :].to(tl.float32), axis=1)
    tl.store(Y + row * N + offs_n, acc)
'''


def test_only_contractions_are_tensor_core_work(rules, device, model, synthetic):
    """A sum of squares (a norm), a product with a mask (a one-hot pick) and two whole tiles
    multiplied element by element (a weighted pooling) are reductions no tensor core runs: only
    the hand-written matrix-vector product (a vector spread over the tile) is reported."""
    from recon.checks.kernels import is_contraction

    tree = synthetic({"sglang/srt/layers/k.py": NOT_GEMV})
    out = run(tree, device, model, rules["triton-cuda-core-reduction"])
    assert [f.data["kernel"] for f in out] == ["gemv_kernel"]
    assert not is_contraction("tl.sum(x * x, axis=0)") and is_contraction("tl.sum(a[None, :] * b, axis=1)")


def test_new_norms_and_picks_are_not_reported(tree_new, rules, device, model):
    """0.5.23: the group norm's sum of squares and the router's one-hot pick are not reported; the
    FlashMLA sm_120 decode's QK GEMV is."""
    out = run(tree_new, device, model, rules["triton-cuda-core-reduction"])
    names = {f.data["kernel"] for f in out}
    assert "_tiled_sparse_decode_kernel" in names
    assert not names & {"_group_norm_silu_contiguous_kernel", "_group_norm_stats_kernel"}
    assert not any("== topi" in e for f in out for e in f.data["sum_exprs"])


EXCLUSIVE = '''import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def act_kernel(A, C, N, BLOCK: tl.constexpr):
    tl.store(C + tl.arange(0, BLOCK), tl.load(A + tl.arange(0, BLOCK)))


def {name}(hidden_states, fused, intermediate_size):
    M, K = hidden_states.shape
    I = intermediate_size
    out = torch.empty(M, 2 * I, dtype=hidden_states.dtype, device=hidden_states.device)
    res = torch.empty(M, I, dtype=hidden_states.dtype, device=hidden_states.device)
    if fused:
        act_kernel[(M,)](out, res, 2 * I, BLOCK=128)
    else:
        gate = out[:, :I].float()
        up = out[:, I:].float()
        res = (F.silu(gate) * up).to(hidden_states.dtype)
{tail}    return res
'''


def test_ops_in_the_other_branch_of_the_launch_are_no_epilogue(rules, device, model, synthetic):
    """Eager ops in the `else` of the `if` whose body launches the kernel run instead of it, not
    after it (0.5.21 `_run_contiguous_gemm`: the SiTU fallback beside the fused SiTU kernel): no
    epilogue. The same ops after the `if` are one."""
    from recon.checks.epilogue import exclusive

    tree = synthetic({
        "sglang/srt/layers/a.py": EXCLUSIVE.format(name="fallback", tail=""),
        "sglang/srt/layers/b.py": EXCLUSIVE.format(name="after", tail="    res = (F.silu(res.float()) * res.float()).to(res.dtype)\n"),
    })
    out = run(tree, device, model, rules["eager-epilogue"])
    assert [f.data["function"] for f in out] == ["after"]
    ifs = [{"line": 17, "body_end": 18, "end_line": 22}]
    assert exclusive(ifs, 20, 18) and not exclusive(ifs, 23, 18)
