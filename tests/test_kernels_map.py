"""``recon kernels`` on real SGLang wheels: every layer kind's path follows SGLang's own mechanisms
(attention-backend registry, get_quant_method for a linear layer, dispatchers that return the GEMM
function, start-up globals set from the server arguments, declared environment defaults)."""

import json

import pytest
from typer.testing import CliRunner

from recon.cli import app
from recon.kernels.kmap import diff_maps
from recon.render.kernels import render_diff, render_md, render_text
from recon.profiles import load_device, load_model
from tests import scenarios

runner = CliRunner()


def _map(tree, device, model="dsv4", env=None):
    return scenarios.kernel_map(tree, device, model, env)  # built once per scenario, shared read-only


def _layer(m, kind):
    return next(lay for lay in m["layers"] if lay["kind"] == kind)


def _short(q):
    return q.rsplit(".", 1)[-1]


def _ops(lay):
    return {_short(o["name"]) if "(" not in o["name"] else o["name"].split(" ")[0] for o in lay["ops"]}


def _primary_choice(lay, attr):
    d = lay["dispatchers"][attr]
    return _short(next(c["function"] for c in d["choices"] if c["primary"]))


@pytest.fixture(scope="module")
def seed_rtx(tree_0513):
    return _map(tree_0513, "rtx-pro-6000")


@pytest.fixture(scope="module")
def new_rtx(tree_new):
    return _map(tree_new, "rtx-pro-6000")


def test_seed_moe_is_the_slot_kernel_under_the_marlin_method(seed_rtx):
    moe = _layer(seed_rtx, "moe")
    assert _short(moe["method"]) == "Mxfp4MarlinMoEMethod"
    assert _ops(moe) == {"_mxfp4_slot_gemv_kernel"}
    assert moe["backend"]["value"] == "'marlin'" and moe["backend"]["path"].endswith("server_args.py")
    # two launches of the slot kernel (gate/up, then down) per MoE layer
    assert moe["per_step"]["launches"] == 2 * load_model("dsv4").num_moe_layers


def test_seed_attention_is_the_triton_sparse_decode_kernel_by_the_env_default(seed_rtx):
    att = _layer(seed_rtx, "attention")
    assert att["backend_name"]["value"] == "dsv4"
    assert _short(att["registry"]["factory"]) == "create_dsv4_backend"
    assert _short(att["backend_class"]) == "DeepseekV4AttnBackend"
    assert "_tiled_sparse_decode_kernel" in _ops(att)
    # decided by the second argument of os.environ.get, said with its value
    assert any(n.startswith("SGLANG_SM120_TRITON_FLASHMLA unset: the default '1'") for n in att["env_read"])
    assert any("flash_mla_with_kvcache_sm120" in h["what"] for o in att["ops"] for h in o["via"])


def test_seed_env_override_takes_the_other_branch(tree_0513):
    m = _map(tree_0513, "rtx-pro-6000", env=["SGLANG_SM120_TRITON_FLASHMLA=0"])
    att = _layer(m, "attention")
    assert "_tiled_sparse_decode_kernel" not in _ops(att)  # the pure-PyTorch fallback
    assert any("SGLANG_SM120_TRITON_FLASHMLA=0 (--env)" in n for n in att["env_read"])


def test_seed_dense_fp8_gemm_is_triton_because_start_up_forces_it_on_sm120(seed_rtx):
    dense = _layer(seed_rtx, "dense_gemm")
    assert _short(dense["method"]) == "Fp8LinearMethod"
    assert _primary_choice(dense, "w8a8_block_fp8_linear") == "triton_w8a8_block_fp8_linear"
    assert "_w8a8_block_fp8_matmul" in _ops(dense)
    st = {s["global"].rsplit(".", 1)[-1]: s for s in seed_rtx["startup"]}
    assert st["FP8_GEMM_RUNNER_BACKEND"]["value"] == "'triton'" and st["FP8_GEMM_RUNNER_BACKEND"]["set_in"] == "initialize_fp8_gemm_config"


def test_newest_release_on_sm120(new_rtx):
    moe = _layer(new_rtx, "moe")
    assert _short(moe["method"]) == "Mxfp4FlashinferCutlassMoEMethod"
    assert any(s["attr"] == "_use_mxfp8_act_scaling" and s["value"] == "True" for s in moe["construction"])
    assert "cutlass_fused_moe" in _ops(moe)
    dense = _layer(new_rtx, "dense_gemm")
    assert _primary_choice(dense, "w8a8_block_fp8_linear") == "cutlass_w8a8_block_fp8_linear_with_fallback"
    assert "fp8_blockwise_scaled_mm" in _ops(dense)  # the SM120 CUTLASS GEMM compiled with load_jit
    att = _layer(new_rtx, "attention")
    assert any(n.startswith("SGLANG_SM120_FLASHMLA_BACKEND unset: its declared default 'flashinfer'") for n in att["env_read"])
    assert any(o["name"].startswith("flashinfer.") for o in att["ops"])
    assert "_tiled_sparse_decode_kernel" not in _ops(att)


def test_newest_release_env_selects_the_triton_fallback(tree_new):
    att = _layer(_map(tree_new, "rtx-pro-6000", env=["SGLANG_SM120_FLASHMLA_BACKEND=triton"]), "attention")
    assert "_tiled_sparse_decode_kernel" in _ops(att)


