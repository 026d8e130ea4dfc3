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

BLOCK_M = 8  # the mma's n: tokens per block

# dequant one word (8 nibbles) into A pairs (k0,k4) (k1,k5) (k2,k6) (k3,k7), times the scale pair
_DQ = """
shl.b32 m, {w}, 6; shl.b32 s, {w}, 12; and.b32 m, m, 0x01C001C0; and.b32 s, s, 0x80008000; or.b32 {o}0, m, s;
shl.b32 m, {w}, 2; shl.b32 s, {w}, 8; and.b32 m, m, 0x01C001C0; and.b32 s, s, 0x80008000; or.b32 {o}1, m, s;
shr.u32 m, {w}, 2; shl.b32 s, {w}, 4; and.b32 m, m, 0x01C001C0; and.b32 s, s, 0x80008000; or.b32 {o}2, m, s;
shr.u32 m, {w}, 6; and.b32 m, m, 0x01C001C0; and.b32 s, {w}, 0x80008000; or.b32 {o}3, m, s;
mul.rn.bf16x2 {o}0, {o}0, {sc}; mul.rn.bf16x2 {o}1, {o}1, {sc};
mul.rn.bf16x2 {o}2, {o}2, {sc}; mul.rn.bf16x2 {o}3, {o}3, {sc};
"""
_MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"


def _group_asm():
    """pack=4 over the group's 4 words m. Operands: $0..$3 D (the fragment), $4+m word m
    of row r, $8+m of row r + 8, $12 / $16 scale pairs of rows r / r + 8 (x4),
    $20+m .. $32+m the B pairs (k0,k4) (k1,k5) (k2,k6) (k3,k7) of word m, $36..$39 C."""
    body = ["{", ".reg .b32 m, s, l0, l1, l2, l3, h0, h1, h2, h3;"]
    for w in range(4):
        body.append(_DQ.format(w=f"${4 + w}", o="l", sc="$12") + _DQ.format(w=f"${8 + w}", o="h", sc="$16"))
        c = "$36,$37,$38,$39" if w == 0 else "$0,$1,$2,$3"
        body.append(f"{_MMA} {{$0,$1,$2,$3}}, {{l0,h0,l1,h1}}, {{${20 + w},${24 + w}}}, {{{c}}};")
        body.append(f"{_MMA} {{$0,$1,$2,$3}}, {{l2,h2,l3,h3}}, {{${28 + w},${32 + w}}}, {{$0,$1,$2,$3}};")
    body.append("}")
    return "\n".join(body)


GROUP_ASM = gl.constexpr(_group_asm())
LIFT = gl.constexpr(1.8446744073709552e19)  # 2**64
HALF = gl.constexpr(0.5)  # the products carry 2**126 * 2**-64 * 2**-64 * 2 = 2


@gluon.constexpr_function
def _layout(NW, Q):
    return gl.BlockedLayout([1, Q, 1, 4, 4], [1, 1, 32, 1, 1], [NW, 1, 1, 1, 1], [4, 3, 2, 1, 0])


@gluon.jit
def _ids(NW: gl.constexpr, Q: gl.constexpr):
    """Index tensors of the weight tiles, in the layout of a [NW, Q, 32, 4] load (one 128-bit
    vector a lane): warp w, tile q, word m, the register index i, and the lane's MMA roles
    g = lane // 4 (row, token) and t4 = lane % 4 (k)."""
    L: gl.constexpr = _layout(NW, Q)
    W: gl.constexpr = gl.SliceLayout(4, L)  # dims (0, 1, 2, 3)
    A: gl.constexpr = gl.SliceLayout(2, gl.SliceLayout(3, W))  # dims (0, 1)
    B: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(1, W))  # dims (2, 3)
    w = gl.expand_dims(gl.expand_dims(gl.expand_dims(gl.arange(0, NW, layout=gl.SliceLayout(1, A)), 1), 2), 3)
    q = gl.expand_dims(gl.expand_dims(gl.expand_dims(gl.arange(0, Q, layout=gl.SliceLayout(0, A)), 0), 2), 3)
    lane = gl.expand_dims(gl.expand_dims(gl.expand_dims(gl.arange(0, 32, layout=gl.SliceLayout(1, B)), 1), 0), 1)
    m = gl.expand_dims(gl.expand_dims(gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(0, B)), 0), 0), 1)
    i = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, L)))))
    i = gl.expand_dims(gl.expand_dims(gl.expand_dims(gl.expand_dims(i, 0), 1), 2), 3)
    return w, q, m, i, lane // 4, lane % 4


@gluon.jit
def program_tile(block_expert_ptr, NB):
    """(token block, column tile, expert; < 0 past the used blocks) of this program: consecutive
    programs take the blocks of one column tile."""
    pid = gl.program_id(0)
    b = pid % NB
    return b, pid // NB, gl.load(block_expert_ptr + b)


