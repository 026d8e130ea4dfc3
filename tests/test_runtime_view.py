"""The runtime view on real SGLang wheels: what runs is decided by SGLang's own code (server-argument
rewrites, the quant-method registry, get_quant_method, branch tests), not by class names."""

import shutil

import pytest

from recon.checks import CheckContext
from recon.errors import ReconError
from recon.profiles import load_device, load_model
from recon.runtime import build, parse_env, parse_server_args
from tests import scenarios


def _view(tree, device, model="dsv4", flags=""):
    return scenarios.view(tree, device, model, flags)  # built once per scenario, shared read-only


def _short(q):
    return q.rsplit(".", 1)[-1] if q else q


@pytest.fixture(scope="module")
def seed_rtx(tree_0513):
    return _view(tree_0513, "rtx-pro-6000")


def test_seed_rtx_pro_6000_runs_marlin_method_and_the_slot_kernel(seed_rtx):
    sa = seed_rtx.server_args["moe_runner_backend"]
    # server_args.py rewrites "auto" to "marlin" under is_sm120_supported() for DeepseekV4
    assert sa["value"] == "'marlin'" and sa["path"].endswith("server_args.py") and "is_sm120_supported()" in sa["test"]
    assert _short(seed_rtx.moe["config_class"]) == "Fp8Config"
    assert _short(seed_rtx.moe_method) == "Mxfp4MarlinMoEMethod"
    kernels = {_short(lf["name"]) for lf in seed_rtx.primary_leaves()}
    assert kernels == {"_mxfp4_slot_gemv_kernel"}
    # the alternative get_quant_method outcome is said, with the test it depends on
    alts = seed_rtx.moe["outcomes"][1:]
    assert any(_short(o["method"]) == "UnquantizedFusedMoEMethod" and "is_layer_skipped" in o["assumptions"][0]["test"] for o in alts)
    # the environment default that makes the experts FP4 is named as an assumption
    assert any(n.startswith("SGLANG_DSV4_FP4_EXPERTS unset") for n in seed_rtx.notes)


def test_seed_h200_default_flags_give_the_plain_fp8_method(tree_0513):
    v = _view(tree_0513, "h200")
    assert v.server_args["moe_runner_backend"]["value"] == "'auto'"
    assert _short(v.moe_method) == "Fp8MoEMethod"
    assert "_mxfp4_slot_gemv_kernel" not in {_short(lf["name"]) for lf in v.moe["leaves"]}


def test_seed_h200_marlin_flag_gives_the_marlin_path(tree_0513):
    v = _view(tree_0513, "h200", flags="--moe-runner-backend marlin")
    assert v.server_args["moe_runner_backend"]["source"] == "--moe-runner-backend"
    assert _short(v.moe_method) == "Mxfp4MarlinMoEMethod"
    # on sm_90 the apply path does not take the sm_120 slot kernel branch; it ends at Marlin's JIT GEMM,
    # reached through the runner's fused-function registry
    leaves = {_short(lf["name"]): lf for lf in v.primary_leaves()}
    assert "_mxfp4_slot_gemv_kernel" not in leaves
    assert leaves["moe_wna16_marlin_gemm"]["kind"] == "jit_kernel"
    assert any("registered for ('none', 'marlin')" in h["what"] for h in leaves["moe_wna16_marlin_gemm"]["via"])


def test_query_launches_answers_for_what_runs(tree_0513):
    from recon.runtime.query import launches_on_path

    v = _view(tree_0513, "h200", flags="--moe-runner-backend marlin")
    rows = launches_on_path(tree_0513.graph, v, "Mxfp4MarlinMoEMethod.apply")
    names = {_short(r["symbol"]) for r in rows}
    assert "moe_wna16_marlin_gemm" in names and "_mxfp4_slot_gemv_kernel" not in names
    # the graph alone (every branch) still reaches the slot kernel from the same method
    from recon.query import launches
    assert "_mxfp4_slot_gemv_kernel" in {_short(r["symbol"]) for r in launches(tree_0513.graph, "Mxfp4MarlinMoEMethod.apply")}


def test_server_args_are_checked_against_sglang_choices(tree_0513):
    with pytest.raises(ReconError, match="not one of SGLang's choices"):
        parse_server_args(tree_0513, "--moe-runner-backend bogus")
    with pytest.raises(ReconError, match="no flag --no-such-flag"):
        parse_server_args(tree_0513, "--no-such-flag 1")
    assert parse_server_args(tree_0513, "--moe-runner-backend=marlin") == {"moe_runner_backend": "marlin"}


