"""triton-smem-budget on real wheels: SGLang 0.5.8.post1's extend attention picks Hopper tiles for
sm_120 under `CUDA_CAPABILITY[0] >= 9` (sglang #14322) and needs 106,496 B of shared memory per block,
the number the report's OutOfResources gives; 0.5.9 has the sm_12x branch and fits. The tile shapes
and config come from the release's own launcher and kernel, evaluated on the device profile."""

from __future__ import annotations

import ast

import pytest

from recon.profiles import load_device, load_model
from recon.rules import load_rules
from recon.scan import run_rules

pytestmark = pytest.mark.network  # fetches releases outside the suite's usual three

RULES = [r for r in load_rules() if r.id == "triton-smem-budget"]
EXTEND = "sglang/srt/layers/attention/triton_ops/extend_attention.py"


def _tree(version):
    from recon.target import from_version
    from recon.tree import load
    return load(from_version(version))


@pytest.fixture(scope="module")
def tree_058():
    return _tree("0.5.8.post1")


@pytest.fixture(scope="module")
def tree_059():
    return _tree("0.5.9")


def _errors(tree, device="rtx-pro-6000"):
    res = run_rules(tree, load_device(device), load_model("deepseek-v3"), RULES)
    assert not res.errors, res.errors
    return [f for f in res.findings if f.severity == "error"]


def test_hopper_tiles_on_sm120_are_over_the_limit(tree_058):
    errs = _errors(tree_058)
    assert len(errs) == 1, [f.message for f in errs]
    f = errs[0]
    assert f.primary.path == EXTEND and f.data["kernel"].endswith("extend_attention._fwd_kernel")
    assert f.data["step"] == "prefill" and f.data["need_bytes"] == 106_496 and f.data["limit_bytes"] == 101_376
    assert (f.data["config"]["BLOCK_M"], f.data["config"]["BLOCK_N"]) == (128, 64)
    # the MHA prefill form: head dims 192/128 -> BLOCK_DMODEL 128 + BLOCK_DPE 64, BLOCK_DV 128
    assert (f.data["config"]["BLOCK_DMODEL"], f.data["config"]["BLOCK_DPE"], f.data["config"]["BLOCK_DV"]) == (128, 64, 128)


def test_the_same_release_fits_on_hopper(tree_058):
    assert _errors(tree_058, "h200") == []  # 227 KB per block


def test_the_sm12x_branch_fits(tree_059):
    assert _errors(tree_059) == []


def test_kernel_regions_sum_the_dot_operands_of_one_loop(tree_058):
    from recon.engine.smem import dot_regions, need
    mod = ast.parse(tree_058.read_text(EXTEND))
    k = next(n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == "_fwd_kernel")
    regions = dot_regions(k)
    assert len(regions) == 2  # the prefix loop and the extend loop: reused, the largest counts
    cfg = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_DMODEL": 128, "BLOCK_DPE": 64, "BLOCK_DV": 128}
    assert need(regions, cfg, 1)["bytes"] == 73_728  # 0.5.9's sm_120 tiles
    assert need(regions, {"BLOCK_M": 64}, 1) is None  # a tile dim the launch does not bind: unjudged
