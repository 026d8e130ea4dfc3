"""Decode path (few token rows per expert): weight-streaming GEMV on CUDA cores.

At M*topk of a few dozen slots each touched expert holds 1-2 token rows, so a
tensor-core tile is mostly padding and the grouped kernels spend their time
moving each raw weight tile through shared memory (cp.async, then layout
conversions for the MMA operand). Here a program = one block of BLOCK_M sorted
slots (one expert, from the same routing) x BLOCK_N weight rows; it streams its
weight rows with 16-byte loads straight into registers (no shared memory),
dequantizes e2m1 with the PTX bf16x2 path, multiplies by the block's token
rows with fp32 FMAs and sums each 32-value scale group inside the thread; the
E8M0 scale is applied once per group (not per value) as an fp32 power of two.
The loop fetches the next K step's weights and scales before using the current
ones (register double buffer), which is the only pipelining: plenty of small
programs per SM cover the rest of the DRAM latency.

gemv1_swiglu: act[row] = silu(clamp(x W_gate^T)) * clamp(x W_up^T) (rows as gemm1)
gemv2_combine: out[token] += w * rsf * act[row] W2^T, OUT_MODE as gemm2_combine.
"""
import triton
import triton.language as tl

from .e2m1 import ASM_LO, ASM_HI, e2m1_scaled_to_bf16


@triton.jit
def _dequant_f32(byte, FAST: tl.constexpr):
    """Packed bytes -> (even-k, odd-k) fp32 e2m1 values, scale not applied."""
    if FAST:
        lo = tl.inline_asm_elementwise(ASM_LO, "=r,=r,r", [byte], dtype=tl.bfloat16, is_pure=True, pack=4)
        hi = tl.inline_asm_elementwise(ASM_HI, "=r,=r,r", [byte], dtype=tl.bfloat16, is_pure=True, pack=4)
    else:
        b = byte.to(tl.int32) & 0xFF
        lo = e2m1_scaled_to_bf16(b & 0xF, 127)
        hi = e2m1_scaled_to_bf16(b >> 4, 127)
    return lo.to(tl.float32), hi.to(tl.float32)


