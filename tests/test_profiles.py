"""Device and model profiles: lookup by name/alias/file, HF config.json, and errors that name things."""

from __future__ import annotations

import json

import pytest

from recon.errors import ReconError
from recon.profiles import list_devices, list_models, load_device, load_model

SM120_NAMES = [
    "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    "NVIDIA GeForce RTX 5090",
]


@pytest.mark.parametrize("name", SM120_NAMES)
def test_sm120_devices_by_exact_name(name):
    d = load_device(name)
    assert d.name == name
    assert d.compute_capability == (12, 0)
    assert d.vendor == "nvidia"
    assert set(d.block_scaled_formats) == {"mxfp4", "nvfp4", "mxfp8"}
    assert d.cuda_version >= (12, 8)


def test_seed_device_values_and_config_name():
    d = load_device("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    assert (d.sm_count, d.smem_per_block_bytes, d.mem_bandwidth_tbs) == (188, 101_376, 1.79)
    assert d.smem_per_block_kb == 99
    # SGLang's tuned config files spell the device with underscores.
    assert d.config_name == "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition"
    assert d.sm == "sm_120"
    assert d.bf16_tflops > 100


@pytest.mark.parametrize(
    "spec,name",
    [
        ("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
        ("pro6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
        ("nvidia rtx pro 6000 blackwell server edition", "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
        ("RTX PRO 6000 Blackwell Workstation Edition", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"),
        ("NVIDIA_H200", "NVIDIA H200"),
        ("h200", "NVIDIA H200"),
        ("b200", "NVIDIA B200"),
        ("h100", "NVIDIA H100 80GB HBM3"),
        ("a100", "NVIDIA A100-SXM4-80GB"),
        ("H20", "NVIDIA H20"),
        ("l40s", "NVIDIA L40S"),
        ("mi300x", "AMD Instinct MI300X"),
    ],
)
def test_device_aliases(spec, name):
    assert load_device(spec).name == name


def test_architecture_facts():
    assert load_device("b200").compute_capability == (10, 0)
    for hopper in ("h100", "h200", "h20"):
        d = load_device(hopper)
        assert d.compute_capability == (9, 0) and d.block_scaled_formats == [] and d.fp8
    assert load_device("a100").compute_capability == (8, 0) and not load_device("a100").fp8
    assert load_device("l40s").compute_capability == (8, 9)
    mi = load_device("mi300x")
    assert mi.vendor == "amd" and mi.cuda_version is None and mi.sm == "gfx942"


def test_every_shipped_device_has_unique_names():
    keys = []
    for d in list_devices():
        keys += [d.name.lower(), d.short.lower()] + [a.lower() for a in d.aliases]
    assert len(keys) == len(set(keys))
    assert len(list_devices()) >= 11


def test_unknown_device_names_the_known_ones():
    with pytest.raises(ReconError) as e:
        load_device("tesla-k80")
    msg = str(e.value)
    assert "tesla-k80" in msg and "rtx-pro-6000" in msg and "h200" in msg and "\n" not in msg


FEATURES_LINE = "features: {clusters: false, tma_scatter: false, tmem_tcgen05: false, wgmma: false, block_scaled_mma: true}\n"
GOOD = ("name: NVIDIA Test GPU\nvendor: nvidia\ncompute_capability: [12, 1]\nsm_count: 48\nsmem_per_block_bytes: 101376\n"
        "mem_bandwidth_tbs: 0.27\nblock_scaled_formats: [nvfp4]\ncuda_version: [13, 0]\nbf16_tflops: 100\n" + FEATURES_LINE)


# Exact per-block limits (CUDA's cudaDevAttrMaxSharedMemoryPerBlockOptin) by architecture, as the
# Hopper and Blackwell tuning guides give them: 227 KB on sm_90/sm_100/sm_103, 99 KB on sm_12x.
SMEM = {"sm_90": 232_448, "sm_100": 232_448, "sm_103": 232_448, "sm_120": 101_376, "sm_121": 101_376,
        "sm_89": 101_376, "sm_80": 166_912}


def test_every_nvidia_profile_has_exact_smem_and_every_feature():
    from recon.profiles import FEATURES
    for d in list_devices():
        if d.vendor != "nvidia":
            continue
        assert d.smem_per_block_bytes == SMEM[d.sm], d.short
        assert set(d.features) == set(FEATURES), d.short
    by = {d.short: d for d in list_devices()}
    # the families differ where kernels differ: tcgen05/TMEM only on datacenter Blackwell, wgmma only on Hopper
    assert [s for s in by if by[s].has("tmem_tcgen05")] == ["b200", "b300"]
    assert {s for s in by if by[s].has("wgmma")} == {"h100", "h20", "h200"}
    assert not by["gb10"].has("tma_scatter") and by["b200"].has("tma_scatter")


@pytest.mark.parametrize("spec,cc,arch", [("gb10", (12, 1), "sm_121"), ("dgx-spark", (12, 1), "sm_121"),
                                          ("b300", (10, 3), "sm_103"), ("gb300", (10, 3), "sm_103"),
                                          ("rtx-5090", (12, 0), "sm_120")])
def test_new_blackwell_profiles(spec, cc, arch):
    d = load_device(spec)
    assert (d.compute_capability, d.sm) == (cc, arch)


@pytest.mark.parametrize("drop,field", [("compute_capability", "compute_capability"),
                                        ("smem_per_block_bytes", "smem_per_block_bytes"),
                                        ("features", "features")])
def test_profile_without_capability_smem_or_features_is_refused(tmp_path, drop, field):
    p = tmp_path / "dev.yaml"
    p.write_text("".join(ln + "\n" for ln in GOOD.splitlines() if not ln.startswith(drop + ":")))
    with pytest.raises(ReconError, match=f"'{field}' is missing"):
        load_device(str(p))


def test_profile_missing_one_feature_or_disagreeing_kb_is_refused(tmp_path):
    p = tmp_path / "dev.yaml"
    p.write_text(GOOD.replace("wgmma: false, ", ""))
    with pytest.raises(ReconError, match=r"'features\.wgmma' is missing"):
        load_device(str(p))
    p.write_text(GOOD + "smem_per_block_kb: 227\n")
    with pytest.raises(ReconError, match="'smem_per_block_kb'.*disagrees"):
        load_device(str(p))


@pytest.mark.parametrize("drop", ["smem_per_block_bytes", "compute_capability"])
def test_profile_without_smem_exits_2_naming_the_field(tmp_path, drop):
    from typer.testing import CliRunner

    from recon.cli import app
    p = tmp_path / "dev.yaml"
    p.write_text("".join(ln + "\n" for ln in GOOD.splitlines() if not ln.startswith(drop + ":")))
    res = CliRunner().invoke(app, ["kernels", "--sglang", "0.5.23", "--device", str(p)])
    assert res.exit_code == 2 and drop in res.output, res.output


def test_device_profile_file(tmp_path):
    p = tmp_path / "my.yaml"
    p.write_text(
        "name: NVIDIA Test GPU\nvendor: nvidia\ncompute_capability: '12.1'\nsm_count: 48\n"
        "smem_per_block_bytes: 101376\nmem_bandwidth_tbs: 0.27\nblock_scaled_formats: [nvfp4]\n"
        "cuda_version: [13, 0]\nbf16_tflops: 100\n" + FEATURES_LINE
    )
    d = load_device(str(p))
    assert d.compute_capability == (12, 1) and d.cuda_version == (13, 0) and d.config_name == "NVIDIA_Test_GPU"
    j = tmp_path / "my.json"
    j.write_text(json.dumps({**d.to_dict(), "name": "NVIDIA JSON GPU"}))
    assert load_device(j).sm_count == 48


@pytest.mark.parametrize(
    "text,field",
    [
        ("vendor: nvidia\n", "name"),
        ("name: X\nvendor: nvidia\ncompute_capability: twelve\n", "compute_capability"),
        ("name: X\nvendor: nvidia\ncompute_capability: [12, 0]\nsm_count: lots\n", "sm_count"),
        (
            "name: X\nvendor: nvidia\ncompute_capability: [12, 0]\nsm_count: 1\nsmem_per_block_bytes: 1024\n"
            "mem_bandwidth_tbs: 1\nblock_scaled_formats: [fp3]\ncuda_version: [12, 8]\nbf16_tflops: 1\n",
            "block_scaled_formats",
        ),
    ],
)
def test_malformed_device_file_names_file_and_field(tmp_path, text, field):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ReconError) as e:
        load_device(str(p))
    assert str(p) in str(e.value) and f"'{field}'" in str(e.value)


def test_invalid_yaml_names_file(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(ReconError, match="broken.yaml"):
        load_device(str(p))


def test_seed_model():
    m = load_model("DeepSeek-V4-Flash")
    assert m.architectures == ["DeepseekV4ForCausalLM"]
    assert (m.num_experts, m.hidden_size, m.moe_intermediate_size, m.top_k) == (256, 4096, 2048, 8)
    assert (m.expert_quant, m.expert_group_size, m.expert_scale_dtype) == ("mxfp4", 32, "e8m0")
    assert m.dense_quant == "fp8" and m.dense_block_shape == [128, 128]
    assert [1024, 4096] in m.dense_gemm_shapes and [4096, 8192] in m.dense_gemm_shapes
    assert all(len(s) == 2 and s[1] % 128 == 0 for s in m.dense_gemm_shapes)
    assert m.decode_batches == [1, 2, 4, 8, 16, 32, 64]
    assert load_model("dsv4").name == "DeepSeek-V4-Flash"


def test_other_models():
    big, small = load_model("gpt-oss-120b"), load_model("gpt-oss-20b")
    assert big.architectures == small.architectures == ["GptOssForCausalLM"]
    assert (big.num_experts, small.num_experts, big.top_k, big.hidden_size) == (128, 32, 4, 2880)
    assert big.expert_quant == "mxfp4" and big.dense_quant == "bf16" and big.dense_gemm_shapes == []
    v3 = load_model("deepseek-v3")
    assert v3.architectures == ["DeepseekV3ForCausalLM"] and v3.expert_quant == "fp8" and v3.hidden_size == 7168
    assert [1536, 7168] in v3.dense_gemm_shapes
    q = load_model("Qwen3-30B-A3B")
    assert q.architectures == ["Qwen3MoeForCausalLM"] and (q.num_experts, q.moe_intermediate_size, q.expert_quant) == (128, 768, "bf16")
    assert len(list_models()) >= 5


def test_unknown_model_names_the_known_ones():
    with pytest.raises(ReconError) as e:
        load_model("llama-9000")
    assert "llama-9000" in str(e.value) and "DeepSeek-V4-Flash" in str(e.value)


def test_hf_config_json_mxfp4(tmp_path):
    cfg = {
        "architectures": ["GptOssForCausalLM"], "_name_or_path": "openai/gpt-oss-20b", "hidden_size": 2880,
        "intermediate_size": 2880, "num_local_experts": 32, "experts_per_token": 4, "num_hidden_layers": 24,
        "num_attention_heads": 64, "quantization_config": {"quant_method": "mxfp4"},
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = load_model(str(tmp_path / "config.json"))
    assert m.name == "gpt-oss-20b" and m.architectures == ["GptOssForCausalLM"]
    assert (m.num_experts, m.top_k, m.moe_intermediate_size) == (32, 4, 2880)
    assert (m.expert_quant, m.expert_group_size, m.expert_scale_dtype, m.dense_quant) == ("mxfp4", 32, "e8m0", "bf16")
    assert load_model(str(tmp_path)).num_experts == 32  # the folder holding config.json works too


def test_hf_config_json_fp8_block_mla(tmp_path):
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "moe_intermediate_size": 2048,
        "n_routed_experts": 256, "num_experts_per_tok": 8, "num_hidden_layers": 61, "first_k_dense_replace": 3,
        "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "n_shared_experts": 1,
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    }
    p = tmp_path / "ds" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(cfg))
    m = load_model(str(p))
    assert m.num_moe_layers == 58 and m.expert_quant == "fp8" and m.dense_block_shape == [128, 128]
    # The derived shapes match the shipped DeepSeek-V3 profile's attention and shared-expert shapes.
    assert [1536, 7168] in m.dense_gemm_shapes and [24576, 1536] in m.dense_gemm_shapes
    assert [32768, 512] in m.dense_gemm_shapes and [7168, 16384] in m.dense_gemm_shapes
    assert set(map(tuple, m.dense_gemm_shapes)) <= set(map(tuple, load_model("deepseek-v3").dense_gemm_shapes))


def test_hf_config_missing_field_names_file_and_field(tmp_path):
    p = tmp_path / "config.json"
    # experts named but no top-k: a MoE config missing a field it needs
    p.write_text(json.dumps({"architectures": ["X"], "hidden_size": 8, "num_hidden_layers": 1, "num_local_experts": 4, "intermediate_size": 8}))
    with pytest.raises(ReconError) as e:
        load_model(str(p))
    assert str(p) in str(e.value) and "num_experts_per_tok" in str(e.value)
    # no experts: a dense model, whose MLP width it must give
    p.write_text(json.dumps({"architectures": ["X"], "hidden_size": 8, "num_hidden_layers": 1}))
    with pytest.raises(ReconError, match="field 'intermediate_size' is missing"):
        load_model(str(p))


_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
          "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256}


def test_hf_config_without_experts_is_a_dense_model(tmp_path):
    p = tmp_path / "llama" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(_LLAMA))
    m = load_model(str(p))
    assert not m.is_moe and (m.num_experts, m.top_k, m.num_moe_layers, m.moe_intermediate_size) == (0, 0, 0, 0)
    assert m.expert_quant == "none" and m.dense_quant == "bf16" and m.dense_block_shape is None
    assert "dense model" in m.notes and "no MoE layer" in m.notes
    # every linear of a layer: qkv (32 + 2 x 8 heads of 128), o, gate_up, down; at bf16 too
    assert m.dense_gemm_shapes == [[6144, 4096], [4096, 4096], [28672, 4096], [4096, 14336]]
    # head_dim absent: SGLang's ModelConfig takes hidden_size // num_attention_heads (128): 8 KV heads x 128 x K,V x 2 B
    assert m.kv_cache["bytes_per_token_layer"] == 2 * 8 * 128 * 2
    assert m.to_dict()["moe"] is False
    fp8 = load_model_json(tmp_path, {**_LLAMA, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})
    assert (fp8.dense_quant, fp8.dense_block_shape, fp8.is_moe) == ("fp8", [128, 128], False)
    assert "linears quantized fp8" in fp8.notes


def load_model_json(tmp_path, cfg: dict):
    d = tmp_path / f"m{abs(hash(json.dumps(cfg, sort_keys=True)))}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return load_model(str(d))


def test_config_with_neither_experts_nor_hidden_size_exits_2_naming_the_field(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "intermediate_size": 64}))
    with pytest.raises(ReconError, match="field 'hidden_size' is missing"):
        load_model(str(p))
    import subprocess, sys
    r = subprocess.run([sys.executable, "-m", "recon", "runtime", "--model", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and "field 'hidden_size'" in " ".join(r.stderr.split()) and all(x.startswith("  ") for x in r.stderr.strip().splitlines()[1:]), r.stderr


def test_model_classes_exist_in_real_tree(tree_0513):
    """Each profile's architecture is a class the real SGLang tree defines (so the graph can follow it)."""
    for m in list_models():
        for arch in m.architectures:
            hits = [n for n, a in tree_0513.graph.nodes(data=True) if a.get("kind") == "class" and a.get("name") == arch]
            assert hits, f"{m.name}: no class {arch} in SGLang {tree_0513.target.version if hasattr(tree_0513, 'target') else ''}"


_GPT_OSS = {
    "architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "intermediate_size": 2880, "num_local_experts": 32,
    "experts_per_token": 4, "num_hidden_layers": 24, "quantization_config": {"quant_method": "mxfp4"},
}


@pytest.mark.parametrize("change, field", [
    ({"num_local_experts": 0}, "num_local_experts"),
    ({"experts_per_token": 33}, "experts_per_token"),
    ({"experts_per_token": 0}, "experts_per_token"),
    ({"hidden_size": -1}, "hidden_size"),
    ({"intermediate_size": 0}, "intermediate_size"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"first_k_dense_replace": 24}, "num_hidden_layers"),
])
def test_impossible_hf_config_exits_2_naming_the_field(tmp_path, change, field):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**_GPT_OSS, **change}))
    with pytest.raises(ReconError, match=f"field '{field}'"):
        load_model(str(p))
    import subprocess, sys
    r = subprocess.run([sys.executable, "-m", "recon", "spec", "--model", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and f"field '{field}'" in " ".join(r.stderr.split()) and all(x.startswith("  ") for x in r.stderr.strip().splitlines()[1:]), r.stderr


@pytest.mark.parametrize("key, value", [("num_experts", 0), ("top_k", 300), ("moe_intermediate_size", 0), ("num_moe_layers", 0)])
def test_impossible_model_profile_names_the_field(tmp_path, key, value):
    import yaml

    from recon.profiles import MODELS_DIR
    data = yaml.safe_load((MODELS_DIR / "deepseek-v4-flash.yaml").read_text())
    data[key] = value
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(ReconError, match=f"field '{key}'"):
        load_model(str(p))
