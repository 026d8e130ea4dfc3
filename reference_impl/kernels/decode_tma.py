"""Decode path with the weight words brought in by TMA (Gluon, sm_90): decode_mma's dequant,
MMAs and epilogues, with the e2m1 words of each K step landing in a shared-memory ring.

Why: in decode_mma each warp loads a chunk's words into registers, waits for DRAM, and only
then dequantizes and multiplies; a warp has one chunk in flight, and holding more in
registers (register prefetch, v6/v11) costs the registers that would hold more warps
(bench/NOTES.md, v11). Here one thread of the program issues a TMA copy a step, STAGES steps
ahead, so the bytes in flight no longer live in registers and the warps wait on DRAM only
when the ring runs dry (v12: 1-13% faster than decode_mma at decode sizes).

A step = one 128-value chunk a warp, in decode_mma's chunk order (warp w takes chunk j * NW + w
at step j), for all NW warps in one box: [2, 16 Q, 16 NW] words of W13 seen as [2E, I, H / 8]
(the gate and the up tile in one copy), [16 Q, 16 NW] of W2 seen as [E H, I / 8]. The lanes read
the slot back in decode_mma's fragment order through a linear layout (_words_layout), with
128-bit shared loads. The ring is unswizzled, so with NW = 2 the eight lanes of a load phase
(rows g and g + 1, same 64 bytes) meet 2-way bank conflicts: a box a warp (64-byte rows) would
avoid them, but Triton's barrier pass puts a CTA barrier between any two copies into one buffer.

The ring: `full[s]` (TMA bytes of slot s landed); after every warp has read slot s into
registers, a CTA barrier, and slot s is refilled with step j + STAGES. The down GEMM's first
STAGES steps are issued before it waits for the gate/up GEMM (programmatic dependent launch):
its weights do not depend on that grid, only its activations do.

K tails need no masks on the weights: the copy engine fills past K with zeros, and the
scales and activations there are masked as in decode_mma.

AHEAD: what the ring does not carry is loaded into registers one step ahead: 1, the E8M0 bytes
(a step's are 4 NW bytes a row, below TMA's 16-byte minimum box row); 2, those and the B pairs.
With 0 a step's scale loads go out once its slot is ready, and its B loads just before.
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from .compat import cta_barrier, tma_load
from .gluon_common import (combine_rows, frag_ids, frag_layout, frag_total, gdc_launch_dependents, gdc_wait, load_act,
                           mma_tile, prefetch_down, program_tile, release_barriers, swiglu_store)


@gluon.constexpr_function
def ring_layout(rank):
    """Shared layout of the ring: unswizzled 32-bit words, rows of 16 NW words (one TMA box a step)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=rank)


@gluon.constexpr_function
def _words_layout(T, NW, Q):
    """Register layout of one ring slot ([T, 16 Q, 16 NW] words: tile t = gate / up, row, word):
    warp w reads words [16 w, + 16) (its chunk), lane 4 g + t4 words 16 w + 4 t4 .. + 3 of rows
    16 q + 8 h + g, as decode_mma's 128-bit loads do (registers: word, h, q, tile)."""
    regs = [[0, 0, 1], [0, 0, 2], [0, 8, 0]] + ([[0, 16, 0]] if Q == 2 else []) + ([[1, 0, 0]] if T == 2 else [])
    lanes = [[0, 0, 4], [0, 0, 8], [0, 1, 0], [0, 2, 0], [0, 4, 0]]
    warps = [[0, 0, 16 << k] for k in range(NW.bit_length() - 1)]
    if T == 1:  # a 2-D slot: drop the tile coordinate
        return gl.DistributedLinearLayout([b[1:] for b in regs], [b[1:] for b in lanes], [b[1:] for b in warps], [],
                                          [16 * Q, 16 * NW])
    return gl.DistributedLinearLayout(regs, lanes, warps, [], [T, 16 * Q, 16 * NW])


@gluon.jit
def tma_issue(desc, ring, bar, slot, coord0, row0, j, T: gl.constexpr, NW: gl.constexpr, Q: gl.constexpr):
    """One TMA box into ring slot `slot`: chunks j * NW .. j * NW + NW - 1 (16 words each) of rows
    [row0, + 16 Q), of T tiles (the gate and up halves of W13 are the middle index of a 3-D view)."""
    mbarrier.expect(bar, T * 16 * Q * 64 * NW)
    if T == 2:
        tma_load(desc, [coord0, row0, j * NW * 16], bar, ring.index(slot))
    else:
        tma_load(desc, [row0, j * NW * 16], bar, ring.index(slot))


