"""FlashInfer's CUTLASS fused MoE beside reference_impl.grouped_mxfp4_moe, in one process.

The peer is what SGLang 0.5.22+ runs for DeepSeek-V4-Flash's MXFP4 experts on sm_90
(`Mxfp4FlashinferCutlassMoEMethod` -> `flashinfer.fused_moe.cutlass_fused_moe`): W4A16, bf16
activations x MXFP4 weights, `use_w4_group_scaling=True`. Both kernels get the same weights:
bench_moe's problems in SGLang's checkpoint layout (w13 [E, 2I, H/2] e2m1 bytes, gate rows first;
E8M0 scales [E, N, K/32]), turned into FlashInfer's inputs the way that method prepares them:
  * w13 loaded up-projection first ([up; gate]: FlashInfer's SwiGLU reads the gate from the
    second half);
  * weights through FlashInfer's `interleave_moe_weights_for_sm90_mixed_gemm(w, "fp4")`, the raw
    E8M0 bytes through `interleave_moe_scales_for_sm90_mixed_gemm(s, group_size=32)`, passed as
    int32 views;
  * the routed scaling factor folded into the top-k weights (the method sets
    `fuse_routed_scaling_factor_in_topk`), so it is not part of the timed MoE;
  * a clamp as a per-expert `swiglu_limit` tensor, `ActivationType.Swiglu`, alpha/beta left at
    FlashInfer's defaults (1, 0): gate <= limit, -limit <= up <= limit, silu(gate) * up, which is
    reference_mxfp4_moe's definition, so the reference needs no change;
  * shapes that are not multiples of 128 (gpt-oss-120b: 2880) padded to the next multiple with zero
    weights, the activations padded and the output sliced inside the timed forward, as SGLang's
    runner does for GPT-OSS (the padded bytes are read; the roofline counts the real ones).
FlashInfer's default (heuristic) tactic is timed first, then its autotuner picks tactics for the M
(`flashinfer.autotune`, as SGLang's warmup does) and the tuned forward is timed (`fi_ms`). The
autotuner needs FlashInfer's `trtllm_utils` module too (its delay kernel); without it every tactic
fails to profile and it falls back to the default tactic (`fi_autotuned` says which). Each output is checked against
reference_mxfp4_moe (relative error <= --max-err) before its time is kept. Timing, problems and
copy bandwidth come from bench_moe (imported): CUDA-graph replay, L2 flushed before each replay,
median; copy bandwidth measured at the start of this run.

  python bench/reference_impl/bench_flashinfer.py --out OUT [--models ...] [--ms ...]
"""
import argparse
import json
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_moe import (MODELS, MS, copy_bw, dense_bf16_tflops, get_config, grouped_mxfp4_moe,  # noqa: E402
                       make_problem, problem, reference_mxfp4_moe, rel, time_graph)

E8M0_ONE = 127


def _pad_to(n, m=128):
    return (n + m - 1) // m * m


def _pad(t, rows, cols, value=0):
    """[E, r, c] uint8 -> [E, rows, cols], the new entries set to value."""
    E, r, c = t.shape
    if (r, c) == (rows, cols):
        return t.contiguous()
    out = torch.full((E, rows, cols), value, dtype=t.dtype, device=t.device)
    out[:, :r, :c] = t
    return out