def test_server_args_refuse_counts_no_deployment_has(tree_0513, tree_new):
    for tree in (tree_0513, tree_new):
        for bad in ("--tp-size -1", "--tp-size 0", "--ep-size 100000", "--tp-size 99999999999999999999"):
            with pytest.raises(ReconError, match="counts devices or processes"):
                parse_server_args(tree, bad)
        assert parse_server_args(tree, "--tp-size 8") == {"tp_size": 8}
    # -1 is a real value elsewhere ("off" for the chunked-prefill size): only counts are bounded below
    assert parse_server_args(tree_0513, "--chunked-prefill-size -1") == {"chunked_prefill_size": -1}
    with pytest.raises(ReconError, match="past any value"):
        parse_server_args(tree_0513, "--chunked-prefill-size 99999999999999999999")


def test_server_args_take_what_sglang_argparse_takes(tree_0513, tree_new):
    # SGLang's parser keeps argparse's allow_abbrev: a unique prefix is the flag (`--tp 2`), an
    # ambiguous one is an error naming the candidates; 0.5.23 declares aliases in its field annotations
    for tree in (tree_0513, tree_new):
        assert parse_server_args(tree, "--tp 2") == {"tp_size": 2}
        with pytest.raises(ReconError, match="ambiguous"):
            parse_server_args(tree, "--mo marlin")
    assert parse_server_args(tree_new, "--tensor-parallel-size 2") == {"tp_size": 2}


def test_env_pairs_are_validated():
    assert parse_env(["A=1", "B="]) == {"A": "1", "B": ""}
    with pytest.raises(ReconError):
        parse_env(["NOVALUE"])


def test_env_override_changes_the_outcome(tree_0513):
    # the experts stop being FP4 when the variable the code reads is set to 0: plain FP8 method
    ctx = CheckContext(tree_0513, load_device("rtx-pro-6000"), load_model("dsv4"))
    v = build(ctx, {}, {"SGLANG_DSV4_FP4_EXPERTS": "0"})
    assert _short(v.moe_method) == "Fp8MoEMethod"
    assert any("SGLANG_DSV4_FP4_EXPERTS=0 (--env)" == n for n in v.notes)


@pytest.fixture(scope="module")
def new_rtx(tree_new):
    return _view(tree_new, "rtx-pro-6000")


def test_newest_release_dsv4_runs_flashinfer_cutlass_with_mxfp8_activations_on_sm120(new_rtx):
    sa = new_rtx.server_args["moe_runner_backend"]
    # the per-model override turns "auto" into flashinfer_mxfp4 for FP4 experts (not a guess by name)
    assert sa["value"] == "'flashinfer_mxfp4'" and "model_overrides" in sa["path"] and sa["line"]
    assert _short(new_rtx.moe["config_class"]) == "Fp8Config"
    assert _short(new_rtx.moe_method) == "Mxfp4FlashinferCutlassMoEMethod"
    built = {c["attr"]: c["value"] for c in new_rtx.moe["construction"]}
    assert built.get("_use_mxfp8_act_scaling") == "True"
    # reached through the MoE runner's fused-function registry, ending in FlashInfer's op
    grouped = new_rtx.grouped_op()
    assert grouped and grouped["name"] == "flashinfer.fused_moe.cutlass_fused_moe"
    assert any("registered for ('none', 'flashinfer_mxfp4')" in h["what"] for h in grouped["via"])
    assert any(lf["name"] == "flashinfer.mxfp8_quantize" for lf in new_rtx.moe["leaves"])


def test_newest_release_dsv4_on_h200_is_w4a16(tree_new):
    v = _view(tree_new, "h200")
    assert _short(v.moe_method) == "Mxfp4FlashinferCutlassMoEMethod"
    built = {c["attr"]: c["value"] for c in v.moe["construction"]}
    assert built.get("_use_mxfp8_act_scaling") == "False"


def test_gpt_oss_on_the_newest_release_runs_its_own_method(tree_new):
    v = _view(tree_new, "h200", model="gpt-oss-120b")
    assert _short(v.moe["config_class"]) == "Mxfp4Config"
    assert _short(v.moe_method) == "Mxfp4MoEMethod"
    # whether triton_kernels is installed cannot be known statically: both outcomes are said
    assert v.server_args["moe_runner_backend"]["value"] == "'auto'"
    assert any(f["changes"].get("moe_runner_backend") == "'triton_kernel'" and any("is_triton_kernels_available" in a["test"] for a in f["assumptions"])
               for f in v.forks)


