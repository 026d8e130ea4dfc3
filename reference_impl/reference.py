"""Plain-PyTorch MXFP4 MoE forward: the definition of correctness.

Layout (SGLang's MXFP4 MoE contract):
  w13_packed [E, 2I, H/2] int8/uint8, two e2m1 codes per byte, low nibble = even k;
             rows 0..I-1 are the gate projection, rows I..2I-1 the up projection.
  w2_packed  [E, H, I/2]
  scales     [E, N, K/32], one E8M0 exponent per 32 consecutive k
             (float8_e8m0fnu, uint8 holding the E8M0 bits, or float32 holding 2**x).
  topk_ids   [M, topk] int32/int64, -1 (or any id outside [0, E)) = slot contributes nothing.

out[m] = rsf * sum_j topk_weights[m, j] * W2[e_j] @ (silu(gate) * up),
gate/up = W13[e_j] @ x[m]; with clamp_limit: gate <= limit, -limit <= up <= limit.
"""
from __future__ import annotations

from typing import Optional

import torch

# e2m1 code -> value (sign bit is bit 3).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def scales_to_float(scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """E8M0 scales (float8_e8m0fnu, uint8 bits, or float) as real numbers."""
    if scale.dtype == torch.uint8:
        return torch.exp2(scale.to(dtype) - 127.0)
    return scale.to(dtype)


def dequant_mxfp4(packed: torch.Tensor, scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """[..., N, K/2] packed e2m1 + [..., N, K/32] scales -> [..., N, K] values."""
    b = packed.view(torch.uint8).to(torch.int64)
    lut = torch.tensor(E2M1_VALUES, dtype=dtype, device=packed.device)
    lo, hi = lut[b & 0xF], lut[b >> 4]
    vals = torch.stack((lo, hi), dim=-1).flatten(-2)  # even k from the low nibble
    s = scales_to_float(scale, dtype).repeat_interleave(32, dim=-1)
    return vals * s


def reference_mxfp4_moe(
    hidden_states: torch.Tensor,
    w13_packed: torch.Tensor,
    w2_packed: torch.Tensor,
    w13_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    hidden_size: int,
    intermediate_size: int,
    routed_scaling_factor: Optional[float] = None,
    clamp_limit: Optional[float] = None,
    inplace: bool = False,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Loop over the experts that are used; float32 math (float64 if asked), bf16 out.

    The SiLU-and-mul activation is rounded to the input dtype before the down
    projection, as a kernel that stores it does.
    """
    M = hidden_states.shape[0]
    I = intermediate_size
    E = w13_packed.shape[0]
    out = torch.zeros(M, hidden_size, dtype=compute_dtype, device=hidden_states.device)
    x = hidden_states.to(compute_dtype)
    ids = topk_ids.long()
    for e in torch.unique(ids).tolist():
        if e < 0 or e >= E:
            continue
        tok, pos = torch.nonzero(ids == e, as_tuple=True)
        w13 = dequant_mxfp4(w13_packed[e], w13_scale[e], compute_dtype)  # [2I, H]
        w2 = dequant_mxfp4(w2_packed[e], w2_scale[e], compute_dtype)     # [H, I]
        h = x[tok] @ w13.T
        gate, up = h[:, :I], h[:, I:]
        if clamp_limit is not None and clamp_limit > 0:
            gate = gate.clamp(max=clamp_limit)
            up = up.clamp(min=-clamp_limit, max=clamp_limit)
        act = torch.nn.functional.silu(gate) * up
        if compute_dtype != torch.float64:
            act = act.to(hidden_states.dtype).to(compute_dtype)
        down = act @ w2.T
        out.index_add_(0, tok, down * topk_weights[tok, pos].to(compute_dtype)[:, None])
    if routed_scaling_factor is not None:
        out = out * routed_scaling_factor
    return out.to(torch.bfloat16)
