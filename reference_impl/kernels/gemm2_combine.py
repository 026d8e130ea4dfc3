"""Grouped down-projection GEMM with the top-k combine fused into its epilogue.

One program = one block of BLOCK_M sorted slots (one expert) x BLOCK_N hidden
columns. The A rows are the contiguous padded rows written by gemm1_swiglu.
Epilogue: scale each row by topk_weight * routed_scaling_factor, then
  OUT_MODE 0: atomic add (bf16) straight into out[token]      (no extra pass)
  OUT_MODE 1: atomic add into a float32 [M, H] buffer          (then a cast)
  OUT_MODE 2: store into a float32 [M * topk, H] per-slot buffer (deterministic,
              reduce_topk sums it in a fixed order)
"""
import triton
import triton.language as tl

from .e2m1 import dequant_pair, dequant_tile, load_scales, scale_rows_ptr32, transposed as _t


@triton.jit
def gemm2_combine_kernel(
    a_ptr, w_ptr, s_ptr, out_ptr, sorted_ptr, block_expert_ptr, topk_w_ptr,
    S, N, K, NB, TOPK,
    stride_am, stride_we, stride_wn, stride_se, stride_sn, stride_om,
    scale_factor,
    OUT_MODE: tl.constexpr,
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
    offs_n = n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N

    offs_k = tl.arange(0, BLOCK_K)
    a_rows = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :]

    KG = K // 32
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if SCALE_VEC:
        # weights as [BLOCK_N, G, 16] bytes (one 16-byte vector per row and scale
        # group) and their exponents out of 32-bit words, both via cp.async
        g3 = tl.arange(0, G)[None, :, None]
        j3 = tl.arange(0, 16)[None, None, :]
        w_p = w_ptr + e * stride_we + offs_n[:, None, None] * stride_wn + g3 * 16 + j3
        wmask_n = offs_n[:, None, None] < N
        s_off = e * stride_se + offs_n.to(tl.int64) * stride_sn
        s_rows32 = scale_rows_ptr32(s_ptr, s_off)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(a_rows + k0, mask=k0 + offs_k[None, :] < K, other=0.0)
            if DOT_F32:
                a = a.to(tl.float32)
            a_even, a_odd = tl.split(tl.reshape(a, [BLOCK_M, BLOCK_K // 2, 2]))
            bw = tl.load(w_p + k0 // 2, mask=wmask_n & (k0 + g3 * 32 < K), other=0)
            sw = load_scales(s_ptr + s_off, s_rows32, k0, KG, n_ok, BLOCK_K, True)
            w_lo, w_hi = dequant_tile(bw, sw, FAST_DEQUANT)
            acc = tl.dot(a_even, _t(w_lo, DOT_F32), acc)
            acc = tl.dot(a_odd, _t(w_hi, DOT_F32), acc)
    else:
        offs_kb = tl.arange(0, BLOCK_K // 2)
        w_p = w_ptr + e * stride_we + offs_n[:, None] * stride_wn + offs_kb[None, :]
        offs_g = tl.arange(0, G)[None, :]
        s_p = s_ptr + e * stride_se + offs_n[:, None] * stride_sn + offs_g
        wmask_n = offs_n[:, None] < N
        # byte loads are too narrow for cp.async: Triton issues them as plain
        # LDGs, so they are fetched one K step ahead and carried in registers
        sw_n = tl.load(s_p, mask=wmask_n & (offs_g < KG), other=127)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(a_rows + k0, mask=k0 + offs_k[None, :] < K, other=0.0)
            if DOT_F32:  # the CPU interpreter's bf16 tl.dot is wrong; keep its math in fp32
                a = a.to(tl.float32)
            a_even, a_odd = tl.split(tl.reshape(a, [BLOCK_M, BLOCK_K // 2, 2]))
            bw = tl.load(w_p + k0 // 2, mask=wmask_n & (k0 // 2 + offs_kb[None, :] < K // 2), other=0)
            sw = sw_n
            kn = (k0 + BLOCK_K) // 32
            sw_n = tl.load(s_p + kn, mask=wmask_n & (kn + offs_g < KG), other=127)
            sw = tl.reshape(tl.broadcast_to(sw[:, :, None], [BLOCK_N, G, 16]), [BLOCK_N, BLOCK_K // 2])
            w_lo, w_hi = dequant_pair(bw, sw, FAST_DEQUANT)
            acc = tl.dot(a_even, _t(w_lo, DOT_F32), acc)
            acc = tl.dot(a_odd, _t(w_hi, DOT_F32), acc)

    wt = tl.load(topk_w_ptr + slot, mask=row_ok, other=0.0).to(tl.float32) * scale_factor
    v = acc * wt[:, None]
    mask = row_ok[:, None] & n_ok[None, :]
    if OUT_MODE == 2:
        dst = out_ptr + slot[:, None].to(tl.int64) * stride_om + offs_n[None, :]
        tl.store(dst, v, mask=mask)
    else:
        tok = (slot // TOPK).to(tl.int64)
        dst = out_ptr + tok[:, None] * stride_om + offs_n[None, :]
        tl.atomic_add(dst, v.to(out_ptr.dtype.element_ty), mask=mask, sem="relaxed")