@gluon.jit
def _out_ids(NW: gl.constexpr, Q: gl.constexpr):
    """(tile, lane, register) index tensors in the layout of _total's result."""
    S: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(4, _layout(NW, Q)))  # dims (1, 2, 3)
    q = gl.expand_dims(gl.expand_dims(gl.arange(0, Q, layout=gl.SliceLayout(1, gl.SliceLayout(2, S))), 1), 2)
    lane = gl.expand_dims(gl.expand_dims(gl.arange(0, 32, layout=gl.SliceLayout(0, gl.SliceLayout(2, S))), 0), 2)
    i = gl.expand_dims(gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, S))), 0), 1)
    return q, lane, i


@gluon.jit
def _total(x):
    """Sum a fragment over the warps' K chunks -> [Q, 32, 4]."""
    return gl.sum(x, 0)


@gluon.jit
def _scale_pair(s):
    """E8M0 byte s -> bf16x2 of 2**(s - 64) in both halves."""
    bits = (s.to(gl.int32) + 63) << 7
    return bits | (bits << 16)


@gluon.jit
def _load_act(a_rows, c, ok):
    """B pairs of each lane's 32-value group in chunk c: one 4 x 128-bit load, split into
    the four pair registers i, each [NW, 1, 32, 4] over the words m."""
    W: gl.constexpr = gl.SliceLayout(4, a_rows.type.layout)
    # the rows carry no tile dim: a layout with one register along it, so split sees no
    # duplicated registers (a tile dim of Q > 1 registers made its layout inference fail)
    NW: gl.constexpr = gl.num_warps()
    A: gl.constexpr = gl.BlockedLayout([1, 1, 1, 4, 4], [1, 1, 32, 1, 1], [NW, 1, 1, 1, 1], [4, 3, 2, 1, 0])
    ptr = gl.convert_layout(a_rows + gl.expand_dims(c * 64, 4), A)
    a = gl.load(ptr, mask=gl.convert_layout(gl.expand_dims(ok, 4), A), other=0)
    lo, hi = gl.split(gl.reshape(a, [NW, 1, 32, 4, 2, 2]))  # i = 2 * i_hi + i_lo
    b0, b2 = gl.split(lo)
    b1, b3 = gl.split(hi)
    return (gl.convert_layout(b0, W), gl.convert_layout(b1, W), gl.convert_layout(b2, W), gl.convert_layout(b3, W))


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
def _mma_tile(t, b, acc):
    """acc (the tile's fp32 fragment, [NW, Q, 32, 4]) += dequantized, scaled group t @ B pairs b:
    eight chained MMAs in one call."""
    return gl.inline_asm_elementwise(
        GROUP_ASM, "=f,=f,=f,=f," + "r," * 32 + "f,f,f,f",
        [t[0], t[1], _scale_pair(t[2]), _scale_pair(t[3]), b[0], b[1], b[2], b[3], acc],
        dtype=gl.float32, is_pure=True, pack=4)