def test_attention_backend_follows_the_model_registry_of_overrides(tree_new):
    # model_overrides/*.py register per architecture with @_register_for("<class name>"); the
    # EmbeddingGemma2Model override (no "For" in its name) must not apply to gpt-oss
    h = _view(tree_new, "h200", model="gpt-oss-120b").server_args["attention_backend"]
    assert h["value"] == "'fa3'" and h["path"].endswith("model_overrides/gpt_oss.py")
    b = _view(tree_new, "b200", model="gpt-oss-120b").server_args["attention_backend"]
    assert b["value"] == "'trtllm_mha'" and b["path"].endswith("model_overrides/gpt_oss.py")
    d = _view(tree_new, "h200").server_args["attention_backend"]
    # DeepSeek-V4's own override, not the HRM-Text pass handed to run_post_process_pass under its
    # model test (a function passed as an argument counts as called where it is passed)
    assert d["value"] == "'dsv4'" and d["path"].endswith("model_overrides/deepseek_v4.py")


def test_server_args_methods_are_evaluated_from_their_code(tree_0513):
    # server_args.py: `if self.is_attention_backend_not_set(): self.attention_backend = "fa3"` for
    # gpt-oss on sm_90; the method's body reads three fields that are all unset
    v = _view(tree_0513, "h200", model="gpt-oss-120b")
    a = v.server_args["attention_backend"]
    assert a["value"] == "'fa3'" and a["path"].endswith("server_args.py")
    assert not any("is_attention_backend_not_set" in x["test"] for f in v.forks for x in f["assumptions"])


def test_a_checkouts_own_modules_are_not_library_ops(sglang_0513, tmp_path):
    # a git checkout keeps the package under python/: calls into sglang.* are followed, never
    # reported as a library's op
    from recon.target import from_path
    from recon.tree import load
    (tmp_path / "python").mkdir()
    shutil.copytree(sglang_0513.source.root / "sglang" / "srt", tmp_path / "python" / "sglang" / "srt")
    shutil.copy(sglang_0513.source.root / "sglang" / "__init__.py", tmp_path / "python" / "sglang")
    target = from_path(tmp_path)
    assert target.package_prefix == "python"
    v = _view(load(target), "rtx-pro-6000")
    names = {lf["name"] for lf in v.moe["leaves"]}
    assert names and not any(n.startswith("sglang.") and lf_kind == "library" for n, lf_kind in
                             ((lf["name"], lf["kind"]) for lf in v.moe["leaves"]))
    assert "_mxfp4_slot_gemv_kernel" in {_short(lf["name"]) for lf in v.primary_leaves()}


def test_a_custom_op_registered_in_the_tree_is_followed_to_its_kernel(tree_old):
    # 0.5.5: fused_experts calls torch.ops.sglang.outplace_fused_experts, which fused_moe.py registers
    # with direct_register_custom_op(op_name="outplace_fused_experts", op_func=outplace_fused_experts)
    v = _view(tree_old, "h200", model="deepseek-v3")
    leaves = {_short(lf["name"]): lf for lf in v.primary_leaves()}
    assert "fused_moe_kernel" in leaves and leaves["fused_moe_kernel"]["kind"] == "triton_kernel"
    assert any("registered as a custom op" in h["what"] for h in leaves["fused_moe_kernel"]["via"])
    assert not any(lf["kind"] == "native_op" and lf["name"].endswith("outplace_fused_experts") for lf in v.moe["leaves"])


def test_an_unquantized_moe_takes_the_layers_own_method_and_its_device_dispatch(tree_0513):
    # no quantization_config: FusedMoE.__init__ builds UnquantizedFusedMoEMethod; its apply calls
    # self.forward, whose self._forward_method is what dispatch_forward() picked (forward_cuda on CUDA,
    # not the torch.compile switch written in another method)
    v = _view(tree_0513, "h200", model="qwen3-30b-a3b")
    assert _short(v.moe_method) == "UnquantizedFusedMoEMethod"
    leaves = {_short(lf["name"]): lf for lf in v.primary_leaves()}
    assert leaves["fused_moe_kernel"]["kind"] == "triton_kernel"
    assert any("forward_cuda, chosen for this device" in h["what"] for h in leaves["fused_moe_kernel"]["via"])
    assert any("is_out_of_tree() taken as false" in n for n in v.notes)