def test_h200_dense_gemm_is_deepgemm_on_both_releases(tree_0513, tree_new):
    for tree in (tree_0513, tree_new):
        m = _map(tree, "h200")
        dense = _layer(m, "dense_gemm")
        assert _primary_choice(dense, "w8a8_block_fp8_linear") == "deepgemm_w8a8_block_fp8_linear_with_fallback"
        assert any(o["name"].startswith("deep_gemm.") for o in dense["ops"])
        att = _layer(m, "attention")
        assert not any("sm120" in o["path"] for o in att["ops"])  # the sm_120 decode path is not taken on sm_90
    assert _short(_layer(_map(tree_0513, "h200"), "moe")["method"]) == "Fp8MoEMethod"


def test_diff_between_releases_names_the_changed_kernels(seed_rtx, new_rtx):
    rows = {r["kind"]: r for r in diff_maps(seed_rtx, new_rtx)}
    assert "_mxfp4_slot_gemv_kernel" in rows["moe"]["ops_removed"]
    assert any("cutlass_fused_moe" in o for o in rows["moe"]["ops_added"])
    assert "_w8a8_block_fp8_matmul" in rows["dense_gemm"]["ops_removed"]
    assert "_tiled_sparse_decode_kernel" in rows["attention"]["ops_removed"]
    text = render_diff(seed_rtx, new_rtx, list(rows.values()))
    assert "- _mxfp4_slot_gemv_kernel" in text
    assert diff_maps(seed_rtx, seed_rtx) == []


def test_gpt_oss_attention_backend_comes_from_the_registry(tree_0513):
    m = _map(tree_0513, "h200", "gpt-oss-120b")
    att = _layer(m, "attention")
    assert att["backend_name"]["value"] == "fa3"
    assert _short(att["backend_class"]) == "FlashAttentionBackend" and att["entry"].endswith(".forward_decode")
    assert _short(_layer(m, "moe")["method"]) == "Mxfp4MoEMethod"


def test_renderers_carry_the_map(seed_rtx):
    text = render_text(seed_rtx)
    assert "== attention" in text and "_tiled_sparse_decode_kernel" in text and "file" not in text.split("\n")[0]
    md = render_md(seed_rtx)
    assert md.startswith("# Kernel map") and "| moe |" in md


@pytest.mark.network  # fetches and loads 0.5.13.post1 through the CLI, not through a wheel fixture
def test_cli_kernels_env_warning_and_bad_pair():
    bad = runner.invoke(app, ["kernels", "--sglang", "0.5.13.post1", "--env", "NOEQUALS"])
    assert bad.exit_code == 2
    ok = runner.invoke(app, ["kernels", "--sglang", "0.5.13.post1", "--device", "rtx-pro-6000", "--format", "json",
                             "--env", "RECON_TEST_NOT_DECLARED=1"])
    assert ok.exit_code == 0, ok.output
    assert "declares no environment variable RECON_TEST_NOT_DECLARED" in ok.output
    data = json.loads(ok.stdout[ok.stdout.index("{"):])
    assert {lay["kind"] for lay in data["layers"]} >= {"attention", "dense_gemm", "moe"}


def test_diff_between_devices_names_the_activation_format(new_rtx, tree_new):
    rows = {r["kind"]: r for r in diff_maps(new_rtx, _map(tree_new, "h200"))}
    # the same MoE method on both, built with MXFP8 activations on sm_120 only
    assert rows["moe"]["before"]["class"] == rows["moe"]["after"]["class"] == "Mxfp4FlashinferCutlassMoEMethod"
    assert "self._use_mxfp8_act_scaling = True" in rows["moe"]["before"]["settings"]
    assert "self._use_mxfp8_act_scaling = False" in rows["moe"]["after"]["settings"]
    assert "self.w8a8_block_fp8_linear = deepgemm_w8a8_block_fp8_linear_with_fallback" in rows["dense_gemm"]["after"]["settings"]


def test_an_undecided_fork_is_shown_with_both_outcomes():
    """A layer whose ops depend on a test recon could not decide: the first outcome's op is not
    printed as what runs, and the fork lists each outcome with the test and its file:line."""
    from recon.render.kernels import _ops_lines

    t = {"test": "has_bias", "path": "sglang/srt/x.py", "line": 116}
    ops = [{"kind": "library", "name": "lib.plain", "path": "sglang/srt/x.py", "line": 120, "primary": True, "decided": False,
            "when": ["not has_bias"], "tests": [{**t, "holds": False}], "via": []},
           {"kind": "library", "name": "lib.always", "path": "sglang/srt/x.py", "line": 100, "primary": True, "decided": True,
            "when": [], "tests": [], "via": []}]
    lay = {"kind": "moe", "ops": ops, "leaves": ops, "forks": [{**t, "if_true": ["lib.with_bias"], "if_false": ["lib.plain"]}]}
    text = "\n".join(_ops_lines(lay))
    assert "runs library: lib.always" in text and "runs library: lib.plain" not in text
    assert "first outcome library: lib.plain" in text and "only if not has_bias [sglang/srt/x.py:116]" in text
    assert "depends on `has_bias`  [sglang/srt/x.py:116]" in text
    assert "if it holds: with_bias" in text and "if not:      plain" in text
