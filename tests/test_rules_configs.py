"""missing-device-config on real SGLang trees and on the rule's own examples."""

from __future__ import annotations

import pytest

from recon import tunedconfigs as tc
from recon.profiles import load_device, load_model
from recon.rules import get_rule
from recon.scan import run_rules

FP8 = "N={N},K={K},device_name={device_name},dtype=fp8_w8a8,block_shape=[{block_n}, {block_k}].json"
MOE = "E={E},N={N},device_name={device_name}{dtype_selector}{block_shape_selector}{per_channel_quant_selector}{down_moe_selector}.json"


def test_template_render_and_parse():
    name = tc.render(FP8, dict(N=4096, K=512, device_name="NVIDIA_H200", block_n=128, block_k=128))
    assert name == "N=4096,K=512,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    assert tc.matcher(FP8).match(name)
    assert tc.parse_name(name) == {"down": False, "N": 4096, "K": 512, "device_name": "NVIDIA_H200", "dtype": "fp8_w8a8", "block_shape": [128, 128]}
    assert tc.render(MOE, dict(E=128, N=768, device_name="X", dtype=None, block_shape=None)) == "E=128,N=768,device_name=X.json"
    assert tc.render(FP8, dict(N=1)) is None
    assert tc.literal_value(FP8, "dtype") == "fp8_w8a8"


def _scan(tree, device, model, flags=None):
    rule = get_rule("missing-device-config")
    res = run_rules(tree, load_device(device), load_model(model), [rule], server_flags=flags)
    assert not res.errors
    return res.findings


def _check_lines(tree, f):
    for e in f.evidence:
        assert e.snippet and e.snippet in tree.lines(e.path)[e.line - 1].strip()
    tpl, folder, *rest = f.evidence
    assert "device_name=" in tree.lines(tpl.path)[tpl.line - 1]
    assert '"configs"' in tree.lines(folder.path)[folder.line - 1]
    if rest:
        assert "BLOCK_SIZE_M" in tree.lines(rest[0].path)[rest[0].line - 1]


def test_fp8_block_configs_not_raised_where_another_backend_runs(tree_new):
    # 0.5.23 on sm_120: start-up sets the FP8 GEMM backend to CUTLASS, whose JIT GEMM reads no
    # Triton config for these shapes (recon kernels' map says what runs)
    found = _scan(tree_new, "rtx-pro-6000-server", "dsv4-flash")
    assert not [f for f in found if f.data["kind"] == "gemm"], [f.message for f in found]


@pytest.mark.parametrize("which", ["tree_0513", "tree_new"])
def test_fp8_block_configs_missing_for_rtx_pro(which, request):
    tree = request.getfixturevalue(which)
    # on the newest release the Triton GEMM runs only when asked for (--fp8-gemm-backend triton)
    found = _scan(tree, "rtx-pro-6000-server", "dsv4-flash", None if which == "tree_0513" else {"fp8_gemm_runner_backend": "triton"})
    gemm = [f for f in found if f.data["kind"] == "gemm"]
    assert len(gemm) == 1, [f.message for f in found]
    f = gemm[0]
    assert f.data["runs"]["backend"] == "triton_w8a8_block_fp8_linear" and f.message.startswith("Dense FP8 GEMMs run triton_w8a8_block_fp8_linear")
    _check_lines(tree, f)
    d = f.data
    assert d["template_at"].endswith(f"fp8_kernel.py:{f.evidence[0].line}")
    assert d["device_files"] == 0 and "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition" not in d["existing_devices"]
    assert d["existing_devices"]["NVIDIA_H200"] >= 10 and d["existing_devices"]["NVIDIA_B200"] >= 10
    assert len(d["missing"]) == len(load_model("dsv4-flash").dense_gemm_shapes) and not d["present"]
    assert d["default"] == {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3}
    assert d["default_sources"]["BLOCK_SIZE_N"].startswith("block_size")
    assert "--N 4096 --K 512" not in " ".join(d["commands"])  # 4096x512 is not a V4-Flash shape
    assert "python benchmark/kernels/quantization/tuning_block_wise_kernel.py --N 1024 --K 4096 --input-type fp8 --out-dtype bfloat16 --block-n 128 --block-k 128" in d["commands"]
    assert d["tuning_script_in_tree"] is False and "github.com/sgl-project/sglang" in d["tuning_script"]
    # the MXFP4 experts do not run through the fused-MoE Triton kernel: no MoE config finding
    assert not [f for f in found if f.data["kind"] == "moe"]


@pytest.mark.parametrize("which", ["tree_0513", "tree_new"])
def test_h200_has_some_shapes(which, request):
    tree = request.getfixturevalue(which)
    # DeepGEMM runs the dense FP8 GEMMs on the H200 by default: the Triton configs are read with
    # --fp8-gemm-backend triton
    assert not [f for f in _scan(tree, "h200", "dsv3") if f.data["kind"] == "gemm"]
    found = _scan(tree, "h200", "dsv3", {"fp8_gemm_runner_backend": "triton"})
    gemm = next(f for f in found if f.data["kind"] == "gemm")
    d = gemm.data
    assert d["present"] and d["missing"]  # H200 has tuned files for some DeepSeek-V3 shapes, not all
    assert {(p["N"], p["K"]) for p in d["present"]} >= {(1536, 7168), (576, 7168), (7168, 16384)}
    assert all("NVIDIA_H200" in p["file"] for p in d["present"])
    assert d["device_files"] > 0
    _check_lines(tree, gemm)
    moe = [f for f in found if f.data["kind"] == "moe"]
    for f in moe:  # fp8 experts do run through the fused MoE Triton kernel
        _check_lines(tree, f)
        assert f.data["missing"][0]["E"] == 256


def test_all_present_gives_nothing(synthetic):
    ex = get_rule("missing-device-config").examples["positive"][0]
    name = "sglang/srt/layers/quantization/configs/{}"
    model = load_model("dsv4-flash")
    files = dict(ex.files)
    for n, k in model.dense_gemm_shapes:
        files[name.format(tc.render(FP8, dict(N=n, K=k, device_name="NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition", block_n=128, block_k=128)))] = "{}"
    tree = synthetic(files)
    assert _scan(tree, "rtx-pro-6000-server", "dsv4-flash") == []