@triton.jit
def _scale_f32(sexp):
    """E8M0 exponent bytes -> 2**(s-127) in fp32 (exact for s in 1..254)."""
    return (sexp.to(tl.int32) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _gemv_acc(a_ptr, stride_a, sorted_ptr, row0, S, TOPK, w_rows, s_rows, n_ok, K,
              BY_TOKEN: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FAST: tl.constexpr):
    """sum_k a[r_m, k] * W[n, k] for the BLOCK_M sorted rows row0.. (token
    rows of a if BY_TOKEN, else a's padded rows themselves) and BLOCK_N weight
    rows (byte pointers to packed rows and to scale rows): [BLOCK_M, BLOCK_N]
    fp32. Rows whose slot is padding read zeros."""
    G: tl.constexpr = BLOCK_K // 32
    KG = K // 32
    # [BN, G, 4, 4]: 4-byte words of each 16-byte group; the token row's 32-bit
    # words take the same [.., 4] shape, so both get one layout (no conversion)
    g4 = tl.arange(0, G)[None, :, None, None]
    i4 = tl.arange(0, 4)[None, None, :, None]
    q4 = tl.arange(0, 4)[None, None, None, :]
    w_p = w_rows[:, None, None, None] + g4 * 16 + i4 * 4 + q4
    s_p = s_rows[:, None, None] + tl.arange(0, G)[None, :, None]     # [BN, G, 1]
    gok = g4 < KG
    nm4 = n_ok[:, None, None, None]
    nm3 = n_ok[:, None, None]
    a32 = a_ptr.to(tl.pointer_type(tl.int32))
    mrow = tl.arange(0, BLOCK_M)[:, None, None, None]
    acc = tl.zeros([BLOCK_M, BLOCK_N, G, 4], dtype=tl.float32)
    bw_n = tl.load(w_p, mask=nm4 & gok, other=0)
    sw_n = tl.load(s_p, mask=nm3 & (tl.arange(0, G)[None, :, None] < KG), other=127)
    for k0 in range(0, K, BLOCK_K):
        bw = bw_n
        sw = sw_n
        kn = k0 + BLOCK_K
        # next step's weights/scales first: their DRAM latency overlaps this step's math
        bw_n = tl.load(w_p + kn // 2, mask=nm4 & (kn // 32 + g4 < KG), other=0)
        sw_n = tl.load(s_p + kn // 32, mask=nm3 & (kn // 32 + tl.arange(0, G)[None, :, None] < KG), other=127)
        lo, hi = _dequant_f32(bw, FAST)
        sc = _scale_f32(sw)
        for m in tl.static_range(BLOCK_M):
            slot = tl.load(sorted_ptr + row0 + m)
            ok = slot < S
            if BY_TOKEN:
                r = tl.where(ok, slot // TOPK, 0).to(tl.int64)
            else:
                r = (row0 + m).to(tl.int64)
            # the row as 32-bit words: word j of a group = (k=2j, k=2j+1) = byte j's
            # two nibbles, so the even/odd split is a shift / a mask, and each
            # thread's 4 words are summed by in-thread FMAs
            wd = tl.load(a32 + r * (stride_a // 2) + k0 // 2 + g4 * 16 + i4 * 4 + q4,
                         mask=(k0 // 32 + g4 + q4 * 0 < KG) & (g4 * 0 + slot < S), other=0)
            xe = (wd << 16).to(tl.float32, bitcast=True)
            xo = (wd & -65536).to(tl.float32, bitcast=True)
            part = tl.sum(lo * xe + hi * xo, axis=3) * sc          # [BN, G, 4]
            if BLOCK_M == 1:
                acc += part[None, :, :, :]
            else:
                acc += tl.where(mrow == m, part[None, :, :, :], 0.0)
    return tl.sum(tl.sum(acc, axis=3), axis=2)


@triton.jit
def gemv1_swiglu_kernel(
    x_ptr, w_ptr, s_ptr, act_ptr, sorted_ptr, block_expert_ptr,
    S, K, I, NB, TOPK,
    stride_xm, stride_we, stride_wn, stride_se, stride_sn, stride_am,
    clamp_limit,
    HAS_CLAMP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    FAST_DEQUANT: tl.constexpr = False,
):
    pid = tl.program_id(0)
    b = pid % NB
    n = pid // NB
    e = tl.load(block_expert_ptr + b)
    if e < 0:
        return
    e = e.to(tl.int64)
    offs_m = b * BLOCK_M + tl.arange(0, BLOCK_M)
    slot = tl.load(sorted_ptr + offs_m)
    row_ok = slot < S
    offs_n = n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < I
    rn = tl.where(n_ok, offs_n, 0).to(tl.int64)
    wg = w_ptr + e * stride_we + rn * stride_wn
    sg = s_ptr + e * stride_se + rn * stride_sn
    row0 = b * BLOCK_M
    acc_g = _gemv_acc(x_ptr, stride_xm, sorted_ptr, row0, S, TOPK, wg, sg, n_ok, K,
                      True, BLOCK_M, BLOCK_N, BLOCK_K, FAST_DEQUANT)
    acc_u = _gemv_acc(x_ptr, stride_xm, sorted_ptr, row0, S, TOPK, wg + I * stride_wn, sg + I * stride_sn,
                      n_ok, K, True, BLOCK_M, BLOCK_N, BLOCK_K, FAST_DEQUANT)
    if HAS_CLAMP:
        acc_g = tl.minimum(acc_g, clamp_limit)
        acc_u = tl.minimum(tl.maximum(acc_u, -clamp_limit), clamp_limit)
    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    out = act_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_n[None, :]
    tl.store(out, h.to(act_ptr.dtype.element_ty), mask=n_ok[None, :])


@triton.jit
def gemv2_combine_kernel(
    a_ptr, w_ptr, s_ptr, out_ptr, sorted_ptr, block_expert_ptr, topk_w_ptr,
    S, N, K, NB, TOPK,
    stride_am, stride_we, stride_wn, stride_se, stride_sn, stride_om,
    scale_factor,
    OUT_MODE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    FAST_DEQUANT: tl.constexpr = False,
):
    pid = tl.program_id(0)
    b = pid % NB
    n = pid // NB
    e = tl.load(block_expert_ptr + b)
    if e < 0:
        return
    e = e.to(tl.int64)
    offs_m = b * BLOCK_M + tl.arange(0, BLOCK_M)
    slot = tl.load(sorted_ptr + offs_m)
    row_ok = slot < S
    offs_n = n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    rn = tl.where(n_ok, offs_n, 0).to(tl.int64)
    acc = _gemv_acc(a_ptr, stride_am, sorted_ptr, b * BLOCK_M, S, TOPK,
                    w_ptr + e * stride_we + rn * stride_wn, s_ptr + e * stride_se + rn * stride_sn, n_ok, K,
                    False, BLOCK_M, BLOCK_N, BLOCK_K, FAST_DEQUANT)
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