def up_first_padded(base, H, I):
    """SGLang checkpoint layout -> FlashInfer's logical layout, still plain bytes: w13 as [up; gate]
    (each half padded to Ip rows), K padded to Hp / Ip with zero codes and unit (E8M0 127) scales."""
    Hp, Ip = _pad_to(H), _pad_to(I)
    w13 = base["w13_packed"].view(torch.uint8)
    s13 = base["w13_scale"].view(torch.uint8)
    w13 = torch.cat((_pad(w13[:, I:], Ip, Hp // 2), _pad(w13[:, :I], Ip, Hp // 2)), 1)
    s13 = torch.cat((_pad(s13[:, I:], Ip, Hp // 32, E8M0_ONE), _pad(s13[:, :I], Ip, Hp // 32, E8M0_ONE)), 1)
    w2 = _pad(base["w2_packed"].view(torch.uint8), Hp, Ip // 2)
    s2 = _pad(base["w2_scale"].view(torch.uint8), Hp, Ip // 32, E8M0_ONE)
    return w13, s13, w2, s2, Hp, Ip


def flashinfer_weights(base, H, I):
    """The tensors FlashInfer's sm_90 W4A16 MoE takes, made by FlashInfer's own helpers."""
    from flashinfer.fused_moe import (interleave_moe_scales_for_sm90_mixed_gemm,
                                      interleave_moe_weights_for_sm90_mixed_gemm)
    w13, s13, w2, s2, Hp, Ip = up_first_padded(base, H, I)
    w13_il = interleave_moe_weights_for_sm90_mixed_gemm(w13.contiguous(), "fp4")
    w2_il = interleave_moe_weights_for_sm90_mixed_gemm(w2.contiguous(), "fp4")
    s13_il = interleave_moe_scales_for_sm90_mixed_gemm(s13.contiguous(), group_size=32)
    s2_il = interleave_moe_scales_for_sm90_mixed_gemm(s2.contiguous(), group_size=32)
    torch.cuda.synchronize()
    return {"w13": w13_il, "w2": w2_il, "scales": [s13_il.view(torch.int32), s2_il.view(torch.int32)],
            "H": H, "Hp": Hp, "Ip": Ip}


def flashinfer_forward(W, x, ids, tw_scaled, limit, tune_max):
    """One forward as SGLang's runner issues it (pad/slice only where the shape needs it)."""
    from flashinfer.fused_moe import cutlass_fused_moe
    from flashinfer.fused_moe.core import ActivationType
    if W["Hp"] != W["H"]:
        x = torch.nn.functional.pad(x, (0, W["Hp"] - W["H"]))
    out = torch.empty(x.shape[0], W["Hp"], dtype=torch.bfloat16, device=x.device)
    cutlass_fused_moe(input=x, token_selected_experts=ids, token_final_scales=tw_scaled,
                      fc1_expert_weights=W["w13"], fc2_expert_weights=W["w2"], output_dtype=torch.bfloat16,
                      quant_scales=W["scales"], swiglu_limit=limit, use_w4_group_scaling=True,
                      activation_type=ActivationType.Swiglu, tune_max_num_tokens=tune_max, output=out,
                      use_fused_finalize=False)
    return out[:, :W["H"]].contiguous() if W["Hp"] != W["H"] else out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--max-err", type=float, default=1e-2)
    ap.add_argument("--budget-s", type=float, default=1e9)
    ap.add_argument("--require-flashinfer", action="store_true", help="stop at FlashInfer's first failure")
    args = ap.parse_args()
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    dev_name = torch.cuda.get_device_name()
    bw = copy_bw()
    dense = dense_bf16_tflops()
    print(f"{dev_name}: copy {bw / 1e12:.2f} TB/s, dense bf16 {dense:.0f} TFLOP/s", flush=True)
    res = {"kind": "flashinfer", "device": dev_name, "torch": torch.__version__, "copy_bw_Bps": bw,
           "dense_bf16_tflops": dense, "timing": "CUDA graph replay, L2 flushed before each rep, median",
           "peer": "flashinfer.fused_moe.cutlass_fused_moe (W4A16 MXFP4, sm_90)", "rows": []}
    try:
        import flashinfer
        from flashinfer.autotuner import autotune
        res["flashinfer"] = flashinfer.__version__
        try:  # the autotuner profiles each tactic behind this module's delay kernel; without it every
            from flashinfer.tllm_utils import get_trtllm_utils_module  # tactic fails and it falls back
            get_trtllm_utils_module()  # to the default tactic
            res["fi_autotune_ready"] = True
        except Exception as ex:
            res["fi_autotune_ready"] = False
            print("FlashInfer's autotuner cannot profile (trtllm_utils):", repr(ex)[:200], flush=True)
    except Exception as ex:  # reported, not fatal: reference_impl still runs
        res["flashinfer_error"] = repr(ex)[:500]
        flashinfer = None
    path = os.path.join(args.out, "results_flashinfer.json")
    for mname in args.models.split(","):
        c = MODELS[mname]
        E, H, I, topk = c["E"], c["H"], c["I"], c["topk"]
        kw = dict(clamp_limit=c["clamp"], routed_scaling_factor=c["rsf"])
        base = make_problem(1, E, H, I, topk, device="cuda", seed=1)
        W = None
        if flashinfer is not None:
            try:
                t = time.time()
                W = flashinfer_weights(base, H, I)
                res.setdefault("fi_prepare_s", {})[mname] = time.time() - t
            except Exception as ex:
                res.setdefault("fi_errors", {})[mname] = traceback.format_exc()[-1500:]
                print("FlashInfer weight preparation failed", res["fi_errors"][mname], flush=True)
        if args.require_flashinfer and W is None:
            print("FlashInfer unavailable: stopping", res.get("flashinfer_error", ""), flush=True)
            return
        limit = torch.full((E,), float(c["clamp"]), dtype=torch.float32, device="cuda") if c["clamp"] else None
        for M in map(int, args.ms.split(",")):
            if time.time() - t0 > args.budget_s:
                print("budget reached, stopping", flush=True)
                break
            p, row = problem(mname, M, base, bw)
            ref = reference_mxfp4_moe(**p, **kw)
            cf = get_config(M, E, topk, H, I, dev_name)
            ours = lambda: grouped_mxfp4_moe(**p, config=cf, **kw)  # noqa: E731
            row["err_vs_reference"] = rel(ours(), ref)
            if row["err_vs_reference"] <= args.max_err:
                row["ms"] = time_graph(ours)
                row.update(config=cf, frac_roofline=row["roofline_ms"] / row["ms"],
                           tflops=row["flops"] / (row["ms"] * 1e-3) / 1e12)
                row["frac_dense"] = row["tflops"] / dense
            if W is not None:
                ids = p["topk_ids"].to(torch.int32)
                tw = p["topk_weights"].float() * (c["rsf"] or 1.0)
                tune_max = 1 << max(0, (M - 1).bit_length())  # SGLang's decode-mode bound
                fi = lambda: flashinfer_forward(W, p["hidden_states"], ids, tw, limit, tune_max)  # noqa: E731
                try:
                    row["fi_err_default"] = rel(fi(), ref)  # FlashInfer's default tactic
                    if row["fi_err_default"] <= args.max_err:
                        row["fi_default_ms"] = time_graph(fi)
                    t = time.time()
                    with autotune(True):
                        fi()
                    torch.cuda.synchronize()
                    row["fi_tune_s"] = time.time() - t
                    row["fi_autotuned"] = res["fi_autotune_ready"]
                    row["fi_err_vs_reference"] = rel(fi(), ref)
                    if row["fi_err_vs_reference"] <= args.max_err:
                        row["fi_ms"] = time_graph(fi)
                        row["fi_frac_roofline"] = row["roofline_ms"] / row["fi_ms"]
                        if "ms" in row:
                            row["x_fi"] = row["fi_ms"] / row["ms"]  # > 1: reference_impl faster
                except Exception:
                    row["fi_error"] = traceback.format_exc()[-1500:]
                    print("FlashInfer failed", row["fi_error"], flush=True)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                              if k not in ("config", "fi_error")}), flush=True)
            res["rows"].append(row)
            with open(path, "w") as f:
                json.dump(res, f, indent=1)
            if args.require_flashinfer and (W is None or "fi_error" in row or "fi_ms" not in row):
                print("FlashInfer did not run or check out: stopping", flush=True)
                return
        W = base = None
        torch.cuda.empty_cache()
    res["copy_bw_end_Bps"] = copy_bw()
    res["total_s"] = time.time() - t0
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(f"copy at end {res['copy_bw_end_Bps'] / 1e12:.2f} TB/s; total {res['total_s']:.0f}s")


if __name__ == "__main__":
    main()
