"""Warp-specialized GEMMs of the prefill path (Gluon, sm_90).

Why: prefill_wgmma's gate/up GEMM re-reads the token tile B once per 64 (or, with two
warpgroups, 128) weight rows, and at M=4096 those re-reads keep L2 near its limit
(bench/NOTES.md, v8/v9: four warpgroups per SM run no faster than two, and halving the
rows per B tile made it slower). Sharing one B tile between more warpgroups needs them
to run out of step, which the plain kernel cannot: Triton puts a CTA barrier around each
TMA refill of the ring, and the warpgroups then dequantize, and multiply, at the same
time. Here CW warpgroups are separate partitions (gl.warp_specialize), each taking 64
MMA rows of the tile: 32 features in the stacked form of prefill_wgmma (gate rows g,
up rows g + 8 of each warp's slab), so a B tile serves 64 CW weight rows. The ring has
`full` barriers (TMA bytes landed) and `empty` ones (each warpgroup arrives once it is
past its MMAs on a slot). Warpgroup 0 also refills the ring: at stage kt it waits until
every warpgroup released stage kt - LAG and loads stage kt - LAG + STAGES into that
slot, so the others may trail it by up to LAG stages and otherwise run out of step.
(A dedicated producer warp would cost a whole extra warpgroup of registers: Triton pads
partitions to warpgroups and splits one register file among them.) The down GEMM has the
same structure with 64 output columns a warpgroup and prefill_wgmma's combine epilogue.

Numerics and the k order are prefill_wgmma's (physical_k, the 2**64 lift, HALF).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from .compat import cta_barrier
from .gluon_common import release_barriers
from .prefill_wgmma import (
    KS, a_stage, acc_parts, block_tile, combine_parts, wgmma_feature, load_stage, mma_parts, wgmma_swiglu_store, unstack,
    word_ids, fetch_b, parts_used, ring_rows,
)


@gluon.jit
def _ring(hd, td, sorted_ptr, S, row0, KP, BN: gl.constexpr, T0: gl.constexpr, T1: gl.constexpr,
          STAGES: gl.constexpr, CW: gl.constexpr):
    """The B ring (prefill_wgmma._ring's head and tail boxes a slot; `full`: TMA landed; `empty`: all
    CW warpgroups are past a slot), its first STAGES stages in flight; with the block's parts_used
    and its count of K stages."""
    nk = KP // KS
    parts = parts_used(sorted_ptr, row0, S, T0, T1)
    smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, ring_rows(BN), KS], hd.layout)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=CW)
    for i in gl.static_range(STAGES):
        if i < nk:
            fetch_b(hd, td, smem, full.index(i), i, row0, i, parts, T0, T1, BN)
    return smem, full, empty, parts, nk


@gluon.jit
def _mainloop(c: gl.constexpr, w_rows, s_rows, row_ok, t4, KG, hd, td, smem, full, empty, row0, parts, nk,
              BN: gl.constexpr, T0: gl.constexpr, T1: gl.constexpr, STAGES: gl.constexpr, LAG: gl.constexpr,
              MASK: gl.constexpr):
    """One warpgroup's 64 MMA rows x the block's tokens over all of K; warpgroup 0 refills the ring."""
    p0, p1, p2 = acc_parts(64, T0, T1, BN)
    wd, sc = load_stage(w_rows, s_rows, 0, row_ok, t4, KG, MASK, "")
    for kt in range(nk):
        a = a_stage(wd, sc, T0)
        wd, sc = load_stage(w_rows, s_rows, gl.minimum(kt + 1, nk - 1), row_ok, t4, KG, MASK, "")
        s = kt % STAGES
        mbarrier.wait(full.index(s), (kt // STAGES) & 1)
        p0, p1, p2 = mma_parts(a, smem.index(s), p0, p1, p2, parts, T0, T1, BN)
        cta_barrier()  # every warp of the group is past its MMAs on slot s (a partition barrier)
        mbarrier.arrive(empty.index(s), count=1)
        if c == 0:
            old = kt - LAG
            if (old >= 0) & (old + STAGES < nk):
                so = old % STAGES
                mbarrier.wait(empty.index(so), (old // STAGES) & 1)
                fetch_b(hd, td, smem, full.index(so), so, row0, old + STAGES, parts, T0, T1, BN)
    return p0, p1, p2


@gluon.jit
def _gate_up(c: gl.constexpr, rt, HAS_CLAMP: gl.constexpr, BN: gl.constexpr, T0: gl.constexpr, T1: gl.constexpr,
             STAGES: gl.constexpr, CW: gl.constexpr, LAG: gl.constexpr, MASK: gl.constexpr):
    """Warpgroup c of the gate/up GEMM: features [32 (CW nt + c), + 32) of token block b."""
    (hd, td, smem, full, empty, w_ptr, s_ptr, act_ptr, e, b, nt, parts, nk, K, I,
     stride_we, stride_wn, stride_se, stride_sn, stride_am, clamp_limit) = rt
    rho, ml, t4 = word_ids(4)
    col0 = nt * (32 * CW) + c * 32
    f, row_ok = wgmma_feature(col0 + (rho // 16) * 8 + rho % 8, I)
    # up rows sit 8 below their gate rows; features past I (a CW = 3 tile past the last
    # feature, whose result is not stored) read row I - 1 where the loads are not masked
    row = gl.minimum(f, I - 1) + ((rho // 8) % 2) * I
    w_rows = w_ptr + e * (stride_we // 4) + row.to(gl.int64) * (stride_wn // 4) + t4 * 4 + ml
    s_rows = s_ptr + e * stride_se + row.to(gl.int64) * stride_sn + t4
    p0, p1, p2 = _mainloop(c, w_rows, s_rows, row_ok, t4, K // 32, hd, td, smem, full, empty, b * BN, parts, nk,
                           BN, T0, T1, STAGES, LAG, MASK)
    if col0 < (I + 127) // 128 * 128:  # with CW = 3 the last tile reaches past act's width
        g0, u0 = unstack(p0)
        wgmma_swiglu_store(g0, u0, act_ptr, b * BN, col0, stride_am, clamp_limit, HAS_CLAMP)
        if parts > 1:
            g1, u1 = unstack(p1)
            wgmma_swiglu_store(g1, u1, act_ptr, b * BN + T0, col0, stride_am, clamp_limit, HAS_CLAMP)
        if parts > 2:
            g2, u2 = unstack(p2)
            wgmma_swiglu_store(g2, u2, act_ptr, b * BN + T0 + T1, col0, stride_am, clamp_limit, HAS_CLAMP)


@gluon.jit
def _down(c: gl.constexpr, rt, OUT_MODE: gl.constexpr, AV: gl.constexpr, BN: gl.constexpr, T0: gl.constexpr,
          T1: gl.constexpr, STAGES: gl.constexpr, CW: gl.constexpr, LAG: gl.constexpr, MASK: gl.constexpr):
    """Warpgroup c of the down GEMM: output columns [64 (CW nt + c), + 64) of token block b."""
    (hd, td, smem, full, empty, w_ptr, s_ptr, out_ptr, sorted_ptr, topk_w_ptr, e, b, nt, parts, nk, S, N, K,
     TOPK, stride_we, stride_wn, stride_se, stride_sn, stride_om, scale_factor) = rt
    rho, ml, t4 = word_ids(4)
    tile = nt * CW + c
    n = tile * 64 + rho
    nl = gl.minimum(n, N - 1)  # columns past N (not stored) read row N - 1 where loads are not masked
    w_rows = w_ptr + e * (stride_we // 4) + nl.to(gl.int64) * (stride_wn // 4) + t4 * 4 + ml
    s_rows = s_ptr + e * stride_se + nl.to(gl.int64) * stride_sn + t4
    p0, p1, p2 = _mainloop(c, w_rows, s_rows, n < N, t4, K // 32, hd, td, smem, full, empty, b * BN, parts, nk,
                           BN, T0, T1, STAGES, LAG, MASK)
    combine_parts(p0, p1, p2, parts, out_ptr, sorted_ptr, topk_w_ptr, b * BN, tile, S, N, TOPK, stride_om,
                   scale_factor, OUT_MODE, AV)


# The partitions get their runtime arguments as one tuple and their constexprs spelled out:
# Gluon hands a built tuple's constexprs to a partition as tensors.

@gluon.jit
def prefill_gemm1_ws_kernel(
    x_desc, xt_desc, w_ptr, s_ptr, act_ptr, sorted_ptr, block_expert_ptr,
    S, K, KP, I, NT, stride_we, stride_wn, stride_se, stride_sn, stride_am, clamp_limit,
    HAS_CLAMP: gl.constexpr, BN: gl.constexpr, T0: gl.constexpr, T1: gl.constexpr, STAGES: gl.constexpr,
    CW: gl.constexpr, MASK: gl.constexpr, LAG: gl.constexpr = 1, CREGS: gl.constexpr = 120,
):
    """prefill_gemm1_swiglu_kernel's output (stacked form) for 32 CW features a program;
    launched with num_warps=4 (warpgroup 0) and CW - 1 more warpgroups as partitions."""
    b, nt, e = block_tile(block_expert_ptr, NT)
    if e < 0:
        return
    smem, full, empty, parts, nk = _ring(x_desc, xt_desc, sorted_ptr, S, b * BN, KP, BN, T0, T1, STAGES, CW)
    rt = (x_desc, xt_desc, smem, full, empty, w_ptr, s_ptr, act_ptr, e, b, nt, parts, nk,
          K, I, stride_we, stride_wn, stride_se, stride_sn, stride_am, clamp_limit)
    if CW == 2:
        gl.warp_specialize([(_gate_up, (0, rt, HAS_CLAMP, BN, T0, T1, STAGES, CW, LAG, MASK)),
                            (_gate_up, (1, rt, HAS_CLAMP, BN, T0, T1, STAGES, CW, LAG, MASK))], [4], [CREGS])
    elif CW == 3:
        gl.warp_specialize([(_gate_up, (0, rt, HAS_CLAMP, BN, T0, T1, STAGES, CW, LAG, MASK)),
                            (_gate_up, (1, rt, HAS_CLAMP, BN, T0, T1, STAGES, CW, LAG, MASK)),
                            (_gate_up, (2, rt, HAS_CLAMP, BN, T0, T1, STAGES, CW, LAG, MASK))], [4, 4], [CREGS] * 2)
    else:
        gl.warp_specialize([(_gate_up, (0, rt, HAS_CLAMP, BN, T0, T1, STAGES, CW, LAG, MASK)),
                            (_gate_up, (1, rt, HAS_CLAMP, BN, T0, T1, STAGES, CW, LAG, MASK)),
                            (_gate_up, (2, rt, HAS_CLAMP, BN, T0, T1, STAGES, CW, LAG, MASK)),
                            (_gate_up, (3, rt, HAS_CLAMP, BN, T0, T1, STAGES, CW, LAG, MASK))], [4, 4, 4], [CREGS] * 3)
    release_barriers(full, STAGES)
    release_barriers(empty, STAGES)


@gluon.jit
def prefill_gemm2_ws_kernel(
    a_desc, at_desc, w_ptr, s_ptr, out_ptr, sorted_ptr, block_expert_ptr, topk_w_ptr,
    S, N, K, KP, NT, TOPK, stride_we, stride_wn, stride_se, stride_sn, stride_om, scale_factor,
    OUT_MODE: gl.constexpr, BN: gl.constexpr, T0: gl.constexpr, T1: gl.constexpr, STAGES: gl.constexpr,
    CW: gl.constexpr, MASK: gl.constexpr, AV: gl.constexpr = 8, LAG: gl.constexpr = 1, CREGS: gl.constexpr = 120,
):
    """prefill_gemm2_combine_kernel's output for 64 CW output columns a program (partitions
    as in prefill_gemm1_ws_kernel)."""
    b, nt, e = block_tile(block_expert_ptr, NT)
    if e < 0:
        return
    smem, full, empty, parts, nk = _ring(a_desc, at_desc, sorted_ptr, S, b * BN, KP, BN, T0, T1, STAGES, CW)
    rt = (a_desc, at_desc, smem, full, empty, w_ptr, s_ptr, out_ptr, sorted_ptr, topk_w_ptr, e, b, nt, parts, nk,
          S, N, K, TOPK, stride_we, stride_wn, stride_se, stride_sn, stride_om, scale_factor)
    if CW == 2:
        gl.warp_specialize([(_down, (0, rt, OUT_MODE, AV, BN, T0, T1, STAGES, CW, LAG, MASK)),
                            (_down, (1, rt, OUT_MODE, AV, BN, T0, T1, STAGES, CW, LAG, MASK))], [4], [CREGS])
    elif CW == 3:
        gl.warp_specialize([(_down, (0, rt, OUT_MODE, AV, BN, T0, T1, STAGES, CW, LAG, MASK)),
                            (_down, (1, rt, OUT_MODE, AV, BN, T0, T1, STAGES, CW, LAG, MASK)),
                            (_down, (2, rt, OUT_MODE, AV, BN, T0, T1, STAGES, CW, LAG, MASK))], [4, 4], [CREGS] * 2)
    else:
        gl.warp_specialize([(_down, (0, rt, OUT_MODE, AV, BN, T0, T1, STAGES, CW, LAG, MASK)),
                            (_down, (1, rt, OUT_MODE, AV, BN, T0, T1, STAGES, CW, LAG, MASK)),
                            (_down, (2, rt, OUT_MODE, AV, BN, T0, T1, STAGES, CW, LAG, MASK)),
                            (_down, (3, rt, OUT_MODE, AV, BN, T0, T1, STAGES, CW, LAG, MASK))], [4, 4, 4],
                           [CREGS] * 3)
    release_barriers(full, STAGES)
    release_barriers(empty, STAGES)
