"""An eager graph's inputs (moe._eager_graph) copied into its static buffers in one launch: the
hidden states (contiguous [M, H], flattened) by every program, topk_ids and topk_weights (S values
each, same dtypes) by program 0 as well. One launch instead of three tensor copies: on the H200
machine each copy costs ~9 us of host time, a cached Triton launch ~5.5 us (bench/NOTES.md, v15)."""
import triton
import triton.language as tl


# not specialized on the callers' pointers' alignment or the sizes: one compiled kernel serves every
# call of an eager graph, launched without the JIT's per-call checks (moe._eager_graph)
@triton.jit(do_not_specialize=["x_ptr", "ids_ptr", "tw_ptr", "n_x", "S"])
def stage_inputs_kernel(x_ptr, xs_ptr, n_x, ids_ptr, ids_s_ptr, tw_ptr, tw_s_ptr, S,
                        BLOCK: tl.constexpr, S_PAD: tl.constexpr):
    pid = tl.program_id(0)
    o = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(xs_ptr + o, tl.load(x_ptr + o, mask=o < n_x), mask=o < n_x)
    if pid == 0:
        s = tl.arange(0, S_PAD)
        tl.store(ids_s_ptr + s, tl.load(ids_ptr + s, mask=s < S), mask=s < S)
        tl.store(tw_s_ptr + s, tl.load(tw_ptr + s, mask=s < S), mask=s < S)
