"""Deterministic top-k combine: out[m] = sum_j buf[m * topk + j] in slot order,
skipping slots whose expert id is invalid (their rows were never written)."""
import triton
import triton.language as tl


@triton.jit
def reduce_topk_kernel(
    buf_ptr, ids_ptr, out_ptr, N, E, stride_bm, stride_om,
    TOPK: tl.constexpr, BLOCK_N: tl.constexpr,
):
    m = tl.program_id(0).to(tl.int64)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for j in tl.static_range(TOPK):
        eid = tl.load(ids_ptr + m * TOPK + j)
        eids = tl.full([BLOCK_N], 0, tl.int32) + eid.to(tl.int32)
        ok = (eids >= 0) & (eids < E)
        v = tl.load(buf_ptr + (m * TOPK + j) * stride_bm + offs_n, mask=n_ok & ok, other=0.0)
        acc += v
    tl.store(out_ptr + m * stride_om + offs_n, acc.to(out_ptr.dtype.element_ty), mask=n_ok)