def test_default_attention_backend_from_the_code_that_picks_it(tree_0513, tree_new):
    # 0.5.13.post1: ServerArgs._get_default_attn_backend(use_mla_backend, model_config); DeepSeek-V3 is
    # MLA because ModelConfig sets attention_arch = AttentionArch.MLA (an enum of auto() members)
    h = _view(tree_0513, "h200", model="deepseek-v3").server_args["attention_backend"]
    assert h["value"] == "'fa3'" and h["path"].endswith("server_args.py")
    r = _view(tree_0513, "rtx-pro-6000", model="deepseek-v3").server_args["attention_backend"]
    assert r["value"] == "'triton'"
    # 0.5.23: the _attention_backend_default pass; the Step3p override registered under a predicate
    # on the architecture (lambda arch: "Step3p5ForCausalLM" in arch) does not apply to DeepSeek-V3
    n = _view(tree_new, "rtx-pro-6000", model="deepseek-v3")
    assert n.server_args["attention_backend"]["value"] == "'triton'"
    assert "model_overrides" not in n.server_args["attention_backend"]["path"]
    # the picker's `is_flashinfer_available()` is decided by the release's own requirements
    # (flashinfer_python is a dependency of the wheel), and the view says which requirement
    q = _view(tree_0513, "rtx-pro-6000", model="qwen3-30b-a3b")
    assert q.server_args["attention_backend"]["value"] == "'flashinfer'"
    assert any(n_.startswith("flashinfer installed:") for n_ in q.notes)
    assert not any("is_flashinfer_available()" in n_ and "taken as false" in n_ for n_ in q.notes)


def test_a_model_specific_hook_does_not_touch_another_model(tree_0513):
    # deepseek_v4_hook sets attention_backend="dsv4"; it is only called under the DeepseekV4 branch
    v = _view(tree_0513, "rtx-pro-6000", model="deepseek-v3")
    assert v.server_args.get("attention_backend", {}).get("value") != "'dsv4'"
    assert _short(v.moe_method) == "Fp8MoEMethod"
    assert "fused_moe_kernel" in {_short(lf["name"]) for lf in v.primary_leaves()}


def _hf_model(tmp_path, **over):
    import json

    from recon.profiles import load_model

    cfg = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "hidden_size": 4096, "num_hidden_layers": 43,
           "n_routed_experts": 256, "moe_intermediate_size": 2048, "num_experts_per_tok": 8,
           "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "scale_fmt": "ue8m0"}}
    cfg.update(over)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return load_model(str(p))


def test_model_config_without_architectures_is_a_diagnostic(tree_0513, tmp_path):
    m = _hf_model(tmp_path, architectures=[])
    v = build(CheckContext(tree_0513, load_device("rtx-pro-6000"), m), {})
    assert any("names no architectures" in d for d in v.diagnostics)
    # the server-argument rewrite for DeepseekV4 on sm_120 needs the architecture: it does not fire
    assert v.server_args["moe_runner_backend"]["value"] == "'auto'"


def test_unknown_quant_method_is_a_diagnostic(tree_0513, tmp_path):
    m = _hf_model(tmp_path, quantization_config={"quant_method": "no-such-method"})
    v = build(CheckContext(tree_0513, load_device("rtx-pro-6000"), m), {})
    assert v.moe_method is None
    assert any("'no-such-method' is not in this tree's quantization registry" in d for d in v.diagnostics)


def test_callers_include_platform_table_readers(tree_new):
    from recon.query import callers

    rows = callers(tree_new.graph, "is_sm120_supported", True, tree_new)
    readers = [r for r in rows if r["edge"] == "reads table"]
    # Mxfp4FlashinferCutlassMoEMethod reads get_platform().is_sm120, which a name table maps to the gate
    assert any(r["symbol"].endswith("Mxfp4FlashinferCutlassMoEMethod.__init__") for r in readers)
    assert all("is_sm120 -> is_sm120_supported" in r["via"] for r in readers)


def test_a_local_reassigned_under_a_branch_keeps_the_value_its_tests_allow(tree_new):
    # Mxfp4MoEMethod.create_moe_runner: `backend = get_moe_runner_backend()`, then `if backend.is_auto():
    # backend = TRITON`. On sm_120 the backend is flashinfer_mxfp4, so the runner is built for it and the
    # fused function is the one registered for ('none', 'flashinfer_mxfp4'), not the Triton one.
    v = _view(tree_new, "rtx-pro-6000", model="gpt-oss-120b")
    assert v.server_args["moe_runner_backend"]["value"] == "'flashinfer_mxfp4'"
    switches = {s["attr"]: s for s in v.moe["switches"]}
    assert "registered for ('none', 'flashinfer_mxfp4')" in switches["fused_func"]["value"] or \
        switches["fused_func"]["value"].endswith("flashinfer_mxfp4")
    names = {lf["name"] for lf in v.primary_leaves()}
    assert "flashinfer.fused_moe.cutlass_fused_moe" in names
    assert not any(n.endswith("fused_moe_kernel") for n in names)


