"""The runtime view on real SGLang wheels: what runs is decided by SGLang's own code (server-argument
rewrites, the quant-method registry, get_quant_method, branch tests), not by class names."""

import pytest

from recon.checks import CheckContext
from recon.errors import ReconError
from recon.profiles import load_device, load_model
from recon.runtime import build, parse_env, parse_server_args


def _view(tree, device, model="dsv4", flags=""):
    ctx = CheckContext(tree, load_device(device), load_model(model))
    return build(ctx, parse_server_args(tree, flags))


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
    # on sm_90 the apply path does not take the sm_120 slot kernel branch
    assert "_mxfp4_slot_gemv_kernel" not in {_short(lf["name"]) for lf in v.primary_leaves()}


def test_server_args_are_checked_against_sglang_choices(tree_0513):
    with pytest.raises(ReconError, match="not one of SGLang's choices"):
        parse_server_args(tree_0513, "--moe-runner-backend bogus")
    with pytest.raises(ReconError, match="no flag --no-such-flag"):
        parse_server_args(tree_0513, "--no-such-flag 1")
    assert parse_server_args(tree_0513, "--moe-runner-backend=marlin") == {"moe_runner_backend": "marlin"}


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


def test_newest_release_resolves_without_crashing(tree_new):
    v = _view(tree_new, "rtx-pro-6000")
    assert v.moe["config_class"] and _short(v.moe["config_class"]) == "Fp8Config"
    assert v.moe["outcomes"], "get_quant_method was explored"
