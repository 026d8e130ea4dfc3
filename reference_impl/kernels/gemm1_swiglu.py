"""Grouped gate/up GEMM over expert segments with the SwiGLU epilogue fused.

One program = one block of BLOCK_M sorted slots (all of one expert) x one tile
of BLOCK_N intermediate columns, computing the gate and the up tile together so
that silu(gate) * up is formed in registers. Weights are e2m1 bytes, dequantized
in registers to bf16 (scale folded into the exponent) and multiplied on tensor
cores; the activation tile is split into even/odd k to meet the two nibbles.
Output rows are the padded sorted rows: act[row] for row = block * BLOCK_M + r.
"""
import triton
import triton.language as tl

from .e2m1 import dequant_tile, load_scales, scale_rows_ptr32, transposed as _t


@triton.jit
def gemm1_swiglu_kernel(
    x_ptr, w_ptr, s_ptr, act_ptr, sorted_ptr, block_expert_ptr,
    S, K, I, NB, TOPK,
    stride_xm, stride_we, stride_wn, stride_se, stride_sn, stride_am,
    clamp_limit,
    HAS_CLAMP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_F32: tl.constexpr = False,
    FAST_DEQUANT: tl.constexpr = False,
    SCALE_VEC: tl.constexpr = False,
):
    pid = tl.program_id(0)
    b = pid % NB
    n = pid // NB
    e = tl.load(block_expert_ptr + b)
    if e < 0:
        return
    e = e.to(tl.int64)
    G: tl.constexpr = BLOCK_K // 32

    offs_m = b * BLOCK_M + tl.arange(0, BLOCK_M)
    slot = tl.load(sorted_ptr + offs_m)
    row_ok = slot < S
    tok = (slot // TOPK).to(tl.int64)
    offs_n = n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < I

    offs_k = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + tok[:, None] * stride_xm + offs_k[None, :]

    # weights as [BLOCK_N, G, 16] bytes, scales as [BLOCK_N, G, 1]
    g3 = tl.arange(0, G)[None, :, None]
    j3 = tl.arange(0, 16)[None, None, :]
    n3 = offs_n[:, None, None]
    w_g = w_ptr + e * stride_we + n3 * stride_wn + g3 * 16 + j3
    w_u = w_g + I * stride_wn
    wmask_n = n3 < I
    sg_off = e * stride_se + offs_n.to(tl.int64) * stride_sn
    su_off = sg_off + I * stride_sn
    s_g, s_u = s_ptr + sg_off, s_ptr + su_off
    s_g32, s_u32 = scale_rows_ptr32(s_ptr, sg_off), scale_rows_ptr32(s_ptr, su_off)
    KG = K // 32

    acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if not SCALE_VEC:
        # byte loads are too narrow for cp.async: Triton issues them as plain
        # LDGs, so they are fetched one K step ahead and carried in registers
        sg_n = load_scales(s_g, s_g32, 0, KG, n_ok, BLOCK_K, False)
        su_n = load_scales(s_u, s_u32, 0, KG, n_ok, BLOCK_K, False)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(x_rows + k0, mask=row_ok[:, None] & (k0 + offs_k[None, :] < K), other=0.0)
        if DOT_F32:  # the CPU interpreter's bf16 tl.dot is wrong; keep its math in fp32
            a = a.to(tl.float32)
        a_even, a_odd = tl.split(tl.reshape(a, [BLOCK_M, BLOCK_K // 2, 2]))
        kmask = wmask_n & (k0 + g3 * 32 < K)
        bg = tl.load(w_g + k0 // 2, mask=kmask, other=0)
        bu = tl.load(w_u + k0 // 2, mask=kmask, other=0)
        if SCALE_VEC:
            sg = load_scales(s_g, s_g32, k0, KG, n_ok, BLOCK_K, True)
            su = load_scales(s_u, s_u32, k0, KG, n_ok, BLOCK_K, True)
        else:
            sg, su = sg_n, su_n
            sg_n = load_scales(s_g, s_g32, k0 + BLOCK_K, KG, n_ok, BLOCK_K, False)
            su_n = load_scales(s_u, s_u32, k0 + BLOCK_K, KG, n_ok, BLOCK_K, False)
        g_lo, g_hi = dequant_tile(bg, sg, FAST_DEQUANT)
        u_lo, u_hi = dequant_tile(bu, su, FAST_DEQUANT)
        acc_g = tl.dot(a_even, _t(g_lo, DOT_F32), acc_g)
        acc_g = tl.dot(a_odd, _t(g_hi, DOT_F32), acc_g)
        acc_u = tl.dot(a_even, _t(u_lo, DOT_F32), acc_u)
        acc_u = tl.dot(a_odd, _t(u_hi, DOT_F32), acc_u)

    if HAS_CLAMP:
        acc_g = tl.minimum(acc_g, clamp_limit)
        acc_u = tl.minimum(tl.maximum(acc_u, -clamp_limit), clamp_limit)
    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    out = act_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_n[None, :]
    tl.store(out, h.to(act_ptr.dtype.element_ty), mask=n_ok[None, :])
