"""The mapped step's premise: it has at least one token, so SGLang's size tests on the tensors a
layer's entry receives (``x.shape[0] == 0``: a data-parallel rank's idle batch) are decided; a test
the premise does not answer stays undecided. Also the two other ways a walk decides a test by
Python's own semantics: a parameter the call leaves out holds its default, and a test whose other
branch only raises is a precondition the running step met."""

import ast

import pytest

from recon.engine.interp import UNKNOWN
from recon.engine.steptensors import PREMISE_NOTE, AtLeast, StepTensor, Undecided, entry_tensors, rebound, truth
from tests import scenarios


def _layer(m, kind):
    return next(lay for lay in m["layers"] if lay["kind"] == kind)


def test_a_size_with_a_lower_bound_decides_only_what_the_bound_settles():
    n = AtLeast(1)
    assert (n == 0) is False and (n != 0) is True and (n > 0) is True and (n >= 1) is True
    assert (n < 1) is False and (0 < n) is True and (0 == n) is False
    for undecided in (lambda: n == 1, lambda: n > 1, lambda: n <= 1, lambda: min(n, 8), lambda: n - 1):
        with pytest.raises((Undecided, TypeError)):
            undecided()
    assert truth(n) is True and truth(AtLeast(0)) is UNKNOWN
    assert (n + 3).lo == 4 and (2 * n).lo == 2
    t = StepTensor("forward(x)")
    assert t.attr("shape")[0].lo == 1 and t.attr("shape")[-1].lo == 1  # every dimension of a non-empty tensor
    assert t.call("numel", []).lo == 1 and t.call("view", [-1, 8]) is t
    assert t.attr("dtype") is UNKNOWN and t.call("index_select", [0]) is UNKNOWN  # not what the premise says


def test_entry_tensors_are_the_required_tensor_parameters_and_a_store_ends_them():
    fn = ast.parse(
        "def forward(self, x: torch.Tensor, positions: 'torch.Tensor', fb: ForwardBatch,\n"
        "            x_quant: Optional[torch.Tensor] = None, *args):\n"
        "    y = x\n"
        "    for i in range(2):\n"
        "        positions = positions[1:]\n"
        "    x = x[:0]\n").body[0]
    got = entry_tensors(fn, "forward", varargs=True)
    assert set(got) == {"x", "positions", "args"}  # not the Optional one, not the batch
    assert rebound(fn, {"x", "positions"}) == {"x": 6, "positions": 4}  # in a loop: from the loop's line


def test_deepseek_v4_on_h200_decides_the_empty_batch_tests(tree_new):
    m = scenarios.kernel_map(tree_new, "h200", "dsv4")
    moe = _layer(m, "moe")
    # the MoE runner's early return on an empty batch was the only test before the kernel
    op = next(lf for lf in moe["leaves"] if lf["name"].endswith(".cutlass_fused_moe"))
    assert op["decided"] and not op["tests"]
    assert any(p["test"] == "x.shape[0] == 0" and p["path"].endswith("moe_runner/flashinfer_cutlass.py")
               for p in moe["premise_decided"])
    # the attention module's `if ... and x.shape[0] == 0: return x` guarded each of its ops
    am = _layer(m, "attention_module")
    assert any("x.shape[0] == 0" in p["test"] for p in am["premise_decided"])
    assert not any("x.shape[0] == 0" in t["test"] for lf in am["leaves"] for t in lf.get("tests") or [])
    assert PREMISE_NOTE in m["notes"]
    # a test on the batch's requests is no size: it stays open, each outcome shown
    samp = _layer(m, "sampling")
    assert any(not lf["decided"] and any(t["test"] == "sampling_info.is_all_greedy" for t in lf["tests"])
               for lf in samp["leaves"])
    assert any(f["test"] == "sampling_info.is_all_greedy" for f in samp["forks"])


def test_gpt_oss_on_h200_takes_a_raising_test_as_a_met_precondition(tree_unseen):
    m = scenarios.kernel_map(tree_unseen, "h200", "gpt-oss-120b")
    att = _layer(m, "attention")
    # `if score_mod is not None and ...: raise RuntimeError(...)`: no kernel on its other side
    assert not any("score_mod" in t["test"] for lf in att["leaves"] for t in lf.get("tests") or [])
    assert any(n.startswith("assumed the precondition holds: not (score_mod is not None") for n in m["notes"])
    # the test that picks FA3's kernel for a cross-attention layer stays open
    assert any(not lf["decided"] and lf["name"].endswith("flash_attn_with_kvcache") for lf in att["leaves"])
