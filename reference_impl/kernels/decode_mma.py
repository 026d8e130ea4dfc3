"""Decode path of the grouped MXFP4 MoE (Gluon, sm_90+): e2m1 words dequantized
straight into mma.sync fragments, no shared memory on the weight path.

Why: the tl.dot kernels dequantize a weight tile into registers and then let the
compiler move it into the MMA operand layout through shared memory (about four
times the packed bytes each way per K step, plus ~6 instructions per weight
value); at decode sizes that, not DRAM, set the time. Here the layout is explicit:

* lane = 4 * g + t4, the roles of one m16n8k16 MMA. For weight rows r and r + 8
  of a 16-row tile, a lane loads one whole 32-value scale group (16 bytes, one
  128-bit load): group 4c + t4 of the chunk c its warp is on. Wide loads matter:
  with 4-byte loads the L1 spent a cycle per row touched for 16 bytes, and that,
  not DRAM, capped the first version of this kernel at ~1.3 TB/s.
* A word's nibbles pair up as (k, k + 4) at bit offsets (p, p + 16), so each
  bf16x2 register of the A fragment is two shifts and two masks away from the
  word, with no byte permute; the activations (the B fragment, token g of the
  block) are stored in that order once (prep_act_kernel for the hidden states,
  the gate/up epilogue for the down GEMM's input). The sum over k does not
  depend on its order, so this permutation changes nothing but the rounding.
* The magnitude bits land in bf16 as value * 2**-126 (0.5 becomes a subnormal);
  one bf16x2 multiply by 2**(s - 64) applies the E8M0 scale s and most of the
  bias, the activations carry 2**64, and the product is 2x the true one, halved
  in the epilogue. Exact for E8M0 exponents 65..191 (scales 2**-62 .. 2**64);
  smaller ones lose precision as bf16 subnormals, larger ones overflow.
* A program = BLOCK_M = 8 sorted slots (the MMA's n8) x Q tiles of 16 rows; its
  NW warps take interleaved 128-value chunks of K and meet once at the end.
  (Register prefetch, several chunks per trip and register caps were measured and
  lost: bench/NOTES.md, v6.)
* The two GEMMs may be launched as programmatic dependents (moe.py, "pdl" in the config):
  each grid starts while the one before it finishes and waits in gdc_wait before it reads
  that grid's output, which hides most of a launch gap (bench/NOTES.md, v10).

Weight tiles are [NW, Q, 32, 4] = (warp, tile, lane, word of the group); one
inline-asm call packs the 4 words (pack=4), dequantizes them and chains the
group's eight MMAs into the tile's fragment, which is also [NW, Q, 32, 4] (the
last dim then being the fragment register): one accumulator per tile, not per
word, so the kernel fits in fewer registers and more warps stay resident.
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .gluon_common import (HALF, combine_rows, frag_ids, frag_layout, frag_out_ids, frag_total, gdc_launch_dependents,
                           gdc_wait, load_act, mma_tile, prefetch_down, program_tile, swiglu_store)

BLOCK_M = 8  # the mma's n: tokens per block


@gluon.jit
def _load_tile(w_lo, s_lo, row_stride_w, row_stride_s, c, ok, MASK: gl.constexpr, WC: gl.constexpr):
    """Words of rows r / r + 8 (one group per lane, 128-bit loads) and their E8M0 bytes.
    MASK=False where K % 128 == 0 and the rows fill the tiles: no predicates, no zero fill.
    WC: cache modifier of the weight loads (".cg": read once, kept out of L1, which then holds
    the activations and scales)."""
    if MASK:
        return (gl.load(w_lo + c * 16, mask=ok, other=0, cache_modifier=WC),
                gl.load(w_lo + 8 * row_stride_w + c * 16, mask=ok, other=0, cache_modifier=WC),
                gl.load(s_lo + c * 4, mask=ok, other=127), gl.load(s_lo + 8 * row_stride_s + c * 4, mask=ok, other=127))
    else:
        return (gl.load(w_lo + c * 16, cache_modifier=WC),
                gl.load(w_lo + 8 * row_stride_w + c * 16, cache_modifier=WC),
                gl.load(s_lo + c * 4), gl.load(s_lo + 8 * row_stride_s + c * 4))


@gluon.jit
def decode_gemm1_swiglu_kernel(
    x_ptr, w_ptr, s_ptr, act_ptr, sorted_ptr, block_expert_ptr,
    S, K, I, NB, TOPK,
    stride_xm, stride_we, stride_wn, stride_se, stride_sn, stride_am,
    clamp_limit,
    w2_ptr, s2_ptr, w2_bytes, s2_bytes,
    HAS_CLAMP: gl.constexpr, Q: gl.constexpr, NW: gl.constexpr, MASK: gl.constexpr,
    WC: gl.constexpr = "", L2P: gl.constexpr = 0, w2_piece: gl.constexpr = 16,
    s2_piece: gl.constexpr = 16,
):
    """act[b*8 + t, n] = silu(gate) * up for the 8 slots of block b and Q*16 columns n.
    x_ptr holds the hidden states as B pairs (prep_act_kernel); x_ptr/w_ptr are int32
    views (2 bf16 / 4 e2m1 bytes a word); strides are in elements of the underlying
    bf16 / uint8 tensors. L2P: the down weights prefetched into L2 at the start (decode_tma's
    decode_gemm1_swiglu_tma_kernel says how)."""
    gdc_wait()  # routing and the laid-out hidden states come from the launch before
    gdc_launch_dependents()
    b, nt, e = program_tile(block_expert_ptr, NB)
    if e < 0:
        return
    if L2P != 0:
        prefetch_down(w2_ptr, s2_ptr, block_expert_ptr, b, nt, e, w2_bytes, s2_bytes, w2_piece, s2_piece, NW, L2P)
    e = e.to(gl.int64)
    w, q, m, i, g, t4 = frag_ids(NW, Q)
    KG = K // 32

    # B operand: token g of the block, the 32 activations of group 4c + t4
    slot_b = gl.load(sorted_ptr + b * 8 + g)
    tok_ok = slot_b < S
    a_rows = gl.expand_dims(x_ptr + (slot_b // TOPK).to(gl.int64) * (stride_xm // 2) + t4 * 16 + m * 4, 4) + i

    # A operand: gate rows r (+8) and the matching up rows (+I); lane t4 takes group 4c + t4
    r = nt * (16 * Q) + q * 16 + g
    row_ok = r < I
    rw = stride_wn // 4
    g_lo = w_ptr + e * (stride_we // 4) + r.to(gl.int64) * rw + t4 * 4 + m
    u_lo = g_lo + I * rw
    sg_lo = s_ptr + e * stride_se + r.to(gl.int64) * stride_sn + t4 + m * 0
    su_lo = sg_lo + I * stride_sn

    zero = gl.zeros([NW, Q, 32, 4], gl.float32, layout=gl.SliceLayout(4, frag_layout(NW, Q)))
    gacc = zero
    uacc = zero
    for c0 in range(0, gl.cdiv(K, 128), NW):
        c = c0 + w
        kin = (c * 4 + t4) < KG
        bp = load_act(a_rows, c, tok_ok & kin)
        gacc = mma_tile(_load_tile(g_lo, sg_lo, rw, stride_sn, c, row_ok & kin, MASK, WC), bp, gacc)
        uacc = mma_tile(_load_tile(u_lo, su_lo, rw, stride_sn, c, row_ok & kin, MASK, WC), bp, uacc)

    swiglu_store(gacc, uacc, act_ptr, b, nt, I, stride_am, clamp_limit, HAS_CLAMP)


@gluon.jit
def decode_gemm2_combine_kernel(
    a_ptr, w_ptr, s_ptr, out_ptr, sorted_ptr, block_expert_ptr, topk_w_ptr,
    S, N, K, NB, TOPK,
    stride_am, stride_we, stride_wn, stride_se, stride_sn, stride_om,
    scale_factor,
    OUT_MODE: gl.constexpr, Q: gl.constexpr, NW: gl.constexpr, MASK: gl.constexpr,
    WC: gl.constexpr = "", AV: gl.constexpr = 2,
):
    """out[token] += w * rsf * act[b*8 + t] @ W2^T for Q*16 output columns (OUT_MODE
    as in gemm2_combine). act rows are already B pairs (decode_gemm1_swiglu_kernel's
    order and 2**64 lift). a_ptr/w_ptr are int32 views; strides in bf16 / uint8 elements."""
    b, nt, e = program_tile(block_expert_ptr, NB)
    if e < 0:
        return
    e = e.to(gl.int64)
    w, q, m, i, g, t4 = frag_ids(NW, Q)
    KG = K // 32

    a_rows = gl.expand_dims(a_ptr + (b * 8 + g).to(gl.int64) * (stride_am // 2) + t4 * 16 + m * 4, 4) + i
    # padding rows of the block hold zeros: not loading them saves most of the B traffic at decode
    tok_ok = gl.load(sorted_ptr + b * 8 + g) < S
    # the routing is two launches back (finished before the gate/up GEMM let this grid launch);
    # the activations come from the gate/up GEMM
    gdc_wait()
    r = nt * (16 * Q) + q * 16 + g
    row_ok = r < N
    rw = stride_wn // 4
    w_lo = w_ptr + e * (stride_we // 4) + r.to(gl.int64) * rw + t4 * 4 + m
    s_lo = s_ptr + e * stride_se + r.to(gl.int64) * stride_sn + t4 + m * 0

    acc = gl.zeros([NW, Q, 32, 4], gl.float32, layout=gl.SliceLayout(4, frag_layout(NW, Q)))
    for c0 in range(0, gl.cdiv(K, 128), NW):
        c = c0 + w
        kin = (c * 4 + t4) < KG
        acc = mma_tile(_load_tile(w_lo, s_lo, rw, stride_sn, c, row_ok & kin, MASK, WC),
                        load_act(a_rows, c, tok_ok & kin), acc)

    if AV == 8:
        combine_rows(frag_total(acc), out_ptr, sorted_ptr, topk_w_ptr, b, nt, S, N, TOPK, stride_om, scale_factor,
                      OUT_MODE)
        return
    oq, olane, oi = frag_out_ids(NW, Q)
    col = nt * (16 * Q) + oq * 16 + olane // 4 + (oi // 2) * 8
    slot = gl.load(sorted_ptr + b * 8 + (olane % 4) * 2 + oi % 2)
    ok = (slot < S) & (col < N)
    wt = gl.load(topk_w_ptr + slot, mask=ok, other=0.0).to(gl.float32) * (scale_factor * HALF)
    v = frag_total(acc) * wt
    if OUT_MODE == 2:
        gl.store(out_ptr + slot.to(gl.int64) * stride_om + col, v, mask=ok)
    else:
        tok = (slot // TOPK).to(gl.int64)
        gl.atomic_add(out_ptr + tok * stride_om + col, v.to(out_ptr.dtype.element_ty), mask=ok, sem="relaxed")


