"""Single-program routing kernel for decode-sized batches.

Same outputs as routing.route_torch, in one launch (the tensor-op version is a
dozen tiny kernels, which costs more than the whole MoE at M=1): a histogram
of expert ids, two exclusive prefix sums (plain and padded to BLOCK_M), a sort
of the keys expert * S_PAD + slot (unique keys, so the order is stable), and
one scatter. Scratch holds the two prefix sums so the sorted slots can gather
them after a barrier.
"""
import triton
import triton.language as tl


@triton.jit
def route_kernel(
    ids_ptr, sorted_ptr, block_expert_ptr, scratch_ptr,
    S, E, P, NB,
    S_PAD: tl.constexpr, E_PAD: tl.constexpr, BLOCK_M: tl.constexpr, FILL: tl.constexpr,
):
    route_program(ids_ptr, sorted_ptr, block_expert_ptr, scratch_ptr, S, E, P, NB, S_PAD, E_PAD, BLOCK_M, FILL)


@triton.jit
def route_program(
    ids_ptr, sorted_ptr, block_expert_ptr, scratch_ptr,
    S, E, P, NB,
    S_PAD: tl.constexpr, E_PAD: tl.constexpr, BLOCK_M: tl.constexpr, FILL: tl.constexpr,
):
    """The whole routing, run by one program (route_kernel, or program 0 of route_prep_kernel)."""
    offs = tl.arange(0, S_PAD)
    ids = tl.load(ids_ptr + offs, mask=offs < S, other=-1).to(tl.int32)
    ids = tl.where((ids < 0) | (ids >= E), E, ids)

    fill = tl.arange(0, FILL)
    for f in range(0, P, FILL):
        tl.store(sorted_ptr + f + fill, tl.full([FILL], 0, tl.int32) + S, mask=f + fill < P)
    for f in range(0, NB, FILL):
        tl.store(block_expert_ptr + f + fill, tl.full([FILL], -1, tl.int32), mask=f + fill < NB)

    eoffs = tl.arange(0, E_PAD)
    counts = tl.histogram(ids, E_PAD)
    counts = tl.where(eoffs < E, counts, 0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    start = tl.cumsum(counts, 0) - counts
    pstart = tl.cumsum(padded, 0) - padded
    tl.store(scratch_ptr + eoffs, start)
    tl.store(scratch_ptr + E_PAD + eoffs, pstart)
    tl.debug_barrier()

    key = tl.sort(ids * S_PAD + offs)
    se = key // S_PAD
    slot = key % S_PAD
    ok = se < E
    st = tl.load(scratch_ptr + se, mask=ok, other=0)
    ps = tl.load(scratch_ptr + E_PAD + se, mask=ok, other=0)
    dest = ps + offs - st
    tl.store(sorted_ptr + dest, slot, mask=ok)
    tl.store(block_expert_ptr + dest // BLOCK_M, se, mask=ok)
