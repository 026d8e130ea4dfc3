"""Prefill path of the grouped MXFP4 MoE (Gluon, sm_90): wgmma with the e2m1 weights as
the A operand straight from registers and the token rows as B from a TMA ring.

Why: at large M the tl.dot kernels spend ~6 instructions per weight value moving the
dequantized tile into an MMA operand layout through shared memory, and mma.sync
(m16n8) needs many more instructions per FLOP than wgmma. A program = ROWS = 16 * NW
weight rows (one or two warpgroups) x BN token rows of one expert block. Per warpgroup:

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
  (mbarriers), shared by the program's warpgroups. Two warpgroups (NW = 8) halve the
  L2 traffic of the B tiles, which every row tile re-reads; on the H200 that lost to
  the occupancy it costs (bench/NOTES.md, v8, as for dequantizing the next stage during
  the MMAs, also slower), and warpgroups sharing a ring here run in lockstep (a CTA
  barrier around each refill): prefill_ws.py shares one between three or four warpgroup
  partitions instead. The next stage's weight words are loaded before this stage's MMAs.
* The MMA's token dim is split in three parts (T0, T1, BN - T0 - T1 tokens; by default
  BN/4, BN/4, BN/2) with their own accumulators; the last block of an expert skips the
  parts past its last token. A block pays its weight dequant whatever its token count, so
  BN may exceed 128 (e.g. 128 + 16): each B stage is then two TMA boxes, parts 0 + 1 and
  part 2, each a power of two rows.
* The gate/up GEMM's MMA rows are the features that land in ROWS consecutive
  columns of the permuted activations, so its epilogue stores whole rows. The down
  GEMM adds its top-k results with AV-wide bf16 atomics (AV = 8: 16-byte vectors).

The activations carry 2**64 and the products 2x (decode_mma.py: LIFT, HALF), so the
valid E8M0 range is the decode path's (65..191).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier, warpgroup_mma, warpgroup_mma_wait,
)

from .compat import tma_load
from .gluon_common import DQ, HALF, LIFT, release_barriers, scale_pair

KS = gl.constexpr(64)  # logical k per stage (one 128-byte TMA box row of bf16)
CHUNK = gl.constexpr(128)  # the permutation's period along k

# pack=8 over bf16 outputs: four 32-bit registers, element 2i in the low half of $i; the
# word and its scale pair arrive as eight copies each ($4.. and $12..): the first is used
A_ASM = gl.constexpr("{\n.reg .b32 m, s;\n" + DQ.format(w="$4", o="$", sc="$12") + "}")
A_CONSTRAINTS = gl.constexpr("=r," * 4 + ",".join(["r"] * 16))


def physical_k(L: int) -> int:
    """Physical k (within a 128-value chunk) of logical position L; the kernels compute
    the same map inline (tests check the two agree)."""
    m, h, hi, t4, lo = L >> 5, (L >> 4) & 1, (L >> 3) & 1, (L >> 1) & 3, L & 1
    return 32 * t4 + 8 * m + 2 * h + hi + 4 * lo


@gluon.constexpr_function
def _view_layout(NW):
    """[16 NW rows, 2 ml, 2 h, 2 hi, 4 t4, 2 lo] (k = 32 ml + 16 h + 8 hi + 2 t4 + lo within
    a stage): registers lo, hi, h (the eight values of one word), ml, then row + 8;
    lanes t4 then g; warps 16-row slabs. As a [16 NW, 64] tensor this is wgmma's A layout."""
    def e(d, v):
        b = [0] * 6
        b[d] = v
        return b
    return gl.DistributedLinearLayout(
        reg_bases=[e(5, 1), e(3, 1), e(2, 1), e(1, 1), e(0, 8)],
        lane_bases=[e(4, 1), e(4, 2), e(0, 1), e(0, 2), e(0, 4)],
        warp_bases=[e(0, 16 << i) for i in range(NW.bit_length() - 1)], block_bases=[],
        shape=[16 * NW, 2, 2, 2, 4, 2])


