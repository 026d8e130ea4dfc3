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
