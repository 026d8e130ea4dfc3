"""One launch for the whole MoE at decode sizes (Gluon, sm_90+): routing, the hidden states laid out
as B pairs, the gate/up GEMM + SwiGLU and the down GEMM + top-k combine in one persistent kernel.

Why: at M = 1 the three launches of the decode path (routing + prep, gate/up, down) cost their gaps
and each GEMM its own one-wave ramp and tail (bench/NOTES.md, v13: with the dequant and the MMAs cut
out the three launches still sit at 58% of the roofline at DSV4 M = 1).

Work comes in items, handed out in one global order by an atomic ticket counter:
  [0, NPREP)                 prep items: a slice of the hidden states as B pairs (prep_act's layout)
                             and, where the output takes atomics, the same slice of the output zeroed
  [NPREP, + NB * T1)         gate/up items (block b, column tile nt), b-major; each signals
                             cnt1[b] += 1 once its SwiGLU output is stored
  [.., + NB * T2)            down items (block b, output tile nt): their weights start streaming
                             into the ring, then they wait for cnt1[b] == T1
A program takes a ticket, and the next one while it works on it. An item waits only on items of
smaller tickets, each of which a running program holds, so the smallest unfinished ticket can always
run: no deadlock whatever the grid size or how many programs are resident.

Routing: every program computes it from topk_ids itself (S <= S_PAD slots, O(S^2) compares), the
same sorted order as kernels/route.py (by expert, then slot), into its own rows of a scratch buffer:
no program waits on another for it.

Graph safety: the flags live in a workspace the host zeroes once; the last program to finish (a done
counter) zeroes them again, so every launch (and every graph replay) starts from zeros with no host
work. Ordering: a producer's stores, a CTA barrier, a gpu-scope release by one thread; a consumer's
acquire by one thread, a CTA barrier, then its loads (the pattern of a split-K semaphore).
A wait gives up after SPIN_MAX polls (a wrong result instead of a hung GPU, should a bug ever leave
a counter short).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from .compat import cta_barrier, tma_load
from .decode_tma import tma_issue, tma_read_slot, tma_scales, ring_layout
from .gluon_common import (LIFT, combine_rows, frag_ids, frag_layout, frag_total, load_act, mma_tile,
                           release_barriers, swiglu_store)

SPIN_MAX = gl.constexpr(1 << 20)  # ~1 s of polls
N_FLAGS = 4  # ticket, prep items done, programs done, spare; then one counter a block


@gluon.jit
def _wait_count(ptr, target):
    """Poll a counter (gpu-scope acquire) until it reaches target; then the CTA's loads see what the
    producers stored before their release."""
    c = gl.atomic_add(ptr, 0, sem="acquire", scope="gpu")
    n = 0
    while (c < target) & (n < SPIN_MAX):
        c = gl.atomic_add(ptr, 0, sem="acquire", scope="gpu")
        n += 1
    cta_barrier()


@gluon.jit
def _signal(ptr):
    """Every warp's stores done (CTA barrier), then one release increment at gpu scope."""
    cta_barrier()
    gl.atomic_add(ptr, 1, sem="release", scope="gpu")


