"""Host side of the prefill path (kernels/prefill_wgmma.py, and kernels/prefill_ws.py where a
GEMM's config has "ws": its warp-specialized form): which devices run it, its buffers, TMA
descriptors and launches. moe.py calls it between routing and the output.

Buffers (P = padded sorted rows, a multiple of BLOCK_M = the wgmma's n):
  xp  [P, H128] bf16  gathered hidden states in the kernels' k order, times 2**64
  act [P, I128] bf16  the gate/up epilogue's output, same order and lift
where X128 = X rounded up to the 128-value period of that order (zeros past X).
"""
from __future__ import annotations

import torch
import triton

try:  # Gluon's Hopper modules; absent from some Triton builds
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from .kernels import prefill_wgmma as _k
    from .kernels import prefill_ws as _ws
except Exception:  # pragma: no cover - depends on the installed Triton
    _k = None
from . import arch as _arch
from .configs import check_wgmma_config as check_config, reg_cap, token_parts  # noqa: F401  (check_config: the path's own name)
from .kernels.prep_act import prefill_prep_kernel

PREP_ROWS, PREP_BLOCK = 16, 256
# registers of each warp-specialized partition but the first, by partition count: what is left
# of the 64K register file (the first takes the rest); 3 partitions leave room for BLOCK_M = 160.
# A config's "CREGS" overrides it (experimental: no shipped or default config does), as "PF" (the
# plain kernels' register prefetch depth, 2: experimental; measured slower, bench/NOTES.md v8)
CREGS = {2: 120, 3: 160, 4: 120}


def usable(cfg: dict, dev: torch.device) -> bool:
    """Where a config asks for the prefill path and the device may run it (arch.py: sm_90 only;
    REFIMPL_WGMMA=0 turns it off). A prefill config the kernels cannot take is an error, not a
    silent fallback."""
    if cfg.get("path") != "wgmma":
        return False
    check_config(cfg)
    if _k is None or dev.type != "cuda":
        return False
    return _arch.for_device(dev).wgmma


def _pad128(n: int) -> int:
    return triton.cdiv(n, 128) * 128


def _desc(t: torch.Tensor, bn: int):
    layout = gl.NVMMASharedLayout.get_default_for([bn, _k.KS.value], gl.bfloat16)
    return TensorDescriptor.from_tensor(t, [bn, _k.KS.value], layout)


def prep(x, sorted_slots, S, topk, P):
    H = x.shape[1]
    xp = torch.empty(P, _pad128(H), dtype=torch.bfloat16, device=x.device)
    prefill_prep_kernel[(P // PREP_ROWS, triton.cdiv(xp.shape[1], PREP_BLOCK))](
        x, xp, sorted_slots, S, H, xp.shape[1], topk, x.stride(0), xp.stride(0),
        ROWS=PREP_ROWS, BLOCK=PREP_BLOCK, num_warps=4)
    return xp


def gemm1(xp, w13, s13, sorted_slots, block_expert, S, H, I, parts, c1, clamp, has_clamp, poison):
    P = xp.shape[0]
    bn, t0, t1 = sum(parts), parts[0], parts[1]
    act = torch.empty(P, _pad128(I), dtype=torch.bfloat16, device=xp.device)
    if poison:
        act.fill_(float("nan"))
    args = (_desc(xp, t0 + t1), _desc(xp, bn - t0 - t1), w13.view(torch.int32), s13, act, sorted_slots, block_expert,
            S, H, xp.shape[1], I)
    strides = (w13.stride(0), w13.stride(1), s13.stride(0), s13.stride(1), act.stride(0), clamp)
    cw = c1.get("ws")
    if cw:  # warp-specialized: cw warpgroups of 32 stacked features each share a B tile
        NT = triton.cdiv(act.shape[1], 32 * cw)
        extra = reg_cap(c1)
        _ws.prefill_gemm1_ws_kernel[(P // bn * NT,)](
            *args, NT, *strides, HAS_CLAMP=has_clamp, BN=bn, T0=t0, T1=t1, STAGES=c1.get("STAGES", 4), CW=cw,
            LAG=c1.get("LAG", 1), MASK=not (H % 128 == 0 and I % 128 == 0), CREGS=c1.get("CREGS", CREGS[cw]),
            num_warps=4, **extra)
        return act
    nw = c1.get("num_warps", 4)
    NT = act.shape[1] // (16 * nw)
    _k.prefill_gemm1_swiglu_kernel[(P // bn * NT,)](
        *args, NT, *strides, HAS_CLAMP=has_clamp, BN=bn, T0=t0, T1=t1, STAGES=c1.get("STAGES", 4), NW=nw,
        WC=c1.get("w_cache", ""), PF=c1.get("PF", 1), MASK=not (H % 128 == 0 and I % 128 == 0), num_warps=nw)
    return act


def gemm2(act, w2, s2, buf, sorted_slots, block_expert, tw, S, H, I, topk, parts, c2, rsf, mode):
    P = act.shape[0]
    bn, t0, t1 = sum(parts), parts[0], parts[1]
    args = (_desc(act, t0 + t1), _desc(act, bn - t0 - t1), w2.view(torch.int32), s2, buf, sorted_slots, block_expert,
            tw, S, H, I, act.shape[1])
    strides = (w2.stride(0), w2.stride(1), s2.stride(0), s2.stride(1), buf.stride(0), rsf)
    cw = c2.get("ws")
    if cw:  # warp-specialized: cw warpgroups of 64 output columns each share a B tile
        NT = triton.cdiv(H, 64 * cw)
        extra = reg_cap(c2)
        _ws.prefill_gemm2_ws_kernel[(P // bn * NT,)](
            *args, NT, topk, *strides, OUT_MODE=mode, BN=bn, T0=t0, T1=t1, STAGES=c2.get("STAGES", 4), CW=cw,
            AV=c2.get("atom_vec", 2), LAG=c2.get("LAG", 1), MASK=I % 128 != 0, CREGS=c2.get("CREGS", CREGS[cw]),
            num_warps=4, **extra)
        return
    nw = c2.get("num_warps", 4)
    NT = triton.cdiv(H, 16 * nw)
    _k.prefill_gemm2_combine_kernel[(P // bn * NT,)](
        *args, NT, topk, *strides, OUT_MODE=mode, BN=bn, T0=t0, T1=t1, STAGES=c2.get("STAGES", 4), NW=nw,
        WC=c2.get("w_cache", ""), PF=c2.get("PF", 1), AV=c2.get("atom_vec", 2),
        MASK=not (I % 128 == 0 and H % (16 * nw) == 0), num_warps=nw)
