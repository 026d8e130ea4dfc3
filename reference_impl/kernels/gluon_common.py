"""Gluon helpers shared by the decode path (decode_mma, decode_tma) and the prefill path
(prefill_wgmma, prefill_ws): the e2m1 dequant PTX and its scale fold, the mma.sync fragment
layouts and their loads, the decode epilogues, programmatic-dependent-launch waits, mbarrier
release. decode_mma.py's docstring explains the dequant, the fragment order and the 2**64 lift.
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

# dequant one word (8 nibbles) into A pairs (k0,k4) (k1,k5) (k2,k6) (k3,k7), times the scale pair
DQ = """
shl.b32 m, {w}, 6; shl.b32 s, {w}, 12; and.b32 m, m, 0x01C001C0; and.b32 s, s, 0x80008000; or.b32 {o}0, m, s;
shl.b32 m, {w}, 2; shl.b32 s, {w}, 8; and.b32 m, m, 0x01C001C0; and.b32 s, s, 0x80008000; or.b32 {o}1, m, s;
shr.u32 m, {w}, 2; shl.b32 s, {w}, 4; and.b32 m, m, 0x01C001C0; and.b32 s, s, 0x80008000; or.b32 {o}2, m, s;
shr.u32 m, {w}, 6; and.b32 m, m, 0x01C001C0; and.b32 s, {w}, 0x80008000; or.b32 {o}3, m, s;
mul.rn.bf16x2 {o}0, {o}0, {sc}; mul.rn.bf16x2 {o}1, {o}1, {sc};
mul.rn.bf16x2 {o}2, {o}2, {sc}; mul.rn.bf16x2 {o}3, {o}3, {sc};
"""
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"


def _group_asm():
    """pack=4 over the group's 4 words m. Operands: $0..$3 D (the fragment), $4+m word m
    of row r, $8+m of row r + 8, $12 / $16 scale pairs of rows r / r + 8 (x4),
    $20+m .. $32+m the B pairs (k0,k4) (k1,k5) (k2,k6) (k3,k7) of word m, $36..$39 C."""
    body = ["{", ".reg .b32 m, s, l0, l1, l2, l3, h0, h1, h2, h3;"]
    for w in range(4):
        body.append(DQ.format(w=f"${4 + w}", o="l", sc="$12") + DQ.format(w=f"${8 + w}", o="h", sc="$16"))
        c = "$36,$37,$38,$39" if w == 0 else "$0,$1,$2,$3"
        body.append(f"{MMA} {{$0,$1,$2,$3}}, {{l0,h0,l1,h1}}, {{${20 + w},${24 + w}}}, {{{c}}};")
        body.append(f"{MMA} {{$0,$1,$2,$3}}, {{l2,h2,l3,h3}}, {{${28 + w},${32 + w}}}, {{$0,$1,$2,$3}};")
    body.append("}")
    return "\n".join(body)


GROUP_ASM = gl.constexpr(_group_asm())
LIFT = gl.constexpr(1.8446744073709552e19)  # 2**64
HALF = gl.constexpr(0.5)  # the products carry 2**126 * 2**-64 * 2**-64 * 2 = 2


@gluon.constexpr_function
def frag_layout(NW, Q):
    return gl.BlockedLayout([1, Q, 1, 4, 4], [1, 1, 32, 1, 1], [NW, 1, 1, 1, 1], [4, 3, 2, 1, 0])


@gluon.jit
def frag_ids(NW: gl.constexpr, Q: gl.constexpr):
    """Index tensors of the weight tiles, in the layout of a [NW, Q, 32, 4] load (one 128-bit
    vector a lane): warp w, tile q, word m, the register index i, and the lane's MMA roles
    g = lane // 4 (row, token) and t4 = lane % 4 (k)."""
    L: gl.constexpr = frag_layout(NW, Q)
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
def frag_out_ids(NW: gl.constexpr, Q: gl.constexpr):
    """(tile, lane, register) index tensors in the layout of frag_total's result."""
    S: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(4, frag_layout(NW, Q)))  # dims (1, 2, 3)
    q = gl.expand_dims(gl.expand_dims(gl.arange(0, Q, layout=gl.SliceLayout(1, gl.SliceLayout(2, S))), 1), 2)
    lane = gl.expand_dims(gl.expand_dims(gl.arange(0, 32, layout=gl.SliceLayout(0, gl.SliceLayout(2, S))), 0), 2)
    i = gl.expand_dims(gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, S))), 0), 1)
    return q, lane, i


@gluon.jit
def frag_total(x):
    """Sum a fragment over the warps' K chunks -> [Q, 32, 4]."""
    return gl.sum(x, 0)


@gluon.jit
def scale_pair(s):
    """E8M0 byte s -> bf16x2 of 2**(s - 64) in both halves."""
    bits = (s.to(gl.int32) + 63) << 7
    return bits | (bits << 16)