@gluon.jit
def _route(ids_ptr, rs_ptr, S, E, P, NB, S_PAD: gl.constexpr, CH: gl.constexpr, NW: gl.constexpr):
    """This program's routing into its scratch rows rs_ptr: [P] sorted slots (S for padding) then
    [NB] block experts (-1 unused), blocks of 8 slots, as route_kernel computes them."""
    L2: gl.constexpr = gl.BlockedLayout([1, 1], [32 // CH, CH], [NW, 1], [1, 0])
    R: gl.constexpr = gl.SliceLayout(1, L2)
    C: gl.constexpr = gl.SliceLayout(0, L2)
    F: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
    # padding first (a barrier before the scatter below)
    for f in range(0, P, 32 * NW):
        o = f + gl.arange(0, 32 * NW, layout=F)
        gl.store(rs_ptr + o, gl.zeros([32 * NW], gl.int32, layout=F) + S, mask=o < P)
    for f in range(0, NB, 32 * NW):
        o = f + gl.arange(0, 32 * NW, layout=F)
        gl.store(rs_ptr + P + o, gl.zeros([32 * NW], gl.int32, layout=F) - 1, mask=o < NB)
    s = gl.arange(0, S_PAD, layout=R)
    ids = gl.load(ids_ptr + s, mask=s < S, other=-1).to(gl.int32)
    ok = (ids >= 0) & (ids < E) & (s < S)
    ids = gl.where(ok, ids, E)
    si = gl.expand_dims(s, 1)
    ii = gl.expand_dims(ids, 1)
    before = gl.zeros([S_PAD], gl.int32, layout=R)  # same expert, smaller slot
    count = gl.zeros([S_PAD], gl.int32, layout=R)  # same expert
    for c0 in gl.static_range(0, S_PAD, CH):
        sc = c0 + gl.arange(0, CH, layout=C)
        ic = gl.load(ids_ptr + sc, mask=sc < S, other=-1).to(gl.int32)
        ic = gl.where((ic >= 0) & (ic < E) & (sc < S), ic, E)
        same = (ii == gl.expand_dims(ic, 0)).to(gl.int32)
        before += gl.sum(same * (gl.expand_dims(sc, 0) < si).to(gl.int32), 1)
        count += gl.sum(same, 1)
    # a leader (first slot of its expert) carries its expert's padded block rows
    lead = gl.where(ok & (before == 0), (count + 7) // 8 * 8, 0)
    gl.store(rs_ptr + P + NB + s, lead, mask=s < S)  # past the two outputs: [S_PAD] of scratch
    cta_barrier()
    start = gl.zeros([S_PAD], gl.int32, layout=R)
    for c0 in gl.static_range(0, S_PAD, CH):
        sc = c0 + gl.arange(0, CH, layout=C)
        ic = gl.load(ids_ptr + sc, mask=sc < S, other=-1).to(gl.int32)
        ic = gl.where((ic >= 0) & (ic < E) & (sc < S), ic, E)
        lc = gl.load(rs_ptr + P + NB + sc, mask=sc < S, other=0)
        start += gl.sum(gl.expand_dims(lc, 0) * (gl.expand_dims(ic, 0) < ii).to(gl.int32), 1)
    pos = start + before
    gl.store(rs_ptr + pos, s, mask=ok)
    gl.store(rs_ptr + P + pos // 8, ids, mask=ok)
    cta_barrier()


@gluon.jit
def _prep(blk, x_ptr, xb_ptr, out_ptr, n, H, stride_xm, stride_bm, stride_om,
          ZERO_OUT: gl.constexpr, PB: gl.constexpr, NW: gl.constexpr):
    """prep_act_block in Gluon: values blk * PB .. + PB of the flattened [M, H] hidden states, eight
    a thread at a time (few registers: the kernel's register count is its largest phase's)."""
    V: gl.constexpr = 256 * NW
    F: gl.constexpr = gl.BlockedLayout([8], [32], [NW], [0])
    for v0 in range(0, PB, V):
        offs = blk * PB + v0 + gl.arange(0, V, layout=F)
        ok = offs < n
        row = offs // H
        col = offs % H
        x = gl.load(x_ptr + row * stride_xm + col, mask=ok, other=0.0)
        pcol = (col & ~7) | ((col & 3) << 1) | ((col >> 2) & 1)
        gl.store(xb_ptr + row * stride_bm + pcol, (x.to(gl.float32) * LIFT).to(gl.bfloat16), mask=ok)
        if ZERO_OUT:
            gl.store(out_ptr + row * stride_om + col, gl.zeros([V], out_ptr.dtype.element_ty, layout=F), mask=ok)


@gluon.jit
def _ring_fill(desc, ring, full, q0, nk, coord0, row0, T: gl.constexpr, NW: gl.constexpr, Q: gl.constexpr,
               STAGES: gl.constexpr):
    """An item's first STAGES steps into the ring; the ring's step count q0 runs on across items
    (slot q % STAGES, phase (q // STAGES) & 1)."""
    for i in gl.static_range(STAGES):
        if i < nk:
            tma_issue(desc, ring, full.index((q0 + i) % STAGES), (q0 + i) % STAGES, coord0, row0, i, T, NW, Q)


@gluon.jit
def _gemm1_item(b, nt, e, xb_ptr, w_desc, s_ptr, act_ptr, rs_ptr, ring, full, q0, prep_done, NPREP, S, K, I, TOPK,
                stride_xm, stride_se, stride_sn, stride_am, clamp_limit,
                HAS_CLAMP: gl.constexpr, Q: gl.constexpr, NW: gl.constexpr, STAGES: gl.constexpr):
    """decode_gemm1_swiglu_tma_kernel's body for one (block, column tile) of expert e: the ring
    fills, then the wait for the prep items (the B pairs)."""
    w, q, m, i, g, t4 = frag_ids(NW, Q)
    KG = K // 32
    nk = gl.cdiv(gl.cdiv(K, 128), NW)
    row0 = nt * (16 * Q)
    _ring_fill(w_desc, ring, full, q0, nk, e * 2, row0, 2, NW, Q, STAGES)
    _wait_count(prep_done, NPREP)
    slot_b = gl.load(rs_ptr + b * 8 + g)
    tok_ok = slot_b < S
    a_rows = gl.expand_dims(xb_ptr + (slot_b // TOPK).to(gl.int64) * (stride_xm // 2) + t4 * 16 + m * 4, 4) + i
    r = row0 + q * 16 + g
    row_ok = r < I
    sg_lo = s_ptr + e.to(gl.int64) * stride_se + r.to(gl.int64) * stride_sn + t4 + m * 0
    su_lo = sg_lo + I * stride_sn
    zero = gl.zeros([NW, Q, 32, 4], gl.float32, layout=gl.SliceLayout(4, frag_layout(NW, Q)))
    gacc = zero
    uacc = zero
    for j in range(nk):
        c = j * NW + w
        kin = (c * 4 + t4) < KG
        b0, b1, b2, b3 = load_act(a_rows, c, tok_ok & kin)
        qs = q0 + j
        s = qs % STAGES
        mbarrier.wait(full.index(s), (qs // STAGES) & 1)
        glo, ghi, ulo, uhi = tma_read_slot(ring, s, 2, NW, Q)
        gs0, gs1 = tma_scales(sg_lo, stride_sn, c, row_ok & kin)
        us0, us1 = tma_scales(su_lo, stride_sn, c, row_ok & kin)
        cta_barrier()  # every warp has slot s in registers
        if j + STAGES < nk:
            tma_issue(w_desc, ring, full.index(s), s, e * 2, row0, j + STAGES, 2, NW, Q)
        gacc = mma_tile((glo, ghi, gs0, gs1), (b0, b1, b2, b3), gacc)
        uacc = mma_tile((ulo, uhi, us0, us1), (b0, b1, b2, b3), uacc)
    swiglu_store(gacc, uacc, act_ptr, b, nt, I, stride_am, clamp_limit, HAS_CLAMP)
    return q0 + nk


@gluon.jit
def _gemm2_item(b, nt, e, a_ptr, w_desc, s_ptr, out_ptr, rs_ptr, tw_ptr, cnt_ptr, T1, ring, full, q0,
                S, N, K, TOPK, stride_am, stride_se, stride_sn, stride_om, scale_factor,
                OUT_MODE: gl.constexpr, Q: gl.constexpr, NW: gl.constexpr, STAGES: gl.constexpr):
    """decode_gemm2_combine_tma_kernel's body for one (block, output tile) of expert e: the ring
    fills, then the wait for the block's gate/up tiles."""
    w, q, m, i, g, t4 = frag_ids(NW, Q)
    KG = K // 32
    nk = gl.cdiv(gl.cdiv(K, 128), NW)
    row0 = e * N + nt * (16 * Q)
    _ring_fill(w_desc, ring, full, q0, nk, 0, row0, 1, NW, Q, STAGES)
    a_rows = gl.expand_dims(a_ptr + (b * 8 + g).to(gl.int64) * (stride_am // 2) + t4 * 16 + m * 4, 4) + i
    tok_ok = gl.load(rs_ptr + b * 8 + g) < S
    r = nt * (16 * Q) + q * 16 + g
    row_ok = r < N
    s_lo = s_ptr + e.to(gl.int64) * stride_se + r.to(gl.int64) * stride_sn + t4 + m * 0
    _wait_count(cnt_ptr, T1)  # the block's activations, from every gate/up tile of it
    acc = gl.zeros([NW, Q, 32, 4], gl.float32, layout=gl.SliceLayout(4, frag_layout(NW, Q)))
    for j in range(nk):
        c = j * NW + w
        kin = (c * 4 + t4) < KG
        b0, b1, b2, b3 = load_act(a_rows, c, tok_ok & kin)
        qs = q0 + j
        s = qs % STAGES
        mbarrier.wait(full.index(s), (qs // STAGES) & 1)
        lo, hi = tma_read_slot(ring, s, 1, NW, Q)
        s0, s1 = tma_scales(s_lo, stride_sn, c, row_ok & kin)
        cta_barrier()
        if j + STAGES < nk:
            tma_issue(w_desc, ring, full.index(s), s, 0, row0, j + STAGES, 1, NW, Q)
        acc = mma_tile((lo, hi, s0, s1), (b0, b1, b2, b3), acc)
    combine_rows(frag_total(acc), out_ptr, rs_ptr, tw_ptr, b, nt, S, N, TOPK, stride_om, scale_factor, OUT_MODE)
    return q0 + nk


@gluon.jit
def _is_gate_up(t, NPREP, N1, T1, T2, ORDER: gl.constexpr):
    """Whether ticket t (>= NPREP) is a gate/up item. ORDER 0: every gate/up item, then every down
    item; ORDER 1 (experimental): block by block, a block's T1 gate/up items then its T2 down items, so
    a block's down weights start streaming while later blocks' gate/up items still run. Either way a
    down item waits only on gate/up items of smaller tickets (no deadlock, module docstring)."""
    if ORDER == 0:
        r = t < N1
    else:
        r = (t - NPREP) % (T1 + T2) < T1
    return r


@gluon.jit
def _gate_up_item(t, NPREP, T1, T2, ORDER: gl.constexpr):
    u = t - NPREP
    if ORDER == 0:
        b = u // T1
        nt = u % T1
    else:
        b = u // (T1 + T2)
        nt = u % (T1 + T2)
    return b, nt


@gluon.jit
def _down_item(t, NPREP, N1, T1, T2, ORDER: gl.constexpr):
    if ORDER == 0:
        b = (t - N1) // T2
        nt = (t - N1) % T2
    else:
        b = (t - NPREP) // (T1 + T2)
        nt = (t - NPREP) % (T1 + T2) - T1
    return b, nt


# the sizes that change with M are not specialized on (one compile serves every M of an S_PAD)
@gluon.jit(do_not_specialize=["S", "P", "NB", "NPREP", "n_x"])
def decode_fused_kernel(
    x_ptr, xb_ptr, xbw_ptr, ids_ptr, tw_ptr, w1_desc, s1_ptr, w2_desc, s2_ptr, act_ptr, actw_ptr, out_ptr, rs_ptr,
    flags_ptr,
    S, E, H, I, TOPK, P, NB, NPREP, T1, T2, n_x,
    stride_xm, stride_bm, stride_s1e, stride_s1n, stride_s2e, stride_s2n, stride_am, stride_om,
    clamp_limit, scale_factor,
    HAS_CLAMP: gl.constexpr, OUT_MODE: gl.constexpr, Q1: gl.constexpr, Q2: gl.constexpr, NW: gl.constexpr,
    STAGES1: gl.constexpr, STAGES2: gl.constexpr, S_PAD: gl.constexpr, CH: gl.constexpr, PB: gl.constexpr,
    ORDER: gl.constexpr = 0,
):
    """The MoE forward of S = M * TOPK slots in one launch (module docstring). x_ptr: hidden states
    [M, H] bf16; xb_ptr / xbw_ptr: their B pairs (workspace [M, H] bf16, and its int32 view); act_ptr /
    actw_ptr: the gate/up output (workspace [P, I] bf16, and its int32 view); out_ptr: [M, H] (atomics) or [S, H] float32
    (OUT_MODE 2); rs_ptr: routing scratch, P + NB + S_PAD int32 a program; flags_ptr: N_FLAGS + NB
    int32, zero at launch and left zero."""
    pid = gl.program_id(0)
    G = gl.num_programs(0)
    ticket = flags_ptr
    prep_done = flags_ptr + 1
    prog_done = flags_ptr + 2
    cnt = flags_ptr + 4
    t = gl.atomic_add(ticket, 1, sem="relaxed", scope="gpu")
    rs = rs_ptr + pid.to(gl.int64) * (P + NB + S_PAD)
    _route(ids_ptr, rs, S, E, P, NB, S_PAD, CH, NW)

    ring1 = gl.allocate_shared_memory(gl.int32, [STAGES1, 2, 16 * Q1, 16 * NW], ring_layout(3))
    full1 = gl.allocate_shared_memory(gl.int64, [STAGES1, 1], mbarrier.MBarrierLayout())
    ring2 = gl.allocate_shared_memory(gl.int32, [STAGES2, 16 * Q2, 16 * NW], ring_layout(2))
    full2 = gl.allocate_shared_memory(gl.int64, [STAGES2, 1], mbarrier.MBarrierLayout())
    for k in gl.static_range(STAGES1):
        mbarrier.init(full1.index(k), count=1)
    for k in gl.static_range(STAGES2):
        mbarrier.init(full2.index(k), count=1)
    q1 = pid * 0  # ring steps consumed so far (slot and phase run on across items)
    q2 = pid * 0
    N1 = NPREP + NB * T1
    total = N1 + NB * T2
    while t < total:
        nxt = gl.atomic_add(ticket, 1, sem="relaxed", scope="gpu")
        if t < NPREP:
            _prep(t, x_ptr, xb_ptr, out_ptr, n_x, H, stride_xm, stride_bm,
                  stride_om, OUT_MODE != 2, PB, NW)
            _signal(prep_done)
        elif _is_gate_up(t, NPREP, N1, T1, T2, ORDER):
            b, nt = _gate_up_item(t, NPREP, T1, T2, ORDER)
            e = gl.load(rs + P + b)
            if e >= 0:
                q1 = _gemm1_item(b, nt, e, xbw_ptr, w1_desc, s1_ptr, act_ptr, rs, ring1, full1, q1, prep_done, NPREP,
                                 S, H, I, TOPK,
                                 stride_bm, stride_s1e, stride_s1n, stride_am, clamp_limit, HAS_CLAMP, Q1, NW,
                                 STAGES1)
                _signal(cnt + b)
        else:
            b, nt = _down_item(t, NPREP, N1, T1, T2, ORDER)
            e = gl.load(rs + P + b)
            if e >= 0:
                q2 = _gemm2_item(b, nt, e, actw_ptr, w2_desc, s2_ptr, out_ptr, rs,
                                 tw_ptr, cnt + b, T1, ring2, full2, q2, S, H, I, TOPK, stride_am, stride_s2e,
                                 stride_s2n, stride_om, scale_factor, OUT_MODE, Q2, NW, STAGES2)
        t = nxt
    release_barriers(full1, STAGES1)
    release_barriers(full2, STAGES2)
    # the last program out zeroes the flags for the next launch (every other program is past its waits)
    cta_barrier()
    done = gl.atomic_add(prog_done, 1, sem="acq_rel", scope="gpu")
    if done == G - 1:
        F: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
        for f in range(0, 4 + NB, 32 * NW):
            o = f + gl.arange(0, 32 * NW, layout=F)
            gl.store(flags_ptr + o, gl.zeros([32 * NW], gl.int32, layout=F), mask=o < 4 + NB)
