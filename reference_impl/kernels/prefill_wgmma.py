"""Prefill path of the grouped MXFP4 MoE (Gluon, sm_90): wgmma with the e2m1 weights as
the A operand straight from registers and the token rows as B from a TMA ring.

Why: at large M the tl.dot kernels spend ~6 instructions per weight value moving the
dequantized tile into an MMA operand layout through shared memory, and mma.sync
(m16n8) needs many more instructions per FLOP than wgmma. Here, per warpgroup:

* A = 64 weight rows x 64 k of one stage, dequantized in registers into wgmma's
  register-A layout (each warp 16 rows; lane = 4 g + t4). A lane reads the 8 bytes
  (16 values) of rows r and r + 8 that its fragment needs: the same two-shift
  dequant and 2**(s - 64) scale fold as the decode path (decode_mma.py), one asm
  call per word whose eight bf16 outputs are the eight A elements that word feeds.
  The layout is built so that reaching wgmma's operand layout is a register
  renaming (convert_layout(..., assert_trivial=True) checks it at compile time).
* That places logical k = 32 m + 16 h + 8 hi + 2 t4 + lo of a 128-value chunk at
  physical k = 32 t4 + 8 m + 2 h + hi + 4 lo (t4 = the scale group). B must use
  the same order: the hidden states are gathered per sorted slot and permuted once
  (prefill_prep_kernel), and the gate/up epilogue writes the down GEMM's input in
  that order. The sum over k is order-free.
* B = BN token rows x 64 k, TMA-loaded into an STAGES-deep shared ring
  (mbarriers); wgmma runs asynchronously one stage behind the next stage's loads
  and dequant.
* The gate/up GEMM's 64 MMA rows are the features that land in 64 consecutive
  columns of the permuted activations, so its epilogue stores whole rows.

The activations carry 2**64 and the products 2x (decode_mma.py: LIFT, HALF), so the
valid E8M0 range is the decode path's (65..191).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier, tma, warpgroup_mma, warpgroup_mma_wait,
)

from .decode_mma import _DQ, HALF, LIFT, _scale_pair

ROWS = gl.constexpr(64)  # weight rows per program (wgmma's m)
KS = gl.constexpr(64)  # logical k per stage (one 128-byte TMA box row of bf16)
CHUNK = gl.constexpr(128)  # the permutation's period along k

# pack=8 over bf16 outputs: four 32-bit registers, element 2i in the low half of $i; the
# word and its scale pair arrive as eight copies each ($4.. and $12..): the first is used
A_ASM = gl.constexpr("{\n.reg .b32 m, s;\n" + _DQ.format(w="$4", o="$", sc="$12") + "}")
A_CONSTRAINTS = gl.constexpr("=r," * 4 + ",".join(["r"] * 16))


def physical_k(L: int) -> int:
    """Physical k (within a 128-value chunk) of logical position L; the kernels compute
    the same map inline (tests check the two agree)."""
    m, h, hi, t4, lo = L >> 5, (L >> 4) & 1, (L >> 3) & 1, (L >> 1) & 3, L & 1
    return 32 * t4 + 8 * m + 2 * h + hi + 4 * lo


@gluon.constexpr_function
def _view_layout():
    """[64 rows, 2 ml, 2 h, 2 hi, 4 t4, 2 lo] (k = 32 ml + 16 h + 8 hi + 2 t4 + lo within
    a stage): registers lo, hi, h (the eight values of one word), ml, then row + 8;
    lanes t4 then g; warps 16-row slabs. As a [64, 64] tensor this is wgmma's A layout."""
    def e(d, v):
        b = [0] * 6
        b[d] = v
        return b
    return gl.DistributedLinearLayout(
        reg_bases=[e(5, 1), e(3, 1), e(2, 1), e(1, 1), e(0, 8)],
        lane_bases=[e(4, 1), e(4, 2), e(0, 1), e(0, 2), e(0, 4)],
        warp_bases=[e(0, 16), e(0, 32)], block_bases=[], shape=[64, 2, 2, 2, 4, 2])


@gluon.constexpr_function
def _word_layout():  # [64, 2 ml, 4 t4]
    return gl.SliceLayout(2, gl.SliceLayout(3, gl.SliceLayout(5, _view_layout())))


@gluon.constexpr_function
def _acc_layout(BN):
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])


@gluon.jit
def _word_ids():
    """(row, ml, t4) index tensors of a stage's weight words, [64, 1, 1] / [1, 2, 1] / [1, 1, 4]."""
    WL: gl.constexpr = _word_layout()
    rho = gl.arange(0, 64, layout=gl.SliceLayout(1, gl.SliceLayout(2, WL)))
    ml = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(2, WL)))
    t4 = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, WL)))
    return (gl.expand_dims(gl.expand_dims(rho, 1), 2), gl.expand_dims(gl.expand_dims(ml, 0), 2),
            gl.expand_dims(gl.expand_dims(t4, 0), 1))