@gluon.jit
def load_act(a_rows, c, ok):
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
def mma_tile(t, b, acc):
    """acc (the tile's fp32 fragment, [NW, Q, 32, 4]) += dequantized, scaled group t @ B pairs b:
    eight chained MMAs in one call."""
    return gl.inline_asm_elementwise(
        GROUP_ASM, "=f,=f,=f,=f," + "r," * 32 + "f,f,f,f",
        [t[0], t[1], scale_pair(t[2]), scale_pair(t[3]), b[0], b[1], b[2], b[3], acc],
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
def swiglu_store(gacc, uacc, act_ptr, b, nt, I, stride_am, clamp_limit, HAS_CLAMP: gl.constexpr):
    """The gate/up epilogue: the warps' fragments summed, SwiGLU (and clamp), stored as the down
    GEMM's B pairs (within each 8 values k0 k4 k1 k5 k2 k6 k3 k7), times 2**64."""
    NW: gl.constexpr = gacc.shape[0]
    Q: gl.constexpr = gacc.shape[1]
    oq, olane, oi = frag_out_ids(NW, Q)
    orow = nt * (16 * Q) + oq * 16 + olane // 4 + (oi // 2) * 8
    otok = (olane % 4) * 2 + oi % 2
    gate = frag_total(gacc) * HALF
    up = frag_total(uacc) * HALF
    if HAS_CLAMP:
        gate = gl.minimum(gate, clamp_limit)
        up = gl.minimum(gl.maximum(up, -clamp_limit), clamp_limit)
    h = gate / (1.0 + gl.exp(-gate)) * up
    pcol = (orow & ~7) | ((orow & 3) << 1) | ((orow >> 2) & 1)
    dst = act_ptr + (b * 8 + otok).to(gl.int64) * stride_am + pcol
    gl.store(dst, (h * LIFT).to(gl.bfloat16), mask=orow < I)


@gluon.jit
def combine_rows(v, out_ptr, sorted_ptr, topk_w_ptr, b, nt, S, N, TOPK, stride_om, scale_factor,
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


@gluon.jit
def release_barriers(bars, STAGES: gl.constexpr):
    """Invalidate a ring's STAGES mbarriers (the kernel is past its last wait on them)."""
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))


# Two ways to prefetch a byte range into L2 without touching registers or shared memory.
# POLICY 1 / 2: cp.async.bulk.prefetch.L2 (sm_90+; goes through the SM's TMA unit, in order with the
# ring's copies), one request a thread: $1 the start (16-byte aligned), $2 the size (a multiple of 16;
# 0: nothing); 2 marks the lines evict_last, so the gate/up stream (normal priority) evicts its own
# lines before them. POLICY 3 / 4: prefetch.global.L2 (load/store unit, sm_80+), one 128-byte line an
# instruction, 3 evict_last, 4 evict_normal; $2 0: nothing
_PF_ASM = {
    1: "{ .reg .pred p; setp.ne.u32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
    2: "{ .reg .pred p; .reg .b64 pol; setp.ne.u32 p, $2, 0; createpolicy.fractional.L2::evict_last.b64 pol, 1.0; "
       "@p cp.async.bulk.prefetch.L2.global.L2::cache_hint [$1], $2, pol; mov.u32 $0, 0; }",
    3: "{ .reg .pred p; setp.ne.u32 p, $2, 0; @p prefetch.global.L2::evict_last [$1]; mov.u32 $0, 0; }",
    4: "{ .reg .pred p; setp.ne.u32 p, $2, 0; @p prefetch.global.L2::evict_normal [$1]; mov.u32 $0, 0; }",
}


@gluon.constexpr_function
def _pf_asm(policy):
    return _PF_ASM[policy]


@gluon.jit
def l2_prefetch(base_ptr, total, part, piece: gl.constexpr, NW: gl.constexpr, POLICY: gl.constexpr):
    """Prefetch into L2 part `part` of a byte range [base_ptr, + total) cut into parts of 32 NW pieces
    of `piece` bytes (a multiple of 16; of 128 for POLICY 3 / 4): one bulk request a thread (1, 2), or
    piece / 128 line prefetches a thread, on consecutive lines (3, 4)."""
    if POLICY <= 2:
        L: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
        off = (part * (32 * NW) + gl.arange(0, 32 * NW, layout=L)).to(gl.int64) * piece
        size = gl.minimum(gl.maximum(total - off, 0), piece).to(gl.int32)
        gl.inline_asm_elementwise(_pf_asm(POLICY), "=r,l,r", [base_ptr + off, size], dtype=gl.int32,
                                  is_pure=False, pack=1)
    else:
        NL: gl.constexpr = piece // 128
        L2: gl.constexpr = gl.BlockedLayout([NL], [32], [NW], [0])
        off = part.to(gl.int64) * (32 * NW * piece) + gl.arange(0, 32 * NW * NL, layout=L2).to(gl.int64) * 128
        ok = (off < total).to(gl.int32)
        gl.inline_asm_elementwise(_pf_asm(POLICY), "=r,l,r", [base_ptr + off, ok], dtype=gl.int32,
                                  is_pure=False, pack=1)


@gluon.jit
def prefetch_down(w2_ptr, s2_ptr, block_expert_ptr, b, nt, e, w2_bytes, s2_bytes, w2_piece: gl.constexpr,
                  s2_piece: gl.constexpr, NW: gl.constexpr, POLICY: gl.constexpr):
    """A gate/up program's share of its expert's down weights and scales, prefetched into L2 while the
    gate/up GEMM streams (bench/NOTES.md v16): program (b, nt) takes part nt of expert e's two
    contiguous ranges, and only the first block of an expert does (the blocks are sorted by expert)."""
    first = b == 0
    if b > 0:
        first = gl.load(block_expert_ptr + b - 1) != e
    if first:
        e64 = e.to(gl.int64)
        l2_prefetch(w2_ptr + e64 * w2_bytes, w2_bytes, nt, w2_piece, NW, POLICY)
        l2_prefetch(s2_ptr + e64 * s2_bytes, s2_bytes, nt, s2_piece, NW, POLICY)
