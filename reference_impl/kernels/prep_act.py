"""Decode path's first launch after routing: the hidden states as the MMA's B pairs
(within every 8 values the order k0 k4 k1 k5 k2 k6 k3 k7, times 2**64; see
decode_mma.py) and, in the same pass, the zeroed output that the down GEMM's
atomics accumulate into. It replaces the output's memset launch, so the
decode kernels pair no activations themselves."""
import triton
import triton.language as tl


@triton.jit
def prep_act_kernel(x_ptr, xb_ptr, out_ptr, n, H, stride_xm, stride_bm, stride_om,
                    ZERO_OUT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    row = offs // H
    col = offs % H
    x = tl.load(x_ptr + row * stride_xm + col, mask=ok, other=0.0)
    pcol = (col & ~7) | ((col & 3) << 1) | ((col >> 2) & 1)
    tl.store(xb_ptr + row * stride_bm + pcol, (x.to(tl.float32) * 1.8446744073709552e19).to(tl.bfloat16), mask=ok)
    if ZERO_OUT:
        tl.store(out_ptr + row * stride_om + col, tl.zeros([BLOCK], dtype=out_ptr.dtype.element_ty), mask=ok)