@gluon.jit
def _to_view(x):
    """[64, 2, 4] in the word layout -> [64, 2, 2, 2, 4, 2] in the view layout (broadcast)."""
    x6 = gl.expand_dims(gl.expand_dims(gl.expand_dims(x, 2), 3), 5)
    return x6.broadcast_to([64, 2, 2, 2, 4, 2])


@gluon.jit
def _a_stage(words, scales, BN: gl.constexpr):
    """words [64, 2, 4] int32, scales [64, 1, 4] E8M0 bytes -> A [64, 64] bf16 in wgmma's
    register layout, scale applied."""
    a = gl.inline_asm_elementwise(A_ASM, A_CONSTRAINTS, [_to_view(words), _to_view(_scale_pair(scales))],
                                  dtype=gl.bfloat16, is_pure=True, pack=8)
    a = gl.reshape(a, [64, 64])
    return gl.convert_layout(a, gl.DotOperandLayout(0, _acc_layout(BN), 2), assert_trivial=True)


@gluon.jit
def _load_stage(w_rows, s_rows, kt, row_ok, t4, KG, MASK: gl.constexpr, WC: gl.constexpr):
    """Words and scale bytes of stage kt: words 2 (kt % 2) + {0, 1} of group 4 c + t4 (c = kt // 2)."""
    c = kt // 2
    w_rows = w_rows + c * 16 + (kt % 2) * 2
    if MASK:
        ok = row_ok & (c * 4 + t4 < KG)
        wd = gl.load(w_rows, mask=ok, other=0, cache_modifier=WC)
        sc = gl.load(s_rows + c * 4, mask=ok, other=127)
    else:
        wd = gl.load(w_rows, cache_modifier=WC)
        sc = gl.load(s_rows + c * 4)
    return wd, sc


@gluon.jit
def _ring(BN: gl.constexpr, STAGES: gl.constexpr, desc):
    smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BN, KS], desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    return smem, bars


@gluon.jit
def _issue(desc, row0, kt, smem, bars, STAGES: gl.constexpr, BN: gl.constexpr):
    s = kt % STAGES
    mbarrier.expect(bars.index(s), BN * KS * 2)
    tma.async_copy_global_to_shared(desc, [row0, kt * KS], bars.index(s), smem.index(s))


