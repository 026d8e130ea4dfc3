"""e2m1 (+ E8M0 scale) -> bf16 by integer arithmetic, no table and no multiply.

A code s|e1 e0|m is 0, +-0.5 (e=0, m=1) or +-2**(e-1) * (1 + m/2). With the
scale's biased exponent x, the scaled value's bf16 exponent field is x-1 for
0.5 and e+x-1 otherwise, and its top mantissa bit is m: the result is exact
whenever that field stays within 1..254 (every real checkpoint's scales do).
"""
import triton
import triton.language as tl


@triton.jit
def e2m1_scaled_to_bf16(code, sexp):
    """code: int32 tensor of 4-bit codes; sexp: int32 E8M0 exponents (broadcastable)."""
    sign = (code & 8) << 12
    e = (code >> 1) & 3
    m = code & 1
    expo = tl.where(e == 0, sexp - 1, e + sexp - 1)
    mag = tl.where(e == 0, tl.where(m == 0, 0, expo << 7), (expo << 7) | (m << 6))
    bits = (mag | sign).to(tl.int16)
    return bits.to(tl.bfloat16, bitcast=True)


@triton.jit
def transposed(w, TO_F32: tl.constexpr):
    """[N, K] weight tile -> [K, N] dot operand (fp32 under the CPU interpreter)."""
    if TO_F32:
        w = w.to(tl.float32)
    return tl.trans(w)


# Packed e2m1 -> bf16 for sm_90+ in PTX: four bytes per 32-bit register, two
# bf16 per output register. The code's low 3 bits go to bf16 bits 8..6 and its
# sign to bit 15, which reads as value * 2**-126 (0.5 is a bf16 subnormal);
# one mul.bf16x2 by 2**126 (subnormals are kept by mul.bf16x2) restores it; the
# E8M0 scale, one per 32 values, is multiplied in afterwards (exact: a power of 2). About 3 instructions per value against ~18
# for the integer path, which at M=1 was the bottleneck, not memory.
_ASM_BODY = """
{
.reg .b32 t0, t1, u0, u1, k;
mov.b32 k, 0x7E807E80;
prmt.b32 t0, $2, 0, 0x4140;
prmt.b32 t1, $2, 0, 0x4342;
SHIFTS
and.b32 u0, u0, 0x01C001C0;
and.b32 t0, t0, 0x80008000;
or.b32 $0, u0, t0;
and.b32 u1, u1, 0x01C001C0;
and.b32 t1, t1, 0x80008000;
or.b32 $1, u1, t1;
mul.rn.bf16x2 $0, $0, k;
mul.rn.bf16x2 $1, $1, k;
}
"""
_LO = ("shl.b32 u0, t0, 6;\nshl.b32 t0, t0, 12;\n"
       "shl.b32 u1, t1, 6;\nshl.b32 t1, t1, 12;")
_HI = ("shl.b32 u0, t0, 2;\nshl.b32 t0, t0, 8;\n"
       "shl.b32 u1, t1, 2;\nshl.b32 t1, t1, 8;")
ASM_LO = tl.constexpr(_ASM_BODY.replace("SHIFTS", _LO))
ASM_HI = tl.constexpr(_ASM_BODY.replace("SHIFTS", _HI))


@triton.jit
def scale_to_bf16(sexp):
    """E8M0 exponent (1..254) -> 2**(sexp-127) as bf16, exactly."""
    return (sexp.to(tl.int16) << 7).to(tl.bfloat16, bitcast=True)


@triton.jit
def dequant_pair(byte, sexp, FAST: tl.constexpr):
    """Packed bytes (uint8) and their E8M0 exponents (same shape) ->
    (even-k, odd-k) bf16 tensors of the byte tensor's shape."""
    if FAST:
        sc = scale_to_bf16(sexp)
        lo = tl.inline_asm_elementwise(ASM_LO, "=r,=r,r", [byte], dtype=tl.bfloat16,
                                       is_pure=True, pack=4) * sc
        hi = tl.inline_asm_elementwise(ASM_HI, "=r,=r,r", [byte], dtype=tl.bfloat16,
                                       is_pure=True, pack=4) * sc
    else:
        b = byte.to(tl.int32) & 0xFF
        s = sexp.to(tl.int32) & 0xFF
        lo = e2m1_scaled_to_bf16(b & 0xF, s)
        hi = e2m1_scaled_to_bf16(b >> 4, s)
    return lo, hi


@triton.jit
def scale_rows_ptr32(s_ptr, row_off):
    """int32 view of the scale rows at byte offsets row_off (multiples of 4)."""
    return s_ptr.to(tl.pointer_type(tl.int32)) + row_off // 4


@triton.jit
def load_scales(s_rows, s_rows32, k0, KG, row_mask, BLOCK_K: tl.constexpr, SCALE_VEC: tl.constexpr):
    """E8M0 exponents [R, BLOCK_K // 32, 1] (int32) of the K step at k0, in the
    shape of the [R, G, 16] weight tile they scale.

    SCALE_VEC: read them out of 32-bit words (four groups a word; needs K/32 % 4
    == 0 and BLOCK_K % 128 == 0). A byte load is too narrow for cp.async, so
    Triton issues it as a plain LDG whose DRAM latency every K step then waits
    out; a word load is pipelined through shared memory like the weights.
    """
    G: tl.constexpr = BLOCK_K // 32
    g = tl.arange(0, G)[None, :, None]
    m = row_mask[:, None, None]
    if SCALE_VEC:
        kw = k0 // 128 + g // 4
        words = tl.load(s_rows32[:, None, None] + kw, mask=m & (kw < KG // 4), other=0x7F7F7F7F)
        return (words >> ((g % 4) * 8)) & 0xFF
    else:
        kg = k0 // 32 + g
        s = tl.load(s_rows[:, None, None] + kg, mask=m & (kg < KG), other=127)
        return s.to(tl.int32)


@triton.jit
def dequant_tile(byte, sexp, FAST: tl.constexpr):
    """Packed bytes [R, G, 16] (uint8) and exponents [R, G, 1] (int32) ->
    (even-k, odd-k) bf16 tiles [R, G * 16]."""
    R: tl.constexpr = byte.shape[0]
    G: tl.constexpr = byte.shape[1]
    if FAST:
        sc = scale_to_bf16(sexp)
        lo = tl.inline_asm_elementwise(ASM_LO, "=r,=r,r", [byte], dtype=tl.bfloat16,
                                       is_pure=True, pack=4) * sc
        hi = tl.inline_asm_elementwise(ASM_HI, "=r,=r,r", [byte], dtype=tl.bfloat16,
                                       is_pure=True, pack=4) * sc
    else:
        b = byte.to(tl.int32) & 0xFF
        s = sexp & 0xFF
        lo = e2m1_scaled_to_bf16(b & 0xF, s)
        hi = e2m1_scaled_to_bf16(b >> 4, s)
    return tl.reshape(lo, [R, G * 16]), tl.reshape(hi, [R, G * 16])