@gluon.constexpr_function
def _word_layout(NW):  # [16 NW, 2 ml, 4 t4]
    return gl.SliceLayout(2, gl.SliceLayout(3, gl.SliceLayout(5, _view_layout(NW))))


@gluon.constexpr_function
def _acc_layout(N, NW):
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, N, 16])


@gluon.jit
def word_ids(NW: gl.constexpr):
    """(row, ml, t4) index tensors of a stage's weight words, [16 NW, 1, 1] / [1, 2, 1] / [1, 1, 4]."""
    WL: gl.constexpr = _word_layout(NW)
    rho = gl.arange(0, 16 * NW, layout=gl.SliceLayout(1, gl.SliceLayout(2, WL)))
    ml = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(2, WL)))
    t4 = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, WL)))
    return (gl.expand_dims(gl.expand_dims(rho, 1), 2), gl.expand_dims(gl.expand_dims(ml, 0), 2),
            gl.expand_dims(gl.expand_dims(t4, 0), 1))


@gluon.jit
def _to_view(x, ROWS: gl.constexpr):
    """[ROWS, 2, 4] in the word layout -> [ROWS, 2, 2, 2, 4, 2] in the view layout (broadcast)."""
    x6 = gl.expand_dims(gl.expand_dims(gl.expand_dims(x, 2), 3), 5)
    return x6.broadcast_to([ROWS, 2, 2, 2, 4, 2])


