"""Claims recon got wrong on SGLang 0.5.19 (a release the rest of the suite does not read), traced
by hand from the source (bench/handtrace/0.5.19.md), each fixed as a mechanism pinned by a
tests/engine_cases fixture and asserted here on the real wheel."""

import pytest

from tests import scenarios


def _short(q):
    return q.rsplit(".", 1)[-1] if q else q


@pytest.fixture(scope="module")
def qwen_h200(tree_traced):
    return scenarios.view(tree_traced, "h200", "qwen3-30b-a3b")


def test_bf16_moe_follows_the_dispatch_resolved_on_first_call(qwen_h200):
    # UnquantizedFusedMoEMethod.apply -> self.forward(...) -> BaseFusedOp.forward: `method =
    # self._forward_method; if method is None: method = self._forward_method =
    # self._resolve_forward_method()` (kernels/fused_op.py) -> forward_cuda -> the runner's
    # fused func for ('none', 'triton') -> fused_moe_kernel. Before: no op at all.
    v = qwen_h200
    assert _short(v.moe_method) == "UnquantizedFusedMoEMethod"
    sw = {s["attr"]: s for s in v.moe["switches"]}
    assert "forward_cuda" in sw["_forward_method"]["value"] and sw["_forward_method"]["path"].endswith("kernels/fused_op.py")
    names = {_short(lf["name"]) for lf in v.moe["leaves"]}
    assert "fused_moe_kernel" in names
    fm = next(lf for lf in v.moe["leaves"] if _short(lf["name"]) == "fused_moe_kernel")
    assert any("fused_experts_none_to_triton" in h["what"] for h in fm["via"])


def test_flashinfer_mxfp4_precision_is_read_through_its_namespace_marker(tree_traced):
    # 0.5.19 declares flashinfer_mxfp4_moe_precision on ServerArgs with NS("exec.moe");
    # Mxfp4MoEMethod.__init__ reads get_exec().moe.flashinfer_mxfp4_moe_precision: 'default', so
    # the B200 (trtllm_sm100) apply quantizes activations to MXFP8 and never takes the bf16 branch.
    v = scenarios.view(tree_traced, "b200", "gpt-oss-120b")
    assert _short(v.moe_method) == "Mxfp4MoEMethod"
    built = {c["attr"]: c["value"] for c in v.moe["construction"]}
    assert built["flashinfer_mxfp4_moe_precision"] == "'default'" and built["_fi_kernel"] == "'trtllm_sm100'"
    assert not any("flashinfer_mxfp4_moe_precision" in f["test"] for f in v.moe["forks"])
    assert "trtllm_fp4_block_scale_moe" in {_short(lf["name"]) for lf in v.moe["leaves"]}


def test_a_topk_format_precondition_written_as_elif_raises_is_met(tree_traced):
    # Mxfp4FlashinferTrtllmMoEMethod.apply: `if format_is_standard(...): ... elif
    # format_is_bypassed(...): raise ... else: raise ...`: the step that runs took the standard
    # format; the test is not an open fork.
    v = scenarios.view(tree_traced, "b200", "dsv4")
    assert _short(v.moe_method) == "Mxfp4FlashinferTrtllmMoEMethod"
    assert not any("format_is_standard" in f["test"] and "mxfp4_flashinfer_trtllm_moe" in (f["path"] or "")
                   for f in v.moe["forks"])
    assert "trtllm_fp4_block_scale_routed_moe" in {_short(lf["name"]) for lf in v.moe["leaves"]}


def test_the_jit_build_cache_is_not_in_the_moe_chain(tree_traced):
    # `activation_module` and `_jit_moe_align_module` are decorated with cache_once: built once
    # per dtype; the chain holds the JIT module they compile, never the build cache's msgspec calls.
    v = scenarios.view(tree_traced, "h200", "gpt-oss-120b", "--moe-runner-backend triton_kernel")
    names = [lf["name"] for lf in v.moe["leaves"]]
    assert not any(n.startswith("msgspec.") for n in names)
    assert any(n.startswith("activation (") for n in names)
    assert {"activation_module", "_jit_moe_align_module"} <= {_short(b["node"]) for b in v.moe["built_once"]}


def test_the_bf16_dense_fallback_needs_every_elif_failed(tree_traced):
    # UnquantizedLinearMethod.apply: `if amx: return ...` `elif aiter: return ...` `elif
    # get_bf16_gemm_backend().is_optimized() and ...: return ...` then `return F.linear(...)`. On
    # B200 the scheduler's initialize_bf16_gemm_config picks the cutedsl backend, so F.linear is
    # not decided: it runs only when the optimized test fails (or use_cutedsl_bf16_gemm declines).
    m = scenarios.kernel_map(tree_traced, "b200", "gpt-oss-120b")
    dense = next(lay for lay in m["layers"] if lay["kind"] == "dense_gemm")
    lin = [lf for lf in dense["leaves"] if lf["name"] == "torch.nn.functional.linear"]
    assert lin and not any(lf["decided"] for lf in lin)
    fallback = next(lf for lf in lin if lf["path"].endswith("quantization/unquant.py") and lf["line"] > 390)
    assert any("is_optimized()" in t["test"] and t["holds"] is False for t in fallback["tests"])


def test_sm120_fp8_dense_gemm_follows_the_start_up_backend(tree_traced):
    # The scheduler's initialize_fp8_gemm_config() reads get_exec().kernel.fp8_gemm_runner_backend
    # (a ServerArgs field marked NS("exec.kernel")) and turns `auto` into `cutlass` on SM120, so
    # dispatch_w8a8_block_fp8_linear takes the explicit CUTLASS backend: the JIT blockwise FP8 GEMM
    # where N and K are multiples of 128 (else the Triton block-FP8 kernel), not FlashInfer's
    # groupwise GEMM that the auto dispatch would pick on Blackwell.
    m = scenarios.kernel_map(tree_traced, "rtx-pro-6000", "dsv4")
    dense = next(lay for lay in m["layers"] if lay["kind"] == "dense_gemm")
    choice = dense["dispatchers"]["w8a8_block_fp8_linear"]["choices"][0]
    assert choice["primary"] and _short(choice["function"]) == "cutlass_w8a8_block_fp8_linear_with_fallback"
    names = {lf["name"] for lf in dense["leaves"]}
    assert "flashinfer.gemm.gemm_fp8_nt_groupwise" not in names
    first = [lf for lf in dense["leaves"] if lf["primary"]]
    assert any(lf["name"].startswith("fp8_blockwise_scaled_mm (") for lf in first)
    assert any("shape_supported" in t["test"] for lf in first for t in lf["tests"])