def test_a_server_argument_read_through_its_namespace_accessor(tree_new):
    # get_exec().moe.flashinfer_mxfp4_moe_precision: the field declared in ExecMoe, read through the
    # accessor that returns config_bag("exec"); it decides the sm_90 Humming W4A8 switch
    v = _view(tree_new, "h200")
    built = {c["attr"]: c["value"] for c in v.moe["construction"]}
    assert built.get("_use_sm90_humming") == "False"
    v = _view(tree_new, "h200", flags="--flashinfer-mxfp4-moe-precision fp8")
    built = {c["attr"]: c["value"] for c in v.moe["construction"]}
    assert built.get("_use_sm90_humming") == "True"


def test_optional_packages_are_decided_by_the_release_requirements(tree_new, tree_old):
    from recon.engine.packages import declared
    new = declared(tree_new)
    assert new is not None and new.provides("flashinfer").startswith("flashinfer")
    assert new.provides("flashinfer.fused_moe") == new.provides("flashinfer")
    assert new.provides("triton_kernels") is None  # not required: a user may or may not have it
    assert declared(tree_old).provides("flashinfer") is not None
    v = _view(tree_new, "rtx-pro-6000")
    assert any(n.startswith("flashinfer installed:") and "METADATA requires flashinfer_python" in n for n in v.notes)
    # has_flashinfer reads through the platform probe table to is_flashinfer_available: decided
    assert not any("has_flashinfer" in n for n in v.notes)
    # triton_kernels stays open, and the view says so
    g = _view(tree_new, "h200", model="gpt-oss-120b")
    assert any(n.startswith("triton_kernels installed or not: unknown") for n in g.notes)


def test_membership_in_module_constants_is_evaluated(tree_new):
    # ModelConfig._detect_attention_sinks: `any(a in SWA_SINK_ARCHS for a in archs)` over a module
    # frozenset, and a tuple splatted into another: decided for the model, not assumed false
    v = _view(tree_new, "rtx-pro-6000")
    assert not any("SWA_SINK_ARCHS" in n or "MIMO_V2_MODEL_ARCHS" in n for n in v.notes)


def test_the_checkpoint_path_is_no_single_file(tree_new, tree_0513):
    # `check_gguf_file(model_path)` asks whether the path is one file: a checkpoint given by its
    # config.json never is, so the GGUF rewrite of `quantization` is no fork of the view
    for tree in (tree_new, tree_0513):
        v = _view(tree, "h200", model="gpt-oss-120b")
        assert not any(f["changes"].get("quantization") == "'gguf'" for f in v.forks)


def test_an_attribute_read_in_its_own_write_tests_has_its_earlier_value(tree_new, tree_0513):
    # FusedMoE.__init__: `self.quant_method = quant_method` (None), then `if self.quant_method is None:
    # self.quant_method = UnquantizedFusedMoEMethod(...)`. The KTransformers wrapper is taken when
    # `create_kt_config_from_server_args(get_global_server_args(), ...)` is not None, which that
    # function's code decides from --kt-weight-path (read through the accessor's ServerArgs return)
    for tree in (tree_new, tree_0513):
        v = _view(tree, "h200", model="qwen3-30b-a3b")
        assert _short(v.moe_method) == "UnquantizedFusedMoEMethod"
        assert not any(_short(o["method"]) == "KTEPWrapperMethod" for o in v.moe["outcomes"])
    kt = _view(tree_0513, "h200", model="qwen3-30b-a3b", flags="--kt-weight-path /weights")
    assert _short(kt.moe_method) == "KTEPWrapperMethod"


def test_library_ops_say_whether_the_release_installs_their_package(tree_0513, tree_new):
    # 0.5.13.post1 sets moe_runner_backend='triton_kernel' for gpt-oss on sm_120, but its wheel does
    # not require triton_kernels: the op is said to need a package installed besides SGLang
    v = _view(tree_0513, "rtx-pro-6000", model="gpt-oss-120b")
    ogs = [lf for lf in v.primary_leaves() if lf["name"].startswith("triton_kernels.")]
    assert ogs and all(lf["required_by_release"] is None and lf["package"] == "triton_kernels" for lf in ogs)
    fi = [lf for lf in _view(tree_new, "rtx-pro-6000").primary_leaves() if lf["name"].startswith("flashinfer.")]
    assert fi and all(lf["required_by_release"].startswith("flashinfer") for lf in fi)