@gluon.jit
def _wait(kt, smem, bars, STAGES: gl.constexpr):
    s = kt % STAGES
    mbarrier.wait(bars.index(s), (kt // STAGES) & 1)
    return smem.index(s).permute((1, 0))


@gluon.jit
def prefill_gemm1_swiglu_kernel(
    x_desc, w_ptr, s_ptr, act_ptr, block_expert_ptr,
    K, KP, I, NT, stride_we, stride_wn, stride_se, stride_sn, stride_am, clamp_limit,
    HAS_CLAMP: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, MASK: gl.constexpr,
    WC: gl.constexpr = "",
):
    """act[b*BN + t, 64 nt + j] = silu(gate) * up of feature 128 (nt // 2) + physical_k(64 (nt % 2) + j),
    times 2**64: the down GEMM's B in its permuted order. x_desc: the permuted, gathered hidden
    states [rows, KP] (prefill_prep_kernel); w_ptr: int32 view of w13; strides in bytes / elements
    of the uint8 tensors."""
    pid = gl.program_id(0)
    b = pid // NT  # tiles of one block run side by side, so its B rows stay in L2
    nt = pid % NT
    e = gl.load(block_expert_ptr + b)
    if e < 0:
        return
    e = e.to(gl.int64)
    rho, ml, t4 = _word_ids()
    # MMA row rho holds feature f: logical L = 64 (nt % 2) + rho of chunk nt // 2
    L = (nt % 2) * 64 + rho
    f = (nt // 2) * CHUNK + ((L >> 1) & 3) * 32 + (L >> 5) * 8 + ((L >> 4) & 1) * 2 + ((L >> 3) & 1) + (L & 1) * 4
    row_ok = f < I
    rw = stride_wn // 4
    g_rows = w_ptr + e * (stride_we // 4) + f.to(gl.int64) * rw + t4 * 4 + ml
    u_rows = g_rows + I * rw
    sg_rows = s_ptr + e * stride_se + f.to(gl.int64) * stride_sn + t4
    su_rows = sg_rows + I * stride_sn
    KG = K // 32
    nk = KP // KS

    smem, bars = _ring(BN, STAGES, x_desc)
    for i in gl.static_range(STAGES - 1):
        if i < nk:
            _issue(x_desc, b * BN, i, smem, bars, STAGES, BN)
    gacc = gl.zeros([64, BN], gl.float32, layout=_acc_layout(BN))
    uacc = gl.zeros([64, BN], gl.float32, layout=_acc_layout(BN))
    gw, gs = _load_stage(g_rows, sg_rows, 0, row_ok, t4, KG, MASK, WC)
    uw, us = _load_stage(u_rows, su_rows, 0, row_ok, t4, KG, MASK, WC)
    for kt in range(nk):
        ga = _a_stage(gw, gs, BN)
        ua = _a_stage(uw, us, BN)
        nx = gl.minimum(kt + 1, nk - 1)  # next stage's weights in flight during this stage's MMAs
        gw, gs = _load_stage(g_rows, sg_rows, nx, row_ok, t4, KG, MASK, WC)
        uw, us = _load_stage(u_rows, su_rows, nx, row_ok, t4, KG, MASK, WC)
        bt = _wait(kt, smem, bars, STAGES)
        gacc = warpgroup_mma(ga, bt, gacc, is_async=True)
        uacc = warpgroup_mma(ua, bt, uacc, is_async=True)
        gacc, uacc = warpgroup_mma_wait(0, deps=[gacc, uacc])
        if kt + STAGES - 1 < nk:  # the slot of stage kt - 1, whose MMAs are done
            _issue(x_desc, b * BN, kt + STAGES - 1, smem, bars, STAGES, BN)
    gacc, uacc = warpgroup_mma_wait(0, deps=[gacc, uacc])
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))

    gate = gacc * HALF
    up = uacc * HALF
    if HAS_CLAMP:
        gate = gl.minimum(gate, clamp_limit)
        up = gl.minimum(gl.maximum(up, -clamp_limit), clamp_limit)
    h = (gate / (1.0 + gl.exp(-gate)) * up * LIFT).to(gl.bfloat16)
    # each thread 8 consecutive columns of one row: 16-byte stores
    OL: gl.constexpr = gl.BlockedLayout([8, 1], [8, 4], [1, 4], [0, 1])
    h = gl.convert_layout(h, OL)
    j = gl.expand_dims(gl.arange(0, 64, layout=gl.SliceLayout(1, OL)), 1)
    t = gl.expand_dims(gl.arange(0, BN, layout=gl.SliceLayout(0, OL)), 0)
    gl.store(act_ptr + (b * BN + t).to(gl.int64) * stride_am + nt * 64 + j, h)


@gluon.jit
def prefill_gemm2_combine_kernel(
    a_desc, w_ptr, s_ptr, out_ptr, sorted_ptr, block_expert_ptr, topk_w_ptr,
    S, N, K, KP, NT, TOPK, stride_we, stride_wn, stride_se, stride_sn, stride_om, scale_factor,
    OUT_MODE: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, MASK: gl.constexpr,
    WC: gl.constexpr = "",
):
    """out[token] += w * rsf * act[b*BN + t] @ W2^T for 64 output columns (OUT_MODE as in
    gemm2_combine). a_desc: the gate/up epilogue's permuted activations [rows, KP]."""
    pid = gl.program_id(0)
    b = pid // NT
    nt = pid % NT
    e = gl.load(block_expert_ptr + b)
    if e < 0:
        return
    e = e.to(gl.int64)
    rho, ml, t4 = _word_ids()
    n = nt * 64 + rho
    row_ok = n < N
    w_rows = w_ptr + e * (stride_we // 4) + n.to(gl.int64) * (stride_wn // 4) + t4 * 4 + ml
    s_rows = s_ptr + e * stride_se + n.to(gl.int64) * stride_sn + t4
    KG = K // 32
    nk = KP // KS

    smem, bars = _ring(BN, STAGES, a_desc)
    for i in gl.static_range(STAGES - 1):
        if i < nk:
            _issue(a_desc, b * BN, i, smem, bars, STAGES, BN)
    acc = gl.zeros([64, BN], gl.float32, layout=_acc_layout(BN))
    wd, sc = _load_stage(w_rows, s_rows, 0, row_ok, t4, KG, MASK, WC)
    for kt in range(nk):
        a = _a_stage(wd, sc, BN)
        wd, sc = _load_stage(w_rows, s_rows, gl.minimum(kt + 1, nk - 1), row_ok, t4, KG, MASK, WC)
        bt = _wait(kt, smem, bars, STAGES)
        acc = warpgroup_mma(a, bt, acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=[acc])
        if kt + STAGES - 1 < nk:
            _issue(a_desc, b * BN, kt + STAGES - 1, smem, bars, STAGES, BN)
    acc = warpgroup_mma_wait(0, deps=[acc])
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))

    # each thread two consecutive output columns of one token (paired bf16 atomics)
    OL: gl.constexpr = gl.BlockedLayout([2, 1], [32, 1], [1, 4], [0, 1])
    v = gl.convert_layout(acc, OL)
    col = nt * 64 + gl.expand_dims(gl.arange(0, 64, layout=gl.SliceLayout(1, OL)), 1)
    slot = gl.expand_dims(gl.load(sorted_ptr + b * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, OL))), 0)
    ok = (slot < S) & (col < N)
    wt = gl.load(topk_w_ptr + slot, mask=ok, other=0.0).to(gl.float32) * (scale_factor * HALF)
    v = v * wt
    if OUT_MODE == 2:
        gl.store(out_ptr + slot.to(gl.int64) * stride_om + col, v, mask=ok)
    else:
        tok = (slot // TOPK).to(gl.int64)
        gl.atomic_add(out_ptr + tok * stride_om + col, v.to(out_ptr.dtype.element_ty), mask=ok, sem="relaxed")
