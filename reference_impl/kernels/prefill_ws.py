"""Warp-specialized gate/up GEMM of the prefill path (Gluon, sm_90).

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
partitions to warpgroups and splits one register file among them.)

Numerics and the k order are prefill_wgmma's (physical_k, the 2**64 lift, HALF).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from .prefill_wgmma import (
    KS, _a_stage, _acc_parts, _block_tile, _feature, _load_stage, _mma_parts, _swiglu_store, _unstack,
    _word_ids,
)


@gluon.jit
def _consume(c: gl.constexpr, x_desc, smem, full, empty, w_ptr, s_ptr, act_ptr, e, b, nt, parts, nk,
             K, I, stride_we, stride_wn, stride_se, stride_sn, stride_am, clamp_limit,
             HAS_CLAMP: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, CW: gl.constexpr,
             LAG: gl.constexpr, MASK: gl.constexpr):
    """Warpgroup c: features [32 (CW nt + c), + 32) of token block b (and the ring if c == 0)."""
    rho, ml, t4 = _word_ids(4)
    col0 = nt * (32 * CW) + c * 32
    f, row_ok = _feature(col0 + (rho // 16) * 8 + rho % 8, I)
    row = f + ((rho // 8) % 2) * I  # up rows sit 8 below their gate rows
    w_rows = w_ptr + e * (stride_we // 4) + row.to(gl.int64) * (stride_wn // 4) + t4 * 4 + ml
    s_rows = s_ptr + e * stride_se + row.to(gl.int64) * stride_sn + t4
    KG = K // 32

    p0, p1, p2 = _acc_parts(64, BN)
    wd, sc = _load_stage(w_rows, s_rows, 0, row_ok, t4, KG, MASK, "")
    for kt in range(nk):
        a = _a_stage(wd, sc, BN // 4)
        wd, sc = _load_stage(w_rows, s_rows, gl.minimum(kt + 1, nk - 1), row_ok, t4, KG, MASK, "")
        s = kt % STAGES
        mbarrier.wait(full.index(s), (kt // STAGES) & 1)
        p0, p1, p2 = _mma_parts(a, smem.index(s), p0, p1, p2, parts, BN)
        gl.thread_barrier()  # every warp of the group is past its MMAs on slot s (a partition barrier)
        mbarrier.arrive(empty.index(s), count=1)
        if c == 0:
            old = kt - LAG
            if (old >= 0) & (old + STAGES < nk):
                so = old % STAGES
                mbarrier.wait(empty.index(so), (old // STAGES) & 1)
                mbarrier.expect(full.index(so), BN * KS * 2)
                tma.async_copy_global_to_shared(x_desc, [b * BN, (old + STAGES) * KS], full.index(so), smem.index(so))

    g0, u0 = _unstack(p0)
    _swiglu_store(g0, u0, act_ptr, b * BN, col0, stride_am, clamp_limit, HAS_CLAMP)
    if parts > 1:
        g1, u1 = _unstack(p1)
        _swiglu_store(g1, u1, act_ptr, b * BN + BN // 4, col0, stride_am, clamp_limit, HAS_CLAMP)
    if parts > 2:
        g2, u2 = _unstack(p2)
        _swiglu_store(g2, u2, act_ptr, b * BN + BN // 2, col0, stride_am, clamp_limit, HAS_CLAMP)


@gluon.jit
def prefill_gemm1_ws_kernel(
    x_desc, w_ptr, s_ptr, act_ptr, sorted_ptr, block_expert_ptr,
    S, K, KP, I, NT, stride_we, stride_wn, stride_se, stride_sn, stride_am, clamp_limit,
    HAS_CLAMP: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, CW: gl.constexpr, MASK: gl.constexpr,
    LAG: gl.constexpr = 1, CREGS: gl.constexpr = 120,
):
    """prefill_gemm1_swiglu_kernel's output (stacked form) for 32 CW features a program;
    launched with num_warps=4 (warpgroup 0) and CW - 1 more warpgroups as partitions."""
    b, nt, e = _block_tile(block_expert_ptr, NT)
    if e < 0:
        return
    nk = KP // KS
    smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BN, KS], x_desc.layout)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=CW)
    for i in gl.static_range(STAGES):
        if i < nk:
            mbarrier.expect(full.index(i), BN * KS * 2)
            tma.async_copy_global_to_shared(x_desc, [b * BN, i * KS], full.index(i), smem.index(i))
    row0 = b * BN
    parts = 1 + (gl.load(sorted_ptr + row0 + BN // 4) < S).to(gl.int32) + (gl.load(sorted_ptr + row0 + BN // 2) < S).to(gl.int32)
    # the partitions' arguments are spelled out: Gluon passes a built tuple's constexprs as tensors
    if CW == 2:
        gl.warp_specialize([
            (_consume, (0, x_desc, smem, full, empty, w_ptr, s_ptr, act_ptr, e, b, nt, parts, nk, K, I, stride_we,
                        stride_wn, stride_se, stride_sn, stride_am, clamp_limit, HAS_CLAMP, BN, STAGES, CW, LAG, MASK)),
            (_consume, (1, x_desc, smem, full, empty, w_ptr, s_ptr, act_ptr, e, b, nt, parts, nk, K, I, stride_we,
                        stride_wn, stride_se, stride_sn, stride_am, clamp_limit, HAS_CLAMP, BN, STAGES, CW, LAG, MASK))],
            [4], [CREGS])
    else:
        gl.warp_specialize([
            (_consume, (0, x_desc, smem, full, empty, w_ptr, s_ptr, act_ptr, e, b, nt, parts, nk, K, I, stride_we,
                        stride_wn, stride_se, stride_sn, stride_am, clamp_limit, HAS_CLAMP, BN, STAGES, CW, LAG, MASK)),
            (_consume, (1, x_desc, smem, full, empty, w_ptr, s_ptr, act_ptr, e, b, nt, parts, nk, K, I, stride_we,
                        stride_wn, stride_se, stride_sn, stride_am, clamp_limit, HAS_CLAMP, BN, STAGES, CW, LAG, MASK)),
            (_consume, (2, x_desc, smem, full, empty, w_ptr, s_ptr, act_ptr, e, b, nt, parts, nk, K, I, stride_we,
                        stride_wn, stride_se, stride_sn, stride_am, clamp_limit, HAS_CLAMP, BN, STAGES, CW, LAG, MASK)),
            (_consume, (3, x_desc, smem, full, empty, w_ptr, s_ptr, act_ptr, e, b, nt, parts, nk, K, I, stride_we,
                        stride_wn, stride_se, stride_sn, stride_am, clamp_limit, HAS_CLAMP, BN, STAGES, CW, LAG, MASK))],
            [4, 4, 4], [CREGS, CREGS, CREGS])
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(full.index(i))
        mbarrier.invalidate(empty.index(i))