_FLAG_TREE = {
    "sglang/srt/server_args.py": (
        "from typing import Optional\n"
        "class ServerArgs:\n"
        "    quantization: Optional[str] = None\n"
        "    moe_runner_backend: str = 'auto'\n"
        "    def __post_init__(self):\n"
        "        if self.moe_runner_backend == 'auto':\n"
        "            self.moe_runner_backend = 'triton_kernel'\n"
    ),
}


def test_the_scenarios_view_is_the_view_for_its_own_flags(synthetic):
    """``build(ctx)`` with no flags or env given is the view for the context's own ``--server-args``
    and ``--env`` (every product builds it that way: ``Scenario.view``, ``runtime_view``); ``{}``
    given is no flags."""
    from recon.scenario import open_scenario

    tree = synthetic(_FLAG_TREE)
    sc, _ = open_scenario(tree, "h200", "qwen3-30b-a3b", "--moe-runner-backend triton", ["SGLANG_X=1"])
    v = build(sc.ctx)
    assert v.flags == {"moe_runner_backend": "triton"} and v.env == {"SGLANG_X": "1"}
    assert v.server_args["moe_runner_backend"]["value"] == "'triton'"
    assert v.server_args["moe_runner_backend"]["source"] == "--moe-runner-backend"
    # the same engine as the scenario's: no second resolution
    assert sc.ctx.engine is not None and build(sc.ctx).server_args == v.server_args
    none = build(sc.ctx, {}, {})
    assert none.flags == {} and none.server_args["moe_runner_backend"]["value"] == "'triton_kernel'"


def test_cli_runtime_reaches_the_flag_on_a_released_wheel(sglang_new):
    # 0.5.23, H200, gpt-oss-120b: without the flag the per-model override picks triton_kernel; with
    # `--moe-runner-backend triton` the mxfp4 method drops the triton_kernels path for the runner's
    # fused Triton MoE kernel
    import json

    from typer.testing import CliRunner

    from recon.cli import app

    base = ["runtime", "--sglang", "0.5.23", "--device", "h200", "--model", "gpt-oss-120b", "--format", "json"]
    res = CliRunner().invoke(app, base + ["--server-args", "--moe-runner-backend triton"])
    assert res.exit_code == 0, res.output
    v = json.loads(res.stdout)
    assert v["flags"] == {"moe_runner_backend": "triton"}
    sa = v["server_args"]["moe_runner_backend"]
    assert sa["value"] == "'triton'" and sa["source"] == "--moe-runner-backend"
    built = {c["attr"]: c["value"] for c in v["moe"]["construction"]}
    assert built["use_triton_kernels"] == "False"
    names = {lf["name"].rsplit(".", 1)[-1] for lf in v["moe"]["leaves"]}
    assert "fused_moe_kernel" in names


def test_jit_build_cache_is_built_once_not_in_the_chain(tree_new):
    # 0.5.23, H200, gpt-oss-120b: `activation_module` is decorated with the JIT package's
    # `cache_once` (a dict kept outside the wrapper); its body (load_jit -> the build cache's
    # msgspec bookkeeping) runs once per dtype. The chain holds the module it compiles, called at
    # `module.run_activation(...)`, not the build. (The flag: the suite does not read which
    # packages the kernel wheel ships, so the override's triton_kernels probe stays open.)
    v = _view(tree_new, "h200", "gpt-oss-120b", "--moe-runner-backend triton_kernel")
    names = [lf["name"] for lf in v.moe["leaves"]]
    assert not any(n.startswith("msgspec.") for n in names), names
    assert not any("/utils/compile/" in h["path"] for lf in v.moe["leaves"] for h in lf["via"])
    act = [lf for lf in v.moe["leaves"] if lf["kind"] == "jit_kernel" and lf["name"].startswith("activation (")]
    assert act and act[0]["path"].endswith("kernels/ops/activation/activation.py")
    assert "built once per key" in act[0]["via"][-1]["what"]
    built = {b["node"].rsplit(".", 1)[-1]: b for b in v.moe["built_once"]}
    assert "activation_module" in built and "cache_once" in built["activation_module"]["how"]
