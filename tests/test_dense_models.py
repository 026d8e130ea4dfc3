"""Dense models (no routed experts) on real SGLang wheels: the kernel map names the attention
kernel and the dense GEMM's quant method and op, with no MoE layer; `recon runtime` prints the
resolved arguments and exits 1 (no MoE layer); the spec and scan work without a MoE section.

The configs: Llama-3.1-8B's config.json (bench/oracle/models), the same with a per-tensor FP8
quantization_config (quant_method fp8, no weight_block_size: SGLang's per-tensor FP8), and
Qwen3-8B-FP8's (public model card: 36 layers, hidden 4096, intermediate 12288, 32 query and 8 KV
heads of 128; block FP8 [128, 128], e4m3, dynamic activations).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recon.kernels.budget import step_budget
from recon.profiles import load_device, load_model
from scenarios import kernel_map

ROOT = Path(__file__).resolve().parent.parent
LLAMA = ROOT / "bench/oracle/models/llama-3.1-8b/config.json"
QWEN3_8B_FP8 = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 12288, "max_position_embeddings": 40960, "num_attention_heads": 32, "num_hidden_layers": 36,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 151936,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]},
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("dense")
    out = {"bf16": str(LLAMA)}
    for name, cfg in (("fp8-block", QWEN3_8B_FP8),
                      ("fp8-tensor", {**json.loads(LLAMA.read_text()), "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}})):
        (d / name).mkdir()
        (d / name / "config.json").write_text(json.dumps(cfg))
        out[name] = str(d / name)
    return out


def _layer(m: dict, kind: str) -> dict:
    return next(lay for lay in m["layers"] if lay["kind"] == kind)


def _via(op: dict) -> str:
    return " ".join(h["what"] for h in op.get("via", []))


@pytest.mark.parametrize("which", ["tree_new", "tree_old"])
def test_dense_kernel_map_on_real_wheels(request, models, which):
    tree = request.getfixturevalue(which)
    for kind, path in models.items():
        m = kernel_map(tree, "h200", path)
        budget = step_budget(m, load_model(path), load_device("h200"))  # as kernel_map_of adds it
        kinds = [lay["kind"] for lay in m["layers"]]
        assert "moe" not in kinds and "attention" in kinds and "dense_gemm" in kinds, (kind, kinds)
        assert all(r["kind"] != "moe" for r in budget["rows"])
        # attention: SGLang's own resolution picks fa3 on H200 for these releases (bench/oracle: the
        # llama cells agree); the registry builds FlashAttentionBackend, whose decode calls FA3
        att = _layer(m, "attention")
        assert att["backend_name"]["value"] == "fa3" and att["backend_class"].endswith(".FlashAttentionBackend"), att.get("backend_class")
        assert any("flash_attn_with_kvcache" in o["name"] for o in att["ops"]), [o["name"] for o in att["ops"]]
        assert all(o["path"] and o["line"] for o in att["ops"])
        dg = _layer(m, "dense_gemm")
        assert dg["ops"] and all(o["path"] and o["line"] for o in dg["ops"])
        if kind == "bf16":
            # no quant config: the method LinearBase builds itself when quant_config is None
            assert dg["quant_method"] is None and dg["method"].endswith(".UnquantizedLinearMethod")
            assert dg["method_returned_at"]["path"].endswith("layers/linear.py")
            assert [o["name"] for o in dg["ops"]] == ["torch.nn.functional.linear"]
        else:
            # fp8 in the registry -> Fp8Config.get_quant_method for a LinearBase layer -> Fp8LinearMethod
            assert dg["quant_method"] == "fp8" and dg["config_class"].endswith(".Fp8Config")
            assert dg["method"].endswith(".Fp8LinearMethod")
            sw = {s["attr"]: s["value"] for s in dg.get("switches", [])}
            if kind == "fp8-block":
                assert sw.get("block_quant") in ("True", None) and "w8a8_block_fp8" in " ".join(_via(o) for o in dg["ops"])
            else:  # per-tensor: the apply_fp8_linear path, never the block GEMM
                assert sw.get("block_quant") != "True"
                assert all("w8a8_block_fp8" not in _via(o) for o in dg["ops"]) and any("apply_fp8_linear" in _via(o) for o in dg["ops"])
        floor = budget["total"]["1"]["floor_us"]
        assert floor > 0 and any(r["kind"] == "dense_gemm" and r["points"][0]["floor_us"] for r in budget["rows"])


def _recon(*args, timeout=1800):
    return subprocess.run([sys.executable, "-m", "recon", *args], capture_output=True, text=True, timeout=timeout)


def test_runtime_of_a_dense_model_prints_the_arguments_and_exits_1(tree_new):
    r = _recon("runtime", "--sglang", tree_new.target.version, "--device", "h200", "--model", str(LLAMA))
    assert r.returncode == 1, r.stderr
    assert "attention_backend = 'fa3'" in r.stdout and "MoE layer: none" in r.stdout and "dense model" in r.stdout
    assert "no MoE layer" in r.stderr and "MoE quant method:" not in r.stdout
    j = _recon("runtime", "--sglang", tree_new.target.version, "--device", "h200", "--model", str(LLAMA), "--format", "json")
    data = json.loads(j.stdout)
    assert j.returncode == 1 and data["moe"] == {} and "dense model" in data["no_moe"] and data["server_args"]["attention_backend"]["value"] == "'fa3'"


def test_spec_and_scan_of_a_dense_model(tree_new, tmp_path):
    out = tmp_path / "spec.md"
    r = _recon("spec", "--sglang", tree_new.target.version, "--device", "h200", "--model", str(LLAMA), "-o", str(out))
    assert r.returncode == 0, r.stderr
    md = out.read_text()
    assert "## 2. The dense decode path on this device" in md and "MoE decode path" not in md
    assert "What a tuned kernel needs" not in md and "Swap-in point" not in md and "experts touched" not in md
    assert "| MoE | none:" in md and "flash_attn_with_kvcache" in md and "UnquantizedLinearMethod" in md
    assert "sglang/srt/layers/linear.py:" in md  # the dense GEMM's method with its file:line
    j = _recon("spec", "--sglang", tree_new.target.version, "--device", "h200", "--model", str(LLAMA), "--format", "json")
    ctx = json.loads(j.stdout)
    assert ctx["dense"] is True and "moe_path" not in ctx and "roofline" not in ctx
    assert [l["kind"] for l in ctx["layers"]][:3] == ["attention", "attention_module", "dense_gemm"]
    s = _recon("scan", "--sglang", tree_new.target.version, "--device", "h200", "--model", str(LLAMA), "--format", "json")
    assert s.returncode == 0, s.stderr
    findings = json.loads(s.stdout)["findings"]
    assert findings and all(f["evidence"] and f["evidence"][0]["path"] and f["evidence"][0]["line"] for f in findings)
    # no MoE size of a dense model is bound into a finding (it has none: never "E = 0")
    assert not any("(num_experts)" in f["message"] for f in findings)
