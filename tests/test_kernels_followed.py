"""``recon kernels`` follows the newer dispatch mechanisms down to the op, on real wheels: an op's
dispatch resolved on its first call (``BaseFusedOp``), a kernel function wrapped by an outside
callable (``torch.compiler.disable``), the lm_head GEMM through the logits processor; launch
counts treat exclusive branches as one launch; the attention roofline reads the KV cache."""

import pytest

from recon.checks import CheckContext
from recon.kernels.kmap import _launches, attention_roofline, build_map, map_for
from recon.profiles import load_device, load_model


def _layer(m, kind):
    return next(lay for lay in m["layers"] if lay["kind"] == kind)


def _names(lay):
    return {o["name"].rsplit(".", 1)[-1] for o in lay["ops"]}


@pytest.fixture(scope="module")
def gptoss_new(tree_new):
    return build_map(CheckContext(tree_new, load_device("rtx-pro-6000"), load_model("gpt-oss-120b")))


def test_norm_dispatch_resolved_on_first_call_reaches_the_cuda_kernel(gptoss_new):
    norm = _layer(gptoss_new, "norm")
    # not forward_native (what the torch.compile mode switch writes): the resolver's platform pick
    assert any(s["attr"] == "_forward_method" and "RMSNorm.forward_cuda" in s["value"] for s in norm["switches"])
    assert _names(norm) == {"rmsnorm"}
    assert norm["ops"][0]["name"].startswith("sgl_kernel.")
    assert norm["per_step"]["launches"] == 2 * 36 + 1


def test_gpt_oss_attention_runs_the_grouped_triton_decode_kernels(gptoss_new):
    att = _layer(gptoss_new, "attention")
    assert att["backend_name"]["value"] == "triton"
    # the two decode kernels every layer, and the split-count kernel the backend's metadata launches
    assert _names(att) == {"_fwd_grouped_kernel_stage1", "_fwd_kernel_stage2", "get_num_kv_splits_triton"}
    assert [o.get("metadata", False) for o in att["ops"] if o["name"].endswith("get_num_kv_splits_triton")] == [True]
    # reached through the attribute that holds the function torch.compiler.disable wrapped
    assert any("wrapped by torch.compiler.disable" in h["what"] for o in att["ops"] for h in o["via"])
    assert att["per_step"]["launches"] == 2 * 36 + 1  # the metadata once a step, not once a layer


def test_logits_reach_the_lm_head_gemm_and_no_host_library(gptoss_new):
    logits = _layer(gptoss_new, "logits")
    assert [o["name"] for o in logits["ops"]] == ["torch.matmul"]
    assert not any(lf["name"].startswith("pynvml.") for lay in gptoss_new["layers"] for lf in lay.get("leaves", []))


def test_attention_roofline_reads_the_kv_cache(tree_new):
    model, dev = load_model("gpt-oss-120b"), load_device("h200")
    r = attention_roofline(model, dev, 1, 4096)
    # 18 full layers x 4096 tokens + 18 window layers x 128 tokens, 2048 B each
    assert r["bytes"] == (18 * 4096 + 18 * 128) * 2048
    assert attention_roofline(model, dev, 8, 4096)["bytes"] == 8 * r["bytes"]
    assert attention_roofline(model, dev, 1, 64)["bytes"] == 36 * 64 * 2048  # context inside the window
    ctx = CheckContext(tree_new, dev, model)
    assert _layer(map_for(ctx, None, 1024), "attention")["roofline"][0]["context"] == 1024
    # a profile without KV bytes says so instead of a number
    dsv4 = attention_roofline(load_model("dsv4"), dev, 1, 4096)
    assert dsv4["bytes"] is None and "not modelled" in dsv4["basis"]


def test_exclusive_branches_launch_once():
    a = {"when": ["x > 1"]}
    b = {"when": ["not (x > 1)"]}
    c = {"when": ["not (x > 1)", "y"]}
    d = {"when": []}
    assert _launches([a, b]) == 1
    assert _launches([a, c]) == 1  # c's conditions include the negation of a's
    assert _launches([a, b, d]) == 2
    assert _launches([d, dict(d)]) == 2  # two sites on one path are two launches