@gluon.jit
def gdc_wait():
    """Programmatic dependent launch: wait until the grids this one depends on have finished
    and their writes are visible (a no-op when launched without launch_pdl)."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def gdc_launch_dependents():
    """Let the next grid in the stream start launching (it still waits in gdc_wait for this one)."""
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)


@gluon.jit
def decode_gemm1_swiglu_kernel(
    x_ptr, w_ptr, s_ptr, act_ptr, sorted_ptr, block_expert_ptr,
    S, K, I, NB, TOPK,
    stride_xm, stride_we, stride_wn, stride_se, stride_sn, stride_am,
    clamp_limit,
    HAS_CLAMP: gl.constexpr, Q: gl.constexpr, NW: gl.constexpr, MASK: gl.constexpr,
    WC: gl.constexpr = "",
):
    """act[b*8 + t, n] = silu(gate) * up for the 8 slots of block b and Q*16 columns n.
    x_ptr holds the hidden states as B pairs (prep_act_kernel); x_ptr/w_ptr are int32
    views (2 bf16 / 4 e2m1 bytes a word); strides are in elements of the underlying
    bf16 / uint8 tensors."""
    gdc_wait()  # routing and the laid-out hidden states come from the launch before
    gdc_launch_dependents()
    b, nt, e = program_tile(block_expert_ptr, NB)
    if e < 0:
        return
    e = e.to(gl.int64)
    w, q, m, i, g, t4 = _ids(NW, Q)
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

    zero = gl.zeros([NW, Q, 32, 4], gl.float32, layout=gl.SliceLayout(4, _layout(NW, Q)))
    gacc = zero
    uacc = zero
    for c0 in range(0, gl.cdiv(K, 128), NW):
        c = c0 + w
        kin = (c * 4 + t4) < KG
        bp = _load_act(a_rows, c, tok_ok & kin)
        gacc = _mma_tile(_load_tile(g_lo, sg_lo, rw, stride_sn, c, row_ok & kin, MASK, WC), bp, gacc)
        uacc = _mma_tile(_load_tile(u_lo, su_lo, rw, stride_sn, c, row_ok & kin, MASK, WC), bp, uacc)

    swiglu_store(gacc, uacc, act_ptr, b, nt, I, stride_am, clamp_limit, HAS_CLAMP)


@gluon.jit
def swiglu_store(gacc, uacc, act_ptr, b, nt, I, stride_am, clamp_limit, HAS_CLAMP: gl.constexpr):
    """The gate/up epilogue: the warps' fragments summed, SwiGLU (and clamp), stored as the down
    GEMM's B pairs (within each 8 values k0 k4 k1 k5 k2 k6 k3 k7), times 2**64."""
    NW: gl.constexpr = gacc.shape[0]
    Q: gl.constexpr = gacc.shape[1]
    oq, olane, oi = _out_ids(NW, Q)
    orow = nt * (16 * Q) + oq * 16 + olane // 4 + (oi // 2) * 8
    otok = (olane % 4) * 2 + oi % 2
    gate = _total(gacc) * HALF
    up = _total(uacc) * HALF
    if HAS_CLAMP:
        gate = gl.minimum(gate, clamp_limit)
        up = gl.minimum(gl.maximum(up, -clamp_limit), clamp_limit)
    h = gate / (1.0 + gl.exp(-gate)) * up
    pcol = (orow & ~7) | ((orow & 3) << 1) | ((orow >> 2) & 1)
    dst = act_ptr + (b * 8 + otok).to(gl.int64) * stride_am + pcol
    gl.store(dst, (h * LIFT).to(gl.bfloat16), mask=orow < I)


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
    w, q, m, i, g, t4 = _ids(NW, Q)
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

    acc = gl.zeros([NW, Q, 32, 4], gl.float32, layout=gl.SliceLayout(4, _layout(NW, Q)))
    for c0 in range(0, gl.cdiv(K, 128), NW):
        c = c0 + w
        kin = (c * 4 + t4) < KG
        acc = _mma_tile(_load_tile(w_lo, s_lo, rw, stride_sn, c, row_ok & kin, MASK, WC),
                        _load_act(a_rows, c, tok_ok & kin), acc)

    if AV == 8:
        _combine_rows(_total(acc), out_ptr, sorted_ptr, topk_w_ptr, b, nt, S, N, TOPK, stride_om, scale_factor,
                      OUT_MODE)
        return
    oq, olane, oi = _out_ids(NW, Q)
    col = nt * (16 * Q) + oq * 16 + olane // 4 + (oi // 2) * 8
    slot = gl.load(sorted_ptr + b * 8 + (olane % 4) * 2 + oi % 2)
    ok = (slot < S) & (col < N)
    wt = gl.load(topk_w_ptr + slot, mask=ok, other=0.0).to(gl.float32) * (scale_factor * HALF)
    v = _total(acc) * wt
    if OUT_MODE == 2:
        gl.store(out_ptr + slot.to(gl.int64) * stride_om + col, v, mask=ok)
    else:
        tok = (slot // TOPK).to(gl.int64)
        gl.atomic_add(out_ptr + tok * stride_om + col, v.to(out_ptr.dtype.element_ty), mask=ok, sem="relaxed")


@gluon.jit
def _combine_rows(v, out_ptr, sorted_ptr, topk_w_ptr, b, nt, S, N, TOPK, stride_om, scale_factor,
                  OUT_MODE: gl.constexpr):
    """The epilogue with 8 consecutive output columns of one token a thread, so the bf16
    atomics are 16-byte vectors (atom .v8.bf16): v [Q, 32, 4] in the fragment order
    (column 16 q + 8 (i // 2) + lane // 4, token 2 (lane % 4) + i % 2) becomes [16 Q, 8]."""
    Q: gl.constexpr = v.shape[0]
    NW: gl.constexpr = gl.num_warps()
    v = gl.reshape(gl.permute(gl.reshape(v, [Q, 8, 4, 2, 2]), (0, 3, 1, 2, 4)), [16 * Q, 8])
    OL: gl.constexpr = gl.BlockedLayout([8, 1], [2 * Q, 16 // Q], [1, NW], [0, 1])
    v = gl.convert_layout(v, OL)
    col = nt * (16 * Q) + gl.expand_dims(gl.arange(0, 16 * Q, layout=gl.SliceLayout(1, OL)), 1)
    slot = gl.expand_dims(gl.load(sorted_ptr + b * 8 + gl.arange(0, 8, layout=gl.SliceLayout(0, OL))), 0)
    ok = (slot < S) & (col < N)
    v = v * (gl.load(topk_w_ptr + slot, mask=ok, other=0.0).to(gl.float32) * (scale_factor * HALF))
    if OUT_MODE == 2:
        gl.store(out_ptr + slot.to(gl.int64) * stride_om + col, v, mask=ok)
    else:
        tok = (slot // TOPK).to(gl.int64)
        gl.atomic_add(out_ptr + tok * stride_om + col, v.to(out_ptr.dtype.element_ty), mask=ok, sem="relaxed")