@gluon.jit
def _ring_start(desc, coord0, row0, K, T: gl.constexpr, NW: gl.constexpr, Q: gl.constexpr, STAGES: gl.constexpr):
    """The ring ([STAGES, (T,) 16 Q, 16 NW] words) and its barriers, with its first STAGES steps in
    flight; and the count of steps over K."""
    nk = gl.cdiv(gl.cdiv(K, 128), NW)
    if T == 2:
        ring = gl.allocate_shared_memory(gl.int32, [STAGES, 2, 16 * Q, 16 * NW], ring_layout(3))
    else:
        ring = gl.allocate_shared_memory(gl.int32, [STAGES, 16 * Q, 16 * NW], ring_layout(2))
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
    for i in gl.static_range(STAGES):
        if i < nk:
            tma_issue(desc, ring, full.index(i), i, coord0, row0, i, T, NW, Q)
    return ring, full, nk


@gluon.jit
def _wait_slot(full, j, STAGES: gl.constexpr):
    """Step j's ring slot, once its words have landed."""
    s = j % STAGES
    mbarrier.wait(full.index(s), (j // STAGES) & 1)
    return s


@gluon.jit
def _step_ahead(full, j, w, t4, KG, a_rows, tok_ok, NW: gl.constexpr, STAGES: gl.constexpr):
    """_step with the B pairs loaded a step ahead: the next step's go out before this step's wait."""
    c = j * NW + w
    nbp = _act_at(a_rows, c + NW, t4, KG, tok_ok)
    return _wait_slot(full, j, STAGES), c, nbp


@gluon.jit
def _step(full, j, w, t4, KG, a_rows, tok_ok, NW: gl.constexpr, STAGES: gl.constexpr):
    """Step j: its ring slot, each warp's chunk, the K mask of the lanes' groups and the B pairs,
    returned once the slot's words have landed (the B loads are issued before the wait)."""
    c = j * NW + w
    kin = (c * 4 + t4) < KG
    bp = load_act(a_rows, c, tok_ok & kin)
    return _wait_slot(full, j, STAGES), c, kin, bp


@gluon.jit
def tma_read_slot(ring, s, T: gl.constexpr, NW: gl.constexpr, Q: gl.constexpr):
    """Slot s -> per tile (rows r, rows r + 8) as [NW, Q, 32, 4], in the layout mma_tile takes."""
    x = ring.index(s)
    if T == 1:
        x = gl.reshape(x.load(_words_layout(1, NW, Q)), [1, 16 * Q, 16 * NW])
    else:
        x = x.load(_words_layout(2, NW, Q))
    x = gl.reshape(x, [T, Q, 2, 8, NW, 4, 4])  # (tile, q, h, g, warp, t4, word)
    x = gl.reshape(gl.permute(x, (4, 1, 3, 5, 6, 2, 0)), [NW, Q, 32, 4, 2, T])
    W: gl.constexpr = gl.SliceLayout(4, frag_layout(NW, Q))
    if T == 2:
        lo, hi = gl.split(gl.permute(x, (0, 1, 2, 3, 5, 4)))  # split h: [NW, Q, 32, 4, T] each
        glo, ulo = gl.split(lo)
        ghi, uhi = gl.split(hi)
        return (gl.convert_layout(glo, W), gl.convert_layout(ghi, W), gl.convert_layout(ulo, W),
                gl.convert_layout(uhi, W))
    else:
        lo, hi = gl.split(gl.reshape(x, [NW, Q, 32, 4, 2]))
        return gl.convert_layout(lo, W), gl.convert_layout(hi, W)


@gluon.jit
def tma_scales(s_lo, row_stride_s, c, ok):
    return gl.load(s_lo + c * 4, mask=ok, other=127), gl.load(s_lo + 8 * row_stride_s + c * 4, mask=ok, other=127)


@gluon.jit
def _scales_at(s_lo, row_stride_s, c, t4, KG, row_ok):
    """The E8M0 bytes of chunk c (zero-scale filler past K)."""
    return tma_scales(s_lo, row_stride_s, c, row_ok & ((c * 4 + t4) < KG))


@gluon.jit
def _act_at(a_rows, c, t4, KG, tok_ok):
    """The B pairs of chunk c (zeros past K)."""
    return load_act(a_rows, c, tok_ok & ((c * 4 + t4) < KG))


@gluon.jit
def decode_gemm1_swiglu_tma_kernel(
    x_ptr, w_desc, s_ptr, act_ptr, sorted_ptr, block_expert_ptr,
    S, K, I, NB, TOPK,
    stride_xm, stride_se, stride_sn, stride_am,
    clamp_limit,
    w2_ptr, s2_ptr, w2_bytes, s2_bytes,
    HAS_CLAMP: gl.constexpr, Q: gl.constexpr, NW: gl.constexpr, STAGES: gl.constexpr,
    AHEAD: gl.constexpr = 0, L2P: gl.constexpr = 0, PF_AT: gl.constexpr = 0, w2_piece: gl.constexpr = 16,
    s2_piece: gl.constexpr = 16,
):
    """decode_gemm1_swiglu_kernel's output; w_desc: W13 as int32 words [2 E, I, H / 8] (expert and
    gate / up, row, word), boxes of [2, 16 Q, 16 NW]. L2P (gluon_common._PF_ASM: 1 / 2 bulk, 3 / 4
    line prefetches): the program's share of its expert's down weights and scales (w2_ptr, s2_ptr:
    uint8, w2_bytes / s2_bytes an expert, pieces of w2_piece / s2_piece bytes a thread) prefetched
    into L2 at step PF_AT (0: before the loop)."""
    gdc_wait()  # routing and the laid-out hidden states come from the launch before
    gdc_launch_dependents()
    b, nt, e = program_tile(block_expert_ptr, NB)
    if e < 0:
        return
    w, q, m, i, g, t4 = frag_ids(NW, Q)
    KG = K // 32
    row0 = nt * (16 * Q)
    ring, full, nk = _ring_start(w_desc, e * 2, row0, K, 2, NW, Q, STAGES)
    if L2P != 0 and PF_AT == 0:
        prefetch_down(w2_ptr, s2_ptr, block_expert_ptr, b, nt, e, w2_bytes, s2_bytes, w2_piece, s2_piece, NW, L2P)

    slot_b = gl.load(sorted_ptr + b * 8 + g)
    tok_ok = slot_b < S
    a_rows = gl.expand_dims(x_ptr + (slot_b // TOPK).to(gl.int64) * (stride_xm // 2) + t4 * 16 + m * 4, 4) + i
    r = nt * (16 * Q) + q * 16 + g
    row_ok = r < I
    sg_lo = s_ptr + e.to(gl.int64) * stride_se + r.to(gl.int64) * stride_sn + t4 + m * 0
    su_lo = sg_lo + I * stride_sn

    zero = gl.zeros([NW, Q, 32, 4], gl.float32, layout=gl.SliceLayout(4, frag_layout(NW, Q)))
    gacc = zero
    uacc = zero
    if AHEAD >= 1:  # step 0's scales (AHEAD 2: and its activations)
        gs0, gs1 = _scales_at(sg_lo, stride_sn, w, t4, KG, row_ok)
        us0, us1 = _scales_at(su_lo, stride_sn, w, t4, KG, row_ok)
    if AHEAD == 2:
        b0, b1, b2, b3 = _act_at(a_rows, w, t4, KG, tok_ok)
    for j in range(nk):
        if L2P != 0 and PF_AT != 0:
            if j == PF_AT:
                prefetch_down(w2_ptr, s2_ptr, block_expert_ptr, b, nt, e, w2_bytes, s2_bytes, w2_piece, s2_piece,
                              NW, L2P)
        if AHEAD == 2:  # this step's B pairs came with the step before; the next step's go out now
            s, c, nbp = _step_ahead(full, j, w, t4, KG, a_rows, tok_ok, NW, STAGES)
        else:
            s, c, kin, bp = _step(full, j, w, t4, KG, a_rows, tok_ok, NW, STAGES)
            b0, b1, b2, b3 = bp  # (one name a target: Triton 3.6 rejects a nested tuple target)
        glo, ghi, ulo, uhi = tma_read_slot(ring, s, 2, NW, Q)
        if AHEAD >= 1:  # this step's scales came with the step before; the next step's go out now
            ngs0, ngs1 = _scales_at(sg_lo, stride_sn, c + NW, t4, KG, row_ok)
            nus0, nus1 = _scales_at(su_lo, stride_sn, c + NW, t4, KG, row_ok)
        else:
            gs0, gs1 = tma_scales(sg_lo, stride_sn, c, row_ok & kin)
            us0, us1 = tma_scales(su_lo, stride_sn, c, row_ok & kin)
        cta_barrier()  # every warp has slot s in registers
        if j + STAGES < nk:
            tma_issue(w_desc, ring, full.index(s), s, e * 2, row0, j + STAGES, 2, NW, Q)
        gacc = mma_tile((glo, ghi, gs0, gs1), (b0, b1, b2, b3), gacc)
        uacc = mma_tile((ulo, uhi, us0, us1), (b0, b1, b2, b3), uacc)
        if AHEAD >= 1:
            gs0, gs1, us0, us1 = ngs0, ngs1, nus0, nus1
        if AHEAD == 2:
            b0, b1, b2, b3 = nbp
    release_barriers(full, STAGES)
    swiglu_store(gacc, uacc, act_ptr, b, nt, I, stride_am, clamp_limit, HAS_CLAMP)


@gluon.jit
def decode_gemm2_combine_tma_kernel(
    a_ptr, w_desc, s_ptr, out_ptr, sorted_ptr, block_expert_ptr, topk_w_ptr,
    S, N, K, NB, TOPK,
    stride_am, stride_se, stride_sn, stride_om,
    scale_factor,
    OUT_MODE: gl.constexpr, Q: gl.constexpr, NW: gl.constexpr, STAGES: gl.constexpr,
    AHEAD: gl.constexpr = 0,
):
    """decode_gemm2_combine_kernel's output (the 16-byte-atomic epilogue); w_desc: W2 as int32
    words [E * H, I / 8], boxes of [16 Q, 16 NW]."""
    b, nt, e = program_tile(block_expert_ptr, NB)
    if e < 0:
        return
    w, q, m, i, g, t4 = frag_ids(NW, Q)
    KG = K // 32
    row0 = e * N + nt * (16 * Q)
    # the routing finished two launches back; the weights do not depend on the gate/up GEMM,
    # so the ring fills while that grid drains
    ring, full, nk = _ring_start(w_desc, 0, row0, K, 1, NW, Q, STAGES)
    a_rows = gl.expand_dims(a_ptr + (b * 8 + g).to(gl.int64) * (stride_am // 2) + t4 * 16 + m * 4, 4) + i
    tok_ok = gl.load(sorted_ptr + b * 8 + g) < S
    r = nt * (16 * Q) + q * 16 + g
    row_ok = r < N
    s_lo = s_ptr + e.to(gl.int64) * stride_se + r.to(gl.int64) * stride_sn + t4 + m * 0
    if AHEAD >= 1:  # step 0's scales, like the ring, before the wait
        s0, s1 = _scales_at(s_lo, stride_sn, w, t4, KG, row_ok)
    gdc_wait()  # the activations come from the gate/up GEMM
    if AHEAD == 2:
        b0, b1, b2, b3 = _act_at(a_rows, w, t4, KG, tok_ok)

    acc = gl.zeros([NW, Q, 32, 4], gl.float32, layout=gl.SliceLayout(4, frag_layout(NW, Q)))
    for j in range(nk):
        if AHEAD == 2:  # this step's B pairs came with the step before; the next step's go out now
            s, c, nbp = _step_ahead(full, j, w, t4, KG, a_rows, tok_ok, NW, STAGES)
        else:
            s, c, kin, bp = _step(full, j, w, t4, KG, a_rows, tok_ok, NW, STAGES)
            b0, b1, b2, b3 = bp  # (one name a target: Triton 3.6 rejects a nested tuple target)
        lo, hi = tma_read_slot(ring, s, 1, NW, Q)
        if AHEAD >= 1:
            ns0, ns1 = _scales_at(s_lo, stride_sn, c + NW, t4, KG, row_ok)
        else:
            s0, s1 = tma_scales(s_lo, stride_sn, c, row_ok & kin)
        cta_barrier()
        if j + STAGES < nk:
            tma_issue(w_desc, ring, full.index(s), s, 0, row0, j + STAGES, 1, NW, Q)
        acc = mma_tile((lo, hi, s0, s1), (b0, b1, b2, b3), acc)
        if AHEAD >= 1:
            s0, s1 = ns0, ns1
        if AHEAD == 2:
            b0, b1, b2, b3 = nbp
    release_barriers(full, STAGES)
    combine_rows(frag_total(acc), out_ptr, sorted_ptr, topk_w_ptr, b, nt, S, N, TOPK, stride_om, scale_factor, OUT_MODE)
