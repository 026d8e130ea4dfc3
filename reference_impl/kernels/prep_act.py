"""Decode path's first launch after routing: the hidden states as the MMA's B pairs
(within every 8 values the order k0 k4 k1 k5 k2 k6 k3 k7, times 2**64; see
decode_mma.py) and, in the same pass, the zeroed output that the down GEMM's
atomics accumulate into. It replaces the output's memset launch, so the
decode kernels pair no activations themselves. route_prep_kernel runs it in the
routing's launch."""
import triton
import triton.language as tl

from .route import route_program

LIFT = tl.constexpr(1.8446744073709552e19)  # 2**64: the Gluon kernels' activation lift (decode_mma.LIFT)


@triton.jit
def prep_act_kernel(x_ptr, xb_ptr, out_ptr, n, H, stride_xm, stride_bm, stride_om,
                    ZERO_OUT: tl.constexpr, BLOCK: tl.constexpr):
    prep_act_block(tl.program_id(0), x_ptr, xb_ptr, out_ptr, n, H, stride_xm, stride_bm, stride_om, ZERO_OUT, BLOCK)


@triton.jit
def prep_act_block(blk, x_ptr, xb_ptr, out_ptr, n, H, stride_xm, stride_bm, stride_om,
                   ZERO_OUT: tl.constexpr, BLOCK: tl.constexpr):
    """Values blk * BLOCK .. + BLOCK of the flattened [M, H] hidden states."""
    offs = blk * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    row = offs // H
    col = offs % H
    x = tl.load(x_ptr + row * stride_xm + col, mask=ok, other=0.0)
    pcol = (col & ~7) | ((col & 3) << 1) | ((col >> 2) & 1)
    tl.store(xb_ptr + row * stride_bm + pcol, (x.to(tl.float32) * LIFT).to(tl.bfloat16), mask=ok)
    if ZERO_OUT:
        tl.store(out_ptr + row * stride_om + col, tl.zeros([BLOCK], dtype=out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def route_prep_kernel(
    ids_ptr, sorted_ptr, block_expert_ptr, scratch_ptr, S, E, P, NB,
    x_ptr, xb_ptr, out_ptr, n, H, stride_xm, stride_bm, stride_om,
    S_PAD: tl.constexpr, E_PAD: tl.constexpr, BLOCK_M: tl.constexpr, FILL: tl.constexpr,
    ZERO_OUT: tl.constexpr, BLOCK: tl.constexpr,
):
    """Routing (program 0) and prep_act (programs 1..) in one launch: at decode sizes a
    launch costs about as much as either kernel's work, and the two are independent."""
    pid = tl.program_id(0)
    if pid == 0:
        route_program(ids_ptr, sorted_ptr, block_expert_ptr, scratch_ptr, S, E, P, NB, S_PAD, E_PAD, BLOCK_M, FILL)
    else:
        prep_act_block(pid - 1, x_ptr, xb_ptr, out_ptr, n, H, stride_xm, stride_bm, stride_om, ZERO_OUT, BLOCK)


@triton.jit
def prefill_prep_kernel(x_ptr, xp_ptr, sorted_ptr, S, K, KP, TOPK, stride_xm, stride_pm,
                        ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """Prefill path's B operand: xp[row, 128 c + L] = x[token of sorted row, 128 c +
    physical_k(L)] * 2**64 (prefill_wgmma.py's k order), zero from K to KP. One program =
    ROWS padded rows x BLOCK columns (a multiple of 128). Padding rows are left unwritten:
    a token column of the MMA only reaches its own outputs, which are never stored."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    slot = tl.load(sorted_ptr + rows)
    ok = slot < S
    if tl.max(ok.to(tl.int32), 0) == 0:
        return
    k = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    tok = (slot // TOPK).to(tl.int64)
    x = tl.load(x_ptr + tok[:, None] * stride_xm + k[None, :], mask=ok[:, None] & (k < K)[None, :], other=0.0)
    # within 128 values: physical k = 32 t4 + 8 m + 4 lo + 2 h + hi -> logical 32 m + 16 h + 8 hi + 2 t4 + lo
    x = tl.reshape(x, [ROWS, BLOCK // 128, 4, 4, 2, 2, 2])
    x = tl.reshape(tl.permute(x, (0, 1, 3, 5, 6, 2, 4)), [ROWS, BLOCK])
    dst = xp_ptr + rows[:, None].to(tl.int64) * stride_pm + k[None, :]
    tl.store(dst, (x.to(tl.float32) * LIFT).to(tl.bfloat16), mask=ok[:, None] & (k < KP)[None, :])