@gluon.jit
def a_stage(words, scales, N: gl.constexpr):
    """words [ROWS, 2, 4] int32, scales [ROWS, 1, 4] E8M0 bytes -> A [ROWS, 64] bf16 in wgmma's
    register layout (for an N-wide MMA), scale applied."""
    ROWS: gl.constexpr = words.shape[0]
    a = gl.inline_asm_elementwise(A_ASM, A_CONSTRAINTS, [_to_view(words, ROWS), _to_view(scale_pair(scales), ROWS)],
                                  dtype=gl.bfloat16, is_pure=True, pack=8)
    a = gl.reshape(a, [ROWS, 64])
    return gl.convert_layout(a, gl.DotOperandLayout(0, _acc_layout(N, ROWS // 16), 2), assert_trivial=True)


@gluon.jit
def load_stage(w_rows, s_rows, kt, row_ok, t4, KG, MASK: gl.constexpr, WC: gl.constexpr):
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


@gluon.constexpr_function
def ring_rows(BN):
    """Rows of a ring slot: BN rounded up to a power of two (a shared buffer's dims must be)."""
    return 1 << (BN - 1).bit_length()


@gluon.jit
def _ring(hd, BN: gl.constexpr, STAGES: gl.constexpr):
    """The B ring, one mbarrier a stage. A slot holds a head (parts 0 and 1: T0 + T1 token rows)
    and a tail (part 2), each filled by its own TMA box, so that BN may be the sum of two powers
    of two (a box's dims must be powers of two)."""
    smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, ring_rows(BN), KS], hd.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    return smem, bars


@gluon.jit
def fetch_b(hd, td, smem, bar, slot, row0, kt, parts, T0: gl.constexpr, T1: gl.constexpr, BN: gl.constexpr):
    """TMA of stage kt's B tile into ring slot `slot`, the tail only where part 2 holds a token."""
    dst = smem.index(slot)
    if parts > 2:
        mbarrier.expect(bar, BN * KS * 2)
        tma_load(td, [row0 + T0 + T1, kt * KS], bar, dst.slice(T0 + T1, BN - T0 - T1))
    else:
        mbarrier.expect(bar, (T0 + T1) * KS * 2)
    tma_load(hd, [row0, kt * KS], bar, dst.slice(0, T0 + T1))


@gluon.jit
def _issue(hd, td, smem, bars, row0, kt, parts, T0: gl.constexpr, T1: gl.constexpr, BN: gl.constexpr,
           STAGES: gl.constexpr):
    s = kt % STAGES
    fetch_b(hd, td, smem, bars.index(s), s, row0, kt, parts, T0, T1, BN)


@gluon.jit
def _wait(kt, smem, bars, STAGES: gl.constexpr):
    s = kt % STAGES
    mbarrier.wait(bars.index(s), (kt // STAGES) & 1)
    return smem.index(s)


@gluon.jit
def _parts(tile, T0: gl.constexpr, T1: gl.constexpr, BN: gl.constexpr):
    """A stage's B tile as the MMA's [k, n] operand in three parts: tokens [0, T0),
    [T0, T0 + T1) and [T0 + T1, BN)."""
    return (tile.slice(0, T0).permute((1, 0)), tile.slice(T0, T1).permute((1, 0)),
            tile.slice(T0 + T1, BN - T0 - T1).permute((1, 0)))


@gluon.jit
def _wide(a, N: gl.constexpr):
    """A in the operand layout of an N-wide MMA (the same registers: a renaming)."""
    return gl.convert_layout(a, gl.DotOperandLayout(0, _acc_layout(N, a.shape[0] // 16), 2), assert_trivial=True)


@gluon.jit
def mma_parts(a, tile, p0, p1, p2, parts, T0: gl.constexpr, T1: gl.constexpr, BN: gl.constexpr):
    """p_i += a @ the tokens of part i of the stage's B tile, for the block's first `parts`
    parts (a in the T0-wide operand layout). Padding sits at the end of an expert's rows, so
    the last block of an expert skips the parts it does not reach (the same for the whole
    program). A block pays the weight dequant once whatever its token count, so an expert
    whose tokens spill into a second block pays it twice: BN is as large as the registers
    allow, and a block of a few tokens costs a T0-wide MMA."""
    b0, b1, b2 = _parts(tile, T0, T1, BN)
    if parts == 3:
        p0 = warpgroup_mma(a, b0, p0, is_async=True)
        p1 = warpgroup_mma(_wide(a, T1), b1, p1, is_async=True)
        p2 = warpgroup_mma(_wide(a, BN - T0 - T1), b2, p2, is_async=True)
        p0, p1, p2 = warpgroup_mma_wait(0, deps=[p0, p1, p2])
    elif parts == 2:
        p0 = warpgroup_mma(a, b0, p0, is_async=True)
        p1 = warpgroup_mma(_wide(a, T1), b1, p1, is_async=True)
        p0, p1 = warpgroup_mma_wait(0, deps=[p0, p1])
    else:
        p0 = warpgroup_mma(a, b0, p0)
    return p0, p1, p2


@gluon.jit
def _mma_parts_gu(ga, ua, tile, g0, g1, g2, u0, u1, u2, parts, T0: gl.constexpr, T1: gl.constexpr,
                  BN: gl.constexpr):
    """mma_parts for the gate and the up tile at once (one wait for all of them)."""
    b0, b1, b2 = _parts(tile, T0, T1, BN)
    T2: gl.constexpr = BN - T0 - T1
    if parts == 3:
        g0 = warpgroup_mma(ga, b0, g0, is_async=True)
        g1 = warpgroup_mma(_wide(ga, T1), b1, g1, is_async=True)
        g2 = warpgroup_mma(_wide(ga, T2), b2, g2, is_async=True)
        u0 = warpgroup_mma(ua, b0, u0, is_async=True)
        u1 = warpgroup_mma(_wide(ua, T1), b1, u1, is_async=True)
        u2 = warpgroup_mma(_wide(ua, T2), b2, u2, is_async=True)
        g0, g1, g2, u0, u1, u2 = warpgroup_mma_wait(0, deps=[g0, g1, g2, u0, u1, u2])
    elif parts == 2:
        g0 = warpgroup_mma(ga, b0, g0, is_async=True)
        g1 = warpgroup_mma(_wide(ga, T1), b1, g1, is_async=True)
        u0 = warpgroup_mma(ua, b0, u0, is_async=True)
        u1 = warpgroup_mma(_wide(ua, T1), b1, u1, is_async=True)
        g0, g1, u0, u1 = warpgroup_mma_wait(0, deps=[g0, g1, u0, u1])
    else:
        g0 = warpgroup_mma(ga, b0, g0, is_async=True)
        u0 = warpgroup_mma(ua, b0, u0, is_async=True)
        g0, u0 = warpgroup_mma_wait(0, deps=[g0, u0])
    return g0, g1, g2, u0, u1, u2


@gluon.jit
def acc_parts(ROWS: gl.constexpr, T0: gl.constexpr, T1: gl.constexpr, BN: gl.constexpr):
    W: gl.constexpr = ROWS // 16
    return (gl.zeros([ROWS, T0], gl.float32, layout=_acc_layout(T0, W)),
            gl.zeros([ROWS, T1], gl.float32, layout=_acc_layout(T1, W)),
            gl.zeros([ROWS, BN - T0 - T1], gl.float32, layout=_acc_layout(BN - T0 - T1, W)))


@gluon.jit
def parts_used(sorted_ptr, row0, S, T0: gl.constexpr, T1: gl.constexpr):
    """How many of the block's three token parts (_parts) hold a token."""
    return 1 + (gl.load(sorted_ptr + row0 + T0) < S).to(gl.int32) + (gl.load(sorted_ptr + row0 + T0 + T1) < S).to(gl.int32)


@gluon.jit
def _prologue(hd, td, row0, nk, sorted_ptr, S, T0: gl.constexpr, T1: gl.constexpr, BN: gl.constexpr,
              STAGES: gl.constexpr):
    """The B ring with its first STAGES - 1 stages in flight, and parts_used."""
    smem, bars = _ring(hd, BN, STAGES)
    parts = parts_used(sorted_ptr, row0, S, T0, T1)
    for i in gl.static_range(STAGES - 1):
        if i < nk:
            _issue(hd, td, smem, bars, row0, i, parts, T0, T1, BN, STAGES)
    return smem, bars, parts


@gluon.jit
def block_tile(block_expert_ptr, NT):
    """(token block, row tile, expert as int64; < 0 past the used blocks) of this program. The
    row tiles of one block are consecutive programs, so the block's B rows stay in L2."""
    pid = gl.program_id(0)
    b = pid // NT
    return b, pid % NT, gl.load(block_expert_ptr + b).to(gl.int64)


@gluon.jit
def prefill_gemm1_swiglu_kernel(
    x_desc, xt_desc, w_ptr, s_ptr, act_ptr, sorted_ptr, block_expert_ptr,
    S, K, KP, I, NT, stride_we, stride_wn, stride_se, stride_sn, stride_am, clamp_limit,
    HAS_CLAMP: gl.constexpr, BN: gl.constexpr, T0: gl.constexpr, T1: gl.constexpr, STAGES: gl.constexpr,
    NW: gl.constexpr, MASK: gl.constexpr, WC: gl.constexpr = "", PF: gl.constexpr = 1,
):
    """act[b*BN + t, ROWS nt + j] = silu(gate) * up of feature 128 c + physical_k(L), where
    ROWS nt + j = 128 c + L, times 2**64: the down GEMM's B in its permuted order. x_desc: the
    permuted, gathered hidden states [rows, KP] (prefill_prep_kernel); w_ptr: int32 view of
    w13; strides in bytes / elements of the uint8 tensors. (prefill_ws.py computes the same
    with the gate and up rows stacked in one accumulator, in warp-specialized partitions.)"""
    ROWS: gl.constexpr = 16 * NW
    b, nt, e = block_tile(block_expert_ptr, NT)
    if e < 0:
        return
    rho, ml, t4 = word_ids(NW)
    # MMA row rho holds feature f: logical position L of chunk c
    j = nt * ROWS + rho
    f, row_ok = wgmma_feature(j, I)
    rw = stride_wn // 4
    g_rows = w_ptr + e * (stride_we // 4) + f.to(gl.int64) * rw + t4 * 4 + ml
    u_rows = g_rows + I * rw
    sg_rows = s_ptr + e * stride_se + f.to(gl.int64) * stride_sn + t4
    su_rows = sg_rows + I * stride_sn
    KG = K // 32
    nk = KP // KS

    smem, bars, parts = _prologue(x_desc, xt_desc, b * BN, nk, sorted_ptr, S, T0, T1, BN, STAGES)
    g0, g1, g2 = acc_parts(ROWS, T0, T1, BN)
    u0, u1, u2 = acc_parts(ROWS, T0, T1, BN)
    # the weights of stages kt + 1 .. kt + PF are in flight during stage kt (registers)
    gw, gs = load_stage(g_rows, sg_rows, 0, row_ok, t4, KG, MASK, WC)
    uw, us = load_stage(u_rows, su_rows, 0, row_ok, t4, KG, MASK, WC)
    gw2, gs2 = load_stage(g_rows, sg_rows, gl.minimum(1, nk - 1), row_ok, t4, KG, MASK, WC)
    uw2, us2 = load_stage(u_rows, su_rows, gl.minimum(1, nk - 1), row_ok, t4, KG, MASK, WC)
    for kt in range(nk):
        ga = a_stage(gw, gs, T0)
        ua = a_stage(uw, us, T0)
        nx = gl.minimum(kt + PF, nk - 1)
        if PF == 2:
            gw, gs, uw, us = gw2, gs2, uw2, us2
            gw2, gs2 = load_stage(g_rows, sg_rows, nx, row_ok, t4, KG, MASK, WC)
            uw2, us2 = load_stage(u_rows, su_rows, nx, row_ok, t4, KG, MASK, WC)
        else:
            gw, gs = load_stage(g_rows, sg_rows, nx, row_ok, t4, KG, MASK, WC)
            uw, us = load_stage(u_rows, su_rows, nx, row_ok, t4, KG, MASK, WC)
        g0, g1, g2, u0, u1, u2 = _mma_parts_gu(ga, ua, _wait(kt, smem, bars, STAGES), g0, g1, g2, u0, u1, u2,
                                               parts, T0, T1, BN)
        if kt + STAGES - 1 < nk:  # the slot of stage kt - 1, whose MMAs are done
            _issue(x_desc, xt_desc, smem, bars, b * BN, kt + STAGES - 1, parts, T0, T1, BN, STAGES)
    release_barriers(bars, STAGES)

    wgmma_swiglu_store(g0, u0, act_ptr, b * BN, nt * ROWS, stride_am, clamp_limit, HAS_CLAMP)
    if parts > 1:
        wgmma_swiglu_store(g1, u1, act_ptr, b * BN + T0, nt * ROWS, stride_am, clamp_limit, HAS_CLAMP)
    if parts > 2:
        wgmma_swiglu_store(g2, u2, act_ptr, b * BN + T0 + T1, nt * ROWS, stride_am, clamp_limit, HAS_CLAMP)


@gluon.jit
def wgmma_feature(j, I):
    """The feature whose output lands in act column j (logical position L = j % 128 of its
    chunk, physical_k(L) within it), and whether it exists (< I)."""
    L = j % CHUNK
    f = (j - L) + ((L >> 1) & 3) * 32 + (L >> 5) * 8 + ((L >> 4) & 1) * 2 + ((L >> 3) & 1) + (L & 1) * 4
    return f, f < I


@gluon.jit
def unstack(acc):
    """A stacked accumulator [ROWS, T] (slab w: gate rows g, up rows g + 8) -> gate and up
    [ROWS / 2, T], row 8 w + g. Rows g and g + 8 are registers of one thread: no data moves."""
    ROWS: gl.constexpr = acc.shape[0]
    T: gl.constexpr = acc.shape[1]
    x = gl.permute(gl.reshape(acc, [ROWS // 16, 2, 8, T]), (0, 2, 3, 1))
    gate, up = gl.split(x)
    return gl.reshape(gate, [ROWS // 2, T]), gl.reshape(up, [ROWS // 2, T])


@gluon.constexpr_function
def _store_layout(F, NW):
    """[F features, tokens], 8 consecutive features a thread (16-byte stores), the rest of the
    lanes and the warps along the tokens."""
    tpw = min(8, F // 8)
    wr = min(NW, max(1, F // (8 * tpw)))
    return gl.BlockedLayout([8, 1], [tpw, 32 // tpw], [wr, NW // wr], [0, 1])


@gluon.jit
def wgmma_swiglu_store(gacc, uacc, act_ptr, row0, col0, stride_am, clamp_limit, HAS_CLAMP: gl.constexpr):
    """act[row0 + t, col0 + j] = silu(gate) * up * 2**64 for one [ROWS features, T tokens] tile."""
    ROWS: gl.constexpr = gacc.shape[0]
    T: gl.constexpr = gacc.shape[1]
    gate = gacc * HALF
    up = uacc * HALF
    if HAS_CLAMP:
        gate = gl.minimum(gate, clamp_limit)
        up = gl.minimum(gl.maximum(up, -clamp_limit), clamp_limit)
    h = (gate / (1.0 + gl.exp(-gate)) * up * LIFT).to(gl.bfloat16)
    # each thread 8 consecutive columns of one row: 16-byte stores
    OL: gl.constexpr = _store_layout(ROWS, gl.num_warps())
    h = gl.convert_layout(h, OL)
    j = gl.expand_dims(gl.arange(0, ROWS, layout=gl.SliceLayout(1, OL)), 1)
    t = gl.expand_dims(gl.arange(0, T, layout=gl.SliceLayout(0, OL)), 0)
    gl.store(act_ptr + (row0 + t).to(gl.int64) * stride_am + col0 + j, h)


@gluon.jit
def prefill_gemm2_combine_kernel(
    a_desc, at_desc, w_ptr, s_ptr, out_ptr, sorted_ptr, block_expert_ptr, topk_w_ptr,
    S, N, K, KP, NT, TOPK, stride_we, stride_wn, stride_se, stride_sn, stride_om, scale_factor,
    OUT_MODE: gl.constexpr, BN: gl.constexpr, T0: gl.constexpr, T1: gl.constexpr, STAGES: gl.constexpr,
    NW: gl.constexpr, MASK: gl.constexpr, WC: gl.constexpr = "", PF: gl.constexpr = 1, AV: gl.constexpr = 2,
):
    """out[token] += w * rsf * act[b*BN + t] @ W2^T for ROWS output columns (OUT_MODE as in
    gemm2_combine). a_desc: the gate/up epilogue's permuted activations [rows, KP]."""
    ROWS: gl.constexpr = 16 * NW
    b, nt, e = block_tile(block_expert_ptr, NT)
    if e < 0:
        return
    rho, ml, t4 = word_ids(NW)
    n = nt * ROWS + rho
    row_ok = n < N
    w_rows = w_ptr + e * (stride_we // 4) + n.to(gl.int64) * (stride_wn // 4) + t4 * 4 + ml
    s_rows = s_ptr + e * stride_se + n.to(gl.int64) * stride_sn + t4
    KG = K // 32
    nk = KP // KS

    smem, bars, parts = _prologue(a_desc, at_desc, b * BN, nk, sorted_ptr, S, T0, T1, BN, STAGES)
    p0, p1, p2 = acc_parts(ROWS, T0, T1, BN)
    wd, sc = load_stage(w_rows, s_rows, 0, row_ok, t4, KG, MASK, WC)
    wd2, sc2 = load_stage(w_rows, s_rows, gl.minimum(1, nk - 1), row_ok, t4, KG, MASK, WC)
    for kt in range(nk):
        a = a_stage(wd, sc, T0)
        if PF == 2:
            wd, sc = wd2, sc2
            wd2, sc2 = load_stage(w_rows, s_rows, gl.minimum(kt + 2, nk - 1), row_ok, t4, KG, MASK, WC)
        else:
            wd, sc = load_stage(w_rows, s_rows, gl.minimum(kt + 1, nk - 1), row_ok, t4, KG, MASK, WC)
        p0, p1, p2 = mma_parts(a, _wait(kt, smem, bars, STAGES), p0, p1, p2, parts, T0, T1, BN)
        if kt + STAGES - 1 < nk:
            _issue(a_desc, at_desc, smem, bars, b * BN, kt + STAGES - 1, parts, T0, T1, BN, STAGES)
    release_barriers(bars, STAGES)

    combine_parts(p0, p1, p2, parts, out_ptr, sorted_ptr, topk_w_ptr, b * BN, nt, S, N, TOPK, stride_om,
                   scale_factor, OUT_MODE, AV)


@gluon.jit
def combine_parts(p0, p1, p2, parts, out_ptr, sorted_ptr, topk_w_ptr, row0, nt, S, N, TOPK, stride_om,
                   scale_factor, OUT_MODE: gl.constexpr, AV: gl.constexpr):
    """_combine for each token part of the block that holds a token."""
    T0: gl.constexpr = p0.shape[1]
    T1: gl.constexpr = p1.shape[1]
    _combine(p0, out_ptr, sorted_ptr, topk_w_ptr, row0, nt, S, N, TOPK, stride_om, scale_factor, OUT_MODE, AV)
    if parts > 1:
        _combine(p1, out_ptr, sorted_ptr, topk_w_ptr, row0 + T0, nt, S, N, TOPK, stride_om, scale_factor,
                 OUT_MODE, AV)
    if parts > 2:
        _combine(p2, out_ptr, sorted_ptr, topk_w_ptr, row0 + T0 + T1, nt, S, N, TOPK, stride_om, scale_factor,
                 OUT_MODE, AV)


@gluon.jit
def _combine(acc, out_ptr, sorted_ptr, topk_w_ptr, row0, nt, S, N, TOPK, stride_om, scale_factor,
             OUT_MODE: gl.constexpr, AV: gl.constexpr):
    """out[token of slot row0 + t, ROWS nt + j] += w * rsf * acc[j, t] (or the slot's row, OUT_MODE 2)."""
    ROWS: gl.constexpr = acc.shape[0]
    T: gl.constexpr = acc.shape[1]
    # each thread AV consecutive output columns of one token: AV = 8 makes the bf16 atomics
    # 16-byte vectors (atom .v8.bf16), four times fewer than pairs
    OL: gl.constexpr = gl.BlockedLayout([AV, 1], [64 // AV, AV // 2], [ROWS // 64, 4], [0, 1])
    v = gl.convert_layout(acc, OL)
    col = nt * ROWS + gl.expand_dims(gl.arange(0, ROWS, layout=gl.SliceLayout(1, OL)), 1)
    slot = gl.expand_dims(gl.load(sorted_ptr + row0 + gl.arange(0, T, layout=gl.SliceLayout(0, OL))), 0)
    ok = (slot < S) & (col < N)
    wt = gl.load(topk_w_ptr + slot, mask=ok, other=0.0).to(gl.float32) * (scale_factor * HALF)
    v = v * wt
    if OUT_MODE == 2:
        gl.store(out_ptr + slot.to(gl.int64) * stride_om + col, v, mask=ok)
    else:
        tok = (slot // TOPK).to(gl.int64)
        gl.atomic_add(out_ptr + tok * stride_om + col, v.to(out_ptr.dtype.element_ty), mask=ok, sem="relaxed")
