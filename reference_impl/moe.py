"""Host wrapper of the grouped MXFP4 MoE: validation, buffers, grids, launches.

Pipeline (one fixed grid per batch size, no host sync -> CUDA-graph safe):
  1. route        slots sorted by expert, padded to BLOCK_M (kernels/route.py for
                  decode-sized batches, routing.route_torch beyond); on the decode
                  path prep_act also lays the hidden states out as MMA B pairs, in
                  the routing's launch (route_prep_kernel) at decode sizes
  2. gemm1_swiglu act[row] = silu(clamp(x @ W13_gate^T)) * clamp(x @ W13_up^T)
  3. gemm2_combine out[token] += w * rsf * act[row] @ W2^T   (atomics, or a
                  per-slot buffer + reduce_topk when deterministic=True)
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
import time
from typing import Optional

import torch
import triton

from . import arch as _arch
from . import configs as _configs
from .configs import check_mma_config  # noqa: F401  (validated where every config is)
from .routing import max_blocks, route_torch
from .kernels.route import route_kernel
from .kernels.gemm1_swiglu import gemm1_swiglu_kernel
from .kernels.gemm2_combine import gemm2_combine_kernel
from .kernels.reduce_topk import reduce_topk_kernel
from .kernels.stage_inputs import stage_inputs_kernel
from .kernels.prep_act import prep_act_kernel, route_prep_kernel
from . import wgmma_path

try:  # the decode path is written in Gluon (explicit layouts); absent from some Triton builds
    from .kernels import decode_mma as _decode_mma
except Exception:  # pragma: no cover - depends on the installed Triton
    _decode_mma = None
try:  # its TMA form (weights through a shared-memory ring) needs Gluon's Hopper modules
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as _TensorDescriptor
    from .kernels import decode_tma as _decode_tma
    from .kernels import decode_fused as _decode_fused
except Exception:  # pragma: no cover - depends on the installed Triton
    _decode_tma = _decode_fused = None
from .prepack import PrepackedMXFP4MoE

ROUTE_KERNEL_MAX_SLOTS = 2048
PREP_BLOCK = 1024
FUSED_MAX_SLOTS = 128  # the one-launch path's in-kernel routing compares every slot pair
FUSED_PREP = 4096  # hidden-state values a prep item of the one-launch path lays out


def _interpreting() -> bool:
    return _arch.interpreting()


def _device_arch(dev) -> _arch.Arch:
    """What this device may run (arch.py), the environment's off-switches applied."""
    if _interpreting() or dev.type != "cuda":
        return _arch.INTERPRETER
    return _arch.for_device(dev)


def _tma_desc(w: torch.Tensor, shape: list, block: list, pk=None, which=None):
    """TMA descriptor of a packed weight tensor seen as int32 words of the given shape (unswizzled
    boxes, the decode_tma ring's layout); prepacked weights hold theirs, made once."""
    if pk is not None:
        return pk.desc(which, shape, block)
    v = w.view(torch.int32).view(shape)
    return _TensorDescriptor(v, shape, list(v.stride()), block, _decode_tma.ring_layout(len(shape)))


def _tma_stages(c: dict, w: torch.Tensor) -> int:
    """Ring stages of a decode GEMM's TMA form, or 0 (direct loads): where the config asks and the
    weights' base is 16-byte aligned (the rows are: H / 2 and I / 2 are multiples of 16)."""
    st = int(c.get("tma", 0))
    if not st or _decode_tma is None or w.data_ptr() % 16:
        return 0
    return st


def _l2_args(c1: dict, w2: torch.Tensor, s2: torch.Tensor, H: int, I: int):
    """The gate/up GEMM's L2-prefetch arguments (decode kernels' L2P): (policy, w2, s2, bytes of an
    expert's down weights and scales, each thread's piece of them), the policy 0 (off) unless the
    config asks and both bases are 16-byte aligned (each expert's ranges then are: H, I are multiples
    of 32)."""
    pol = int(c1.get("l2", 0))
    if pol and (w2.data_ptr() % 16 or s2.data_ptr() % 16):
        pol = 0
    wb, sb = H * (I // 2), H * (I // 32)
    parts = triton.cdiv(I, 16 * c1["Q"]) * 32 * c1["num_warps"]  # programs an expert x threads a program

    def piece(n):  # bytes a thread: a multiple of 16 (bulk), or a power of two of 128-byte lines
        if pol >= 3:
            return 128 * triton.next_power_of_2(triton.cdiv(n, parts * 128))
        return triton.cdiv(triton.cdiv(n, parts), 16) * 16

    return pol, (w2, s2, wb, sb), (dict(w2_piece=piece(wb), s2_piece=piece(sb)) if pol else {})


def _decode_mask(K: int, N: int, c: dict) -> bool:
    """Whether a decode GEMM needs masked loads: unless K splits into whole 128-value chunks
    that the program's warps share evenly, and N into whole tiles of 16 Q rows."""
    return not (K % (128 * c["num_warps"]) == 0 and N % (16 * c["Q"]) == 0)


def _mma_path(cfg: dict, dev) -> bool:
    """The Gluon decode path (mma.sync fed straight from the e2m1 words) where a config asks for
    it and the device may run it (arch.py; REFIMPL_DECODE_MMA=0 turns it off). A config the
    kernels cannot take is an error on any device."""
    if cfg.get("path") != "mma":
        return False
    check_mma_config(cfg)
    return _decode_mma is not None and _device_arch(dev).mma


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _fail(name: str, msg: str):
    raise ValueError(f"{name}: {msg}")


def _scale_bits(name: str, s: torch.Tensor) -> torch.Tensor:
    """E8M0 exponents as uint8, from float8_e8m0fnu, uint8 bits or float32 powers of two."""
    if s.dtype == torch.uint8:
        return s
    if s.dtype == getattr(torch, "float8_e8m0fnu", None):
        return s.view(torch.uint8)
    if s.dtype == torch.float32:
        return ((s.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
    _fail(name, f"dtype {s.dtype} not one of float8_e8m0fnu, uint8, float32")


def _validate(x, w13, w2, s13, s2, ids, tw, H, I):
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        _fail("hidden_states", "expected a 2-D tensor [M, hidden_size]")
    if x.dtype != torch.bfloat16:
        _fail("hidden_states", f"dtype {x.dtype}, expected torch.bfloat16")
    if H <= 0 or H % 32:
        _fail("hidden_size", f"{H} is not a positive multiple of 32")
    if I <= 0 or I % 32:
        _fail("intermediate_size", f"{I} is not a positive multiple of 32")
    if x.shape[1] != H:
        _fail("hidden_states", f"shape {tuple(x.shape)} does not match hidden_size={H}")
    for name, w in (("w13_packed", w13), ("w2_packed", w2)):
        if not isinstance(w, torch.Tensor) or w.dtype not in (torch.int8, torch.uint8):
            _fail(name, f"dtype {getattr(w, 'dtype', type(w))}, expected int8/uint8 packed e2m1")
    if w13.dim() != 3:
        _fail("w13_packed", f"expected [E, 2I, H/2], got {tuple(w13.shape)}")
    E = w13.shape[0]
    if tuple(w13.shape) != (E, 2 * I, H // 2):
        _fail("w13_packed", f"shape {tuple(w13.shape)}, expected {(E, 2 * I, H // 2)}")
    if tuple(w2.shape) != (E, H, I // 2):
        _fail("w2_packed", f"shape {tuple(w2.shape)}, expected {(E, H, I // 2)}")
    if not isinstance(s13, torch.Tensor) or tuple(s13.shape) != (E, 2 * I, H // 32):
        _fail("w13_scale", f"shape {tuple(getattr(s13, 'shape', ()))}, expected {(E, 2 * I, H // 32)}")
    if not isinstance(s2, torch.Tensor) or tuple(s2.shape) != (E, H, I // 32):
        _fail("w2_scale", f"shape {tuple(getattr(s2, 'shape', ()))}, expected {(E, H, I // 32)}")
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int32, torch.int64):
        _fail("topk_ids", f"dtype {getattr(ids, 'dtype', type(ids))}, expected int32/int64")
    if ids.dim() != 2 or ids.shape[0] != x.shape[0]:
        _fail("topk_ids", f"shape {tuple(ids.shape)}, expected [{x.shape[0]}, topk]")
    if not isinstance(tw, torch.Tensor) or not tw.is_floating_point():
        _fail("topk_weights", f"dtype {getattr(tw, 'dtype', type(tw))}, expected a float dtype")
    if tuple(tw.shape) != tuple(ids.shape):
        _fail("topk_weights", f"shape {tuple(tw.shape)}, expected {tuple(ids.shape)}")
    for name, t in (("w13_packed", w13), ("w2_packed", w2), ("w13_scale", s13),
                    ("w2_scale", s2), ("topk_ids", ids), ("topk_weights", tw)):
        if t.device != x.device:
            _fail(name, f"on {t.device}, hidden_states on {x.device}")
    if x.device.type != "cuda" and not _interpreting():
        _fail("hidden_states", f"on {x.device}: needs a CUDA device (or TRITON_INTERPRET=1)")
    return E


def _device_name(dev: torch.device) -> Optional[str]:
    if dev.type != "cuda":
        return None
    return torch.cuda.get_device_name(dev)


def _kw(c: dict) -> dict:
    return {k: c[k] for k in ("BLOCK_N", "BLOCK_K", "num_warps", "num_stages")}


def scale_vec_ok(c: dict, K: int) -> bool:
    """Experimental ("scale_vec" in a tl.dot config; no shipped or default config uses it):
    scales read as 32-bit words (pipelined by cp.async like the weights) when every K step
    covers whole words and each scale row starts on a word: BLOCK_K % 128 == 0 and K/32 % 4 == 0.
    On the H200 it ran 1.8x slower than bytes fetched a step ahead (bench/NOTES.md)."""
    return c["BLOCK_K"] % 128 == 0 and (K // 32) % 4 == 0


def _scale_vec(c: dict, K: int) -> bool:
    return bool(c.get("scale_vec", False)) and scale_vec_ok(c, K)


# host-side timing of the wrapper's stages (bench/reference_impl/bench_configs.py): None, or a list
# the stages append (name, perf_counter()) to
_PROFILE = None


def _mark(name: str) -> None:
    if _PROFILE is not None:
        _PROFILE.append((name, time.perf_counter()))


_FAST_LAUNCH = os.environ.get("REFIMPL_FAST_LAUNCH", "1") != "0"
# prepacked weights: their TMA descriptors encoded once for the launcher (REFIMPL_ENCODE_ONCE=0: per launch)
_ENCODE_ONCE = os.environ.get("REFIMPL_ENCODE_ONCE", "1") != "0"
# a cached plan's launches pass tensor addresses as ints (the first launch, through the JIT, checked
# them); Triton's launcher otherwise asks the driver about every pointer on every launch
# (REFIMPL_PTR_INTS=0: tensors)
_PTR_INTS = os.environ.get("REFIMPL_PTR_INTS", "1") != "0"


# eager calls of small batches (M <= EAGER_GRAPH_MAX_M) replay a CUDA graph of the call's launches,
# captured once per plan and weights (_eager_graph); REFIMPL_EAGER_GRAPH=0: the launches every call
_EAGER_GRAPH = os.environ.get("REFIMPL_EAGER_GRAPH", "1") != "0"
EAGER_GRAPH_MAX_M = int(os.environ.get("REFIMPL_EAGER_GRAPH_MAX_M", "16"))
EAGER_GRAPH_MAX = 1024  # graphs kept per prepacked object, and for raw weights together (then dropped)
# a cached plan's launches skip Triton's launch metadata and hook calls while no launch hook is
# registered (a profiler that registers one gets them back); REFIMPL_LEAN_LAUNCH=0: always made
_LEAN_LAUNCH = os.environ.get("REFIMPL_LEAN_LAUNCH", "1") != "0"
_RAW_GRAPHS: dict = {}  # eager graphs of raw weight tensors, keyed by their addresses and layouts
_GRAPH_POOLS: dict = {}  # device index -> the memory pool every eager graph of that device shares
_LAST_STREAM: dict = {}  # device index -> (raw handle, torch stream) of the last eager-graph replay there
STAGE_BLOCK = 2048  # hidden-state values a program of stage_inputs_kernel copies


class _EagerGraph:
    """One captured call: its static inputs, the graph and the output tensor the graph writes."""
    __slots__ = ("x", "ids", "tw", "graph", "out", "grid", "stage", "stage_args")


def _eager_graph(pl, pk, x, w13_packed, w2_packed, w13_scale, w2_scale, ids, tw, M, E, H, I, topk, rsf, clamp):
    """The call as one graph replay instead of its three to four launches (Triton's launcher costs
    ~20-40 us of host time a launch on the H200 machine; a replay, a few). The first call of a (plan,
    weights, scalars, input dtypes) runs the launches as usual (compiling the kernels); the second
    captures them once, reading static copies of hidden_states, topk_ids and topk_weights, into a
    memory pool all eager graphs of the device share; every call from then on copies its inputs into
    those, replays, and returns a copy of the graph's output (the graph's own output is overwritten by
    the next replay). Cost: one small copy launch (kernels/stage_inputs.py) and one output copy a call
    (device time ~1-3 us), one
    capture per key, and memory for the static inputs and output of each (M x H bf16 and M x topk
    values; the intermediates are shared through the pool). The graph holds the weights' addresses:
    prepacked weights keep their graphs (freed with them); raw tensors are keyed by address and
    layout (the graph reads whatever the caller's tensor at that address holds). Not taken while the
    current stream is capturing (a caller's own graph then records the launches themselves, as
    before). The graphs of a device share their intermediates (one pool), so a replay on another
    stream than the last one first waits for that stream. None: not taken for this call (the caller
    runs the launches)."""
    if torch.cuda.is_current_stream_capturing():
        return None
    ids = ids if ids.is_contiguous() else ids.contiguous()
    tw = tw if tw.is_contiguous() else tw.contiguous()
    if pk is not None:
        holder = pk._graphs
        wkey = None
    else:
        holder = _RAW_GRAPHS
        wkey = tuple((t.data_ptr(), t.dtype, tuple(t.stride())) for t in (w13_packed, w2_packed, w13_scale, w2_scale))
    key = (pl, wkey, rsf, clamp, ids.dtype, tw.dtype)
    ent = holder.get(key)
    if ent is None:  # first call: compile and launch as usual
        if len(holder) >= EAGER_GRAPH_MAX:
            holder.clear()
        holder[key] = False
        return None
    if ent is False:
        ent = holder[key] = _capture(pl, pk, x, w13_packed, w2_packed, w13_scale, w2_scale, ids, tw, M, E, H, I,
                                     topk, rsf, clamp)
    cur = _driver().get_current_stream(pl.dev_index)
    last = _LAST_STREAM.get(pl.dev_index)
    if last is not None and last[0] != cur:  # every eager graph of a device shares one pool: one at a time
        torch.cuda.current_stream(x.device).wait_stream(last[1])
    if last is None or last[0] != cur:
        _LAST_STREAM[pl.dev_index] = (cur, torch.cuda.current_stream(x.device))
    k = ent.stage
    rt = triton.knobs.runtime
    if k is None or not _LEAN_LAUNCH or _hook_calls(rt.launch_enter_hook) or _hook_calls(rt.launch_exit_hook):
        S = M * topk
        k = stage_inputs_kernel[ent.grid](x, ent.x, M * H, ids, ent.ids, tw, ent.tw, S, BLOCK=STAGE_BLOCK,
                                          S_PAD=max(16, triton.next_power_of_2(S)))
        if ent.stage is None:
            ent.stage = k
            ent.stage_args = (ent.x.data_ptr(), M * H, ent.ids.data_ptr(), ent.tw.data_ptr(), S, STAGE_BLOCK,
                              max(16, triton.next_power_of_2(S)))
    else:  # the compiled kernel's own launch (nothing of it is specialized on the call's inputs)
        xs, n, ids_s, tw_s, S, blk, spad = ent.stage_args
        k.run(ent.grid[0], 1, 1, cur, k.function, k.packed_metadata, None, None, None,
              x.data_ptr(), xs, n, ids.data_ptr(), ids_s, tw.data_ptr(), tw_s, S, blk, spad)
    _mark("inputs")
    ent.graph.replay()
    _mark("replay")
    out = ent.out.clone()
    _mark("epilogue")
    return out


def _capture(pl, pk, x, w13_packed, w2_packed, w13_scale, w2_scale, ids, tw, M, E, H, I, topk, rsf, clamp):
    dev = x.device
    ent = _EagerGraph()
    ent.x = torch.empty(M, H, dtype=torch.bfloat16, device=dev)
    ent.ids = torch.empty(ids.shape, dtype=ids.dtype, device=dev)
    ent.tw = torch.empty(tw.shape, dtype=tw.dtype, device=dev)
    ent.grid = (triton.cdiv(M * H, STAGE_BLOCK),)
    ent.stage = ent.stage_args = None
    idx = pl.dev_index
    kept = _GRAPH_POOLS.get(idx)
    pool = kept[0] if kept else torch.cuda.graph_pool_handle()
    cur = torch.cuda.current_stream(dev)
    side = torch.cuda.Stream(dev)
    side.wait_stream(cur)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        g.capture_begin(pool=pool, capture_error_mode="thread_local")
        try:
            ent.out = _body(pl, pk, ent.x, w13_packed, w2_packed, w13_scale, w2_scale, ent.ids, ent.tw, M, E, H, I,
                            topk, rsf, clamp, False)
        finally:
            g.capture_end()
    cur.wait_stream(side)
    ent.graph = g
    if not kept:  # the pool lives while a graph captured into it does: its first graph is kept
        _GRAPH_POOLS[idx] = (pool, ent)
    return ent


def _desc_launch(k):
    """(raw launcher, descriptor argument indices, their metadata, base argument count) of a compiled
    kernel whose arguments include TMA descriptors, where Triton's launcher has the form this was
    written against (3.6: a wrapper that encodes each descriptor on every launch); else None."""
    try:
        run = k.run
        f = run.launch
        cells = dict(zip(f.__code__.co_freevars, (c.cell_contents for c in f.__closure__)))
        mod = __import__(f.__module__, fromlist=["_"])
        if run.global_scratch_size or run.profile_scratch_size or not callable(mod.make_tensordesc_arg):
            return None
        return (cells["launcher"], set(cells["tensordesc_indices"]), list(cells["tensordesc_meta"]),
                mod._BASE_ARGS_FORMAT_LEN, mod.make_tensordesc_arg)
    except Exception:
        return None


def _launch_encoded(k, dl, pk, g, stream, lm, enter, leave, args, extra):
    """k's launch with the prepacked weights' descriptors encoded once (held by pk), not per launch."""
    raw, idx, metas, _, make = dl
    final = []
    j = 0
    for i, a in enumerate(args + tuple(extra)):
        if i in idx:
            key = (id(a), j)
            enc = pk._enc.get(key)
            if enc is None:
                enc = pk._enc[key] = (a, make(a, metas[j]))  # the descriptor kept alive beside its encoding
            final.extend(enc[1])
            j += 1
        else:
            final.append(a)
    raw(g[0], g[1], g[2], stream, k.function, k.run.launch_cooperative_grid, k.run.launch_pdl, None, None,
        k.packed_metadata, lm, enter, leave, *final)


def _launch(pl, slot, kernel, grid, args, kw, pk=None):
    """kernel[grid](*args, **kw). On a cached plan's second and later calls, the compiled kernel's
    own launch, as the JIT ends its launches (launch metadata, the runtime's launch hooks), without
    the JIT's per-call work before it (argument binding, specialization, cache key and lookup): the
    compiled kernel is the one the JIT chose on the first call with the same constexprs and launch
    options (HAS_CLAMP changes with the call's clamp_limit), argument dtypes and pointer alignments,
    the only specializations that may change between calls of one plan (every integer argument is
    fixed by the plan). REFIMPL_FAST_LAUNCH=0: always the JIT."""
    if pl is None or not pl.cached or not _FAST_LAUNCH or _interpreting():
        return kernel[grid](*args, **kw)
    key = (slot, tuple(kw.values())) + tuple((a.dtype, a.data_ptr() % 16 == 0) for a in args
                                             if isinstance(a, torch.Tensor))
    hit = pl.launched.get(key)
    if hit is None:
        k = kernel[grid](*args, **kw)
        if k is not None:
            names = kernel.arg_names
            defaults = {p.name: p.default for p in kernel.params if p.has_default}
            pl.launched[key] = (k, [kw[n] if n in kw else defaults[n] for n in names[len(args):]],
                                _desc_launch(k) if pk is not None and _ENCODE_ONCE else None)
        return k
    k, extra, dl = hit
    stream = _driver().get_current_stream(pl.dev_index)
    g = grid + (1,) * (3 - len(grid))
    rt = triton.knobs.runtime
    if _LEAN_LAUNCH and not (_hook_calls(rt.launch_enter_hook) or _hook_calls(rt.launch_exit_hook)):
        lm = enter = leave = None  # what Triton's launcher does with no hook: nothing
    else:
        lm, enter, leave = k.launch_metadata(g, stream, *args, *extra), rt.launch_enter_hook, rt.launch_exit_hook
    if _PTR_INTS:  # addresses as ints: the launcher then skips its cuPointerGetAttribute check of each one
        args = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)
    if dl is not None and pk is not None:
        return _launch_encoded(k, dl, pk, g, stream, lm, enter, leave, args, extra)
    k.run(g[0], g[1], g[2], stream, k.function, k.packed_metadata, lm, enter, leave, *args, *extra)


def _hook_calls(h) -> bool:
    """Whether a Triton launch hook would call anything (a HookChain with calls, or a plain callable)."""
    if h is None:
        return False
    calls = getattr(h, "calls", None)
    return True if calls is None else bool(calls)


@functools.lru_cache(maxsize=None)
def _driver():
    from triton.runtime import driver
    return driver.active


_PLANS: dict = {}  # (M, E, topk, H, I, device, deterministic) -> _Plan, for config=None calls


class _Plan:
    """What one call's shape, device and config decide, computed once per key: the config, the
    path, the output mode, the grids and the routing's launch parameters."""
    __slots__ = ("cfg", "mma", "wg", "BM", "c1", "c2", "mode", "NB", "P", "meta", "route_grid", "pdl", "mask1",
                 "mask2", "fast", "g1", "g2", "dot1", "dot2", "cached", "dev_index", "launched", "fused", "fz",
                 "ws", "src")

    def __init__(self, cfg, M, E, topk, H, I, dev, deterministic, source):
        self.cached = False
        self.launched = {}
        self.fused = False
        self.ws = None  # the one-launch path's workspace, made on its first call (fused_workspace)
        self.src = None  # a caller's config as it was when this plan was made
        self.dev_index = dev.index if dev.index is not None else (torch.cuda.current_device() if dev.type == "cuda" else 0)
        a = _device_arch(dev)
        # what the architecture may run decides what is an error; the environment may only turn a
        # Gluon path off (then the defaults of what is left run)
        _configs.validate(cfg, a if a is _arch.INTERPRETER else _arch.for_device(dev, env=False), source)
        S = M * topk
        self.mma = _mma_path(cfg, dev)
        self.wg = wgmma_path.usable(cfg, dev)
        if not (self.mma or self.wg) and cfg.get("path") in ("mma", "wgmma"):
            # validate() let it through: the interpreter, or a Gluon path the environment turned off
            cfg = _configs.default_config(M, E, topk, H, I, None if a is _arch.INTERPRETER else
                                          dataclasses.replace(a, mma=self.mma, wgmma=self.wg), _props(dev))
        self.cfg = cfg
        self.BM = _decode_mma.BLOCK_M if self.mma else cfg["BLOCK_M"]
        self.c1, self.c2 = cfg["gemm1"], cfg["gemm2"]
        # the down GEMM's output: per-slot rows (2, deterministic), bf16 atomics into the output (0),
        # or float32 atomics and a cast (1) where the architecture has no bf16 atomics
        self.mode = 2 if deterministic else 0 if a.bf16_atomics else 1
        self.NB = max_blocks(S, E, self.BM)
        self.P = self.NB * self.BM
        E_PAD = triton.next_power_of_2(E + 1)
        self.meta = dict(S_PAD=max(16, triton.next_power_of_2(S)), E_PAD=E_PAD, BLOCK_M=self.BM, FILL=1024,
                         num_warps=4)
        self.route_grid = (1 + triton.cdiv(M * H, PREP_BLOCK),) if self.mma else (1,)
        self.pdl = self.mma and bool(cfg.get("pdl", False))
        self.fast = a.fast_dequant
        if self.mma and cfg.get("fused") is not None and S <= FUSED_MAX_SLOTS and _decode_fused is not None \
                and a.fused:
            # one launch (kernels/decode_fused.py); past FUSED_MAX_SLOTS slots the same GEMM knobs
            # run as the three-launch TMA form
            self.fused = True
            fu, c1, c2 = cfg["fused"], self.c1, self.c2
            NW = c1["num_warps"]
            T1, T2 = triton.cdiv(I, 16 * c1["Q"]), triton.cdiv(H, 16 * c2["Q"])
            nprep = triton.cdiv(M * H, FUSED_PREP)
            sms = (_props(dev) or _arch.H200_LIKE).sm_count
            G = max(1, min(nprep + self.NB * (T1 + T2), sms * fu.get("ctas_per_sm", 8)))
            S_PAD = max(32, triton.next_power_of_2(S))
            self.fz = dict(G=G, NPREP=nprep, T1=T1, T2=T2, S_PAD=S_PAD, RS=self.P + self.NB + S_PAD,
                           kw=dict(HAS_CLAMP=False, OUT_MODE=self.mode, Q1=c1["Q"], Q2=c2["Q"], NW=NW,
                                   STAGES1=c1["tma"], STAGES2=c2["tma"], S_PAD=S_PAD, CH=16, PB=FUSED_PREP,
                                   num_warps=NW, **({"maxnreg": fu["maxnreg"]} if fu.get("maxnreg") else {}),
                                   **({"ORDER": 1} if fu.get("order") else {})))
        if self.mma:
            self.mask1, self.mask2 = _decode_mask(H, I, self.c1), _decode_mask(I, H, self.c2)
            self.g1 = (self.NB * triton.cdiv(I, 16 * self.c1["Q"]),)
            self.g2 = (self.NB * triton.cdiv(H, 16 * self.c2["Q"]),)
        elif not self.wg:
            interp = _interpreting()
            self.g1 = (self.NB * triton.cdiv(I, self.c1["BLOCK_N"]),)
            self.g2 = (self.NB * triton.cdiv(H, self.c2["BLOCK_N"]),)
            self.dot1 = dict(BLOCK_M=self.BM, DOT_F32=interp, FAST_DEQUANT=self.fast,
                             SCALE_VEC=_scale_vec(self.c1, H), **_kw(self.c1))
            self.dot2 = dict(BLOCK_M=self.BM, DOT_F32=interp, FAST_DEQUANT=self.fast,
                             SCALE_VEC=_scale_vec(self.c2, I), **_kw(self.c2))


def _props(dev):
    if dev.type != "cuda" or _interpreting():
        return None
    return _arch.device_props(dev.index if dev.index is not None else torch.cuda.current_device())


def _plan(M, E, topk, H, I, dev, deterministic, config) -> _Plan:
    if config is not None:  # a caller's config: its plan kept while the dict is unchanged (checked again if not)
        key = (M, E, topk, H, I, dev, deterministic, id(config))
        p = _PLANS.get(key)
        if p is None or p.src != config:
            # by content: equal dicts share one plan (and one workspace of the one-launch path)
            ckey = key[:-1] + (json.dumps(config, sort_keys=True),)
            p = _PLANS.get(ckey)
            if p is None:
                p = _Plan(config, M, E, topk, H, I, dev, deterministic, "config")
                p.src = copy.deepcopy(config)
                p.cached = True
            if len(_PLANS) > 4096:
                _PLANS.clear()
            _PLANS[key] = _PLANS[ckey] = p
        return p
    key = (M, E, topk, H, I, dev, deterministic)
    p = _PLANS.get(key)
    if p is None:
        a = _device_arch(dev)
        name = _device_name(dev)
        path = _configs.find_config_file(E, I, name) if name else None
        cfg = _configs.get_config(M, E, topk, H, I, name, a, _props(dev))
        src = "config"
        if path:
            table = _configs.load_table(path, a)
            src = f"{path}: key '{min(table, key=lambda k: (abs(k - M), k))}'"
        p = _Plan(cfg, M, E, topk, H, I, dev, deterministic, src)
        p.cached = True
        if len(_PLANS) > 4096:
            _PLANS.clear()
        _PLANS[key] = p
    return p


def grouped_mxfp4_moe(
    hidden_states: torch.Tensor,
    w13_packed: torch.Tensor,
    w2_packed: torch.Tensor,
    w13_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    hidden_size: int,
    intermediate_size: int,
    routed_scaling_factor: Optional[float] = None,
    clamp_limit: Optional[float] = None,
    inplace: bool = False,
    *,
    deterministic: bool = False,
    config: Optional[dict] = None,
) -> torch.Tensor:
    """Grouped MXFP4 MoE forward, drop-in for SGLang's mxfp4_moe_forward_triton.

    deterministic=True sums the top-k contributions in a fixed order (a per-slot
    buffer and one reduce launch) instead of atomics. config overrides the
    tuned/default kernel config (configs.py); one this GPU cannot run is a ValueError.
    """
    return _forward(hidden_states, w13_packed, w2_packed, w13_scale, w2_scale, topk_ids, topk_weights,
                    hidden_size, intermediate_size, routed_scaling_factor, clamp_limit, deterministic, config, False)


def poisoned_forward(*args, **kwargs) -> torch.Tensor:
    """grouped_mxfp4_moe with its scratch buffers filled with NaN first (tests: a value the
    kernels fail to write reaches the output as NaN)."""
    return _forward(*_bind(*args, **kwargs), True)


def _bind(hidden_states, w13_packed, w2_packed, w13_scale, w2_scale, topk_ids, topk_weights, hidden_size,
          intermediate_size, routed_scaling_factor=None, clamp_limit=None, inplace=False, *, deterministic=False,
          config=None):
    return (hidden_states, w13_packed, w2_packed, w13_scale, w2_scale, topk_ids, topk_weights, hidden_size,
            intermediate_size, routed_scaling_factor, clamp_limit, deterministic, config)


def _validate_prepacked(x, pk, ids, tw, H, I):
    """_validate's checks of what changes between calls (the weights were checked by the prepack)."""
    if (H, I) != (pk.H, pk.I):
        _fail("hidden_size", f"({H}, {I}) (hidden, intermediate) do not match the prepacked ({pk.H}, {pk.I})")
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != H or x.dtype != torch.bfloat16:
        _fail("hidden_states", f"expected a bfloat16 tensor [M, {H}], got {getattr(x, 'dtype', type(x))} "
              f"{tuple(getattr(x, 'shape', ()))}")
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int32, torch.int64) or ids.dim() != 2 \
            or ids.shape[0] != x.shape[0]:
        _fail("topk_ids", f"expected int32/int64 [{x.shape[0]}, topk], got {getattr(ids, 'dtype', type(ids))} "
              f"{tuple(getattr(ids, 'shape', ()))}")
    if not isinstance(tw, torch.Tensor) or not tw.is_floating_point() or tw.shape != ids.shape:
        _fail("topk_weights", f"expected a float tensor of shape {tuple(ids.shape)}")
    dev = pk.device
    di = pk.dev_index
    if not (x.get_device() == di and ids.get_device() == di and tw.get_device() == di):
        _fail("hidden_states", f"hidden_states / topk_ids / topk_weights on {x.device} / {ids.device} / {tw.device}, "
              f"the prepacked weights on {dev}")
    if dev.type != "cuda" and not _interpreting():
        _fail("hidden_states", f"on {dev}: needs a CUDA device (or TRITON_INTERPRET=1)")
    return pk.E


def _forward(hidden_states, w13_packed, w2_packed, w13_scale, w2_scale, topk_ids, topk_weights, hidden_size,
             intermediate_size, routed_scaling_factor, clamp_limit, deterministic, config, poison):
    _mark("start")
    H, I = int(hidden_size), int(intermediate_size)
    pk = w13_packed if isinstance(w13_packed, PrepackedMXFP4MoE) else None
    if pk is not None:
        if not (w2_packed is None and w13_scale is None and w2_scale is None):
            _fail("w2_packed", "with prepacked weights as w13_packed, pass None for w2_packed, w13_scale, w2_scale")
        E = _validate_prepacked(hidden_states, pk, topk_ids, topk_weights, H, I)
    else:
        E = _validate(hidden_states, w13_packed, w2_packed, w13_scale, w2_scale,
                      topk_ids, topk_weights, H, I)
    x = hidden_states if hidden_states.is_contiguous() else hidden_states.contiguous()
    M = x.shape[0]
    dev = x.device
    if M == 0:
        return torch.empty(0, H, dtype=torch.bfloat16, device=dev)
    topk = topk_ids.shape[1]
    S = M * topk
    _mark("validate")
    pl = _plan(M, E, topk, H, I, dev, bool(deterministic), config)
    _mark("config")
    if _EAGER_GRAPH and not poison and M <= EAGER_GRAPH_MAX_M and pl.cached and dev.type == "cuda" \
            and not _interpreting():
        out = _eager_graph(pl, pk, x, w13_packed, w2_packed, w13_scale, w2_scale, topk_ids, topk_weights,
                           M, E, H, I, topk, routed_scaling_factor, clamp_limit)
        if out is not None:
            return out
    return _body(pl, pk, x, w13_packed, w2_packed, w13_scale, w2_scale, topk_ids, topk_weights, M, E, H, I, topk,
                 routed_scaling_factor, clamp_limit, poison)


def _reduce_topk(pl, buf, ids, M: int, H: int, E: int, topk: int, dev, poison: bool):
    """The deterministic epilogue: each token's top-k rows of ``buf`` summed into a new bf16 output."""
    out = torch.empty(M, H, dtype=torch.bfloat16, device=dev)
    if poison:
        out.fill_(float("nan"))
    RBN = min(1024, triton.next_power_of_2(H))
    _launch(pl, "reduce", reduce_topk_kernel, (M, triton.cdiv(H, RBN)),
            (buf, ids, out, H, E, buf.stride(0), out.stride(0)), dict(TOPK=topk, BLOCK_N=RBN))
    _mark("epilogue")
    return out


def _body(pl, pk, x, w13_packed, w2_packed, w13_scale, w2_scale, topk_ids, topk_weights, M, E, H, I, topk,
          routed_scaling_factor, clamp_limit, poison):
    """The call's buffers and launches, once validated and planned."""
    mma, wg, BM, c1, c2, mode, NB, P = pl.mma, pl.wg, pl.BM, pl.c1, pl.c2, pl.mode, pl.NB, pl.P
    dev = x.device
    S = M * topk
    if pk is not None:
        w13, w2, s13, s2 = pk.w13, pk.w2, pk.s13, pk.s2
    else:
        w13 = (w13_packed if w13_packed.is_contiguous() else w13_packed.contiguous()).view(torch.uint8)
        w2 = (w2_packed if w2_packed.is_contiguous() else w2_packed.contiguous()).view(torch.uint8)
        s13 = _scale_bits("w13_scale", w13_scale)
        s2 = _scale_bits("w2_scale", w2_scale)
        s13 = s13 if s13.is_contiguous() else s13.contiguous()
        s2 = s2 if s2.is_contiguous() else s2.contiguous()
    ids = topk_ids if topk_ids.is_contiguous() else topk_ids.contiguous()
    tw = topk_weights if topk_weights.is_contiguous() else topk_weights.contiguous()
    has_clamp = clamp_limit is not None and clamp_limit > 0
    rsf = 1.0 if routed_scaling_factor is None else float(routed_scaling_factor)
    if pl.fused and not (w13.data_ptr() % 16 or w2.data_ptr() % 16):
        return _forward_fused(pl, pk, x, w13, w2, s13, s2, ids, tw, M, E, H, I, topk, rsf,
                              float(clamp_limit) if has_clamp else 0.0, has_clamp, poison)

    # the down GEMM's output: per-slot rows (deterministic) or the atomics' target,
    # zeroed by a memset, or by prep_act on the decode path
    alloc = torch.empty if mma else torch.zeros
    if mode == 2:
        buf = torch.empty(S, H, dtype=torch.float32, device=dev)
        if poison:
            buf.fill_(float("nan"))
    else:
        buf = alloc(M, H, dtype=torch.bfloat16 if mode == 0 else torch.float32, device=dev)
    xb = torch.empty(M, H, dtype=torch.bfloat16, device=dev) if mma else None
    _mark("buffers")

    # 1. routing (and, on the decode path, the hidden states as B pairs + the zeroed output)
    prep = (x, xb, buf, M * H, H, x.stride(0), H, buf.stride(0))
    if S <= ROUTE_KERNEL_MAX_SLOTS:
        nb4 = -(-NB // 4) * 4  # one allocation for the routing's three int32 buffers, each 16-byte aligned
        ri = torch.empty(P + nb4 + 2 * pl.meta["E_PAD"], dtype=torch.int32, device=dev)
        sorted_slots, block_expert, scratch = ri[:P], ri[P:P + NB], ri[P + nb4:]
        route = (ids, sorted_slots, block_expert, scratch, S, E, P, NB)
        _mark("buffers")
        if mma:  # one launch: program 0 routes, the others lay out the hidden states
            _launch(pl, "route_prep", route_prep_kernel, pl.route_grid, route + prep,
                    dict(ZERO_OUT=mode != 2, BLOCK=PREP_BLOCK, **pl.meta))
        else:
            _launch(pl, "route", route_kernel, (1,), route, pl.meta)
    else:
        sorted_slots, block_expert = route_torch(ids, E, BM)
        if mma:
            prep_act_kernel[(triton.cdiv(M * H, PREP_BLOCK),)](*prep, ZERO_OUT=mode != 2, BLOCK=PREP_BLOCK)
    _mark("launch_route")

    # 2. gate/up GEMM + SwiGLU. On the decode path the two GEMMs may be launched as programmatic
    # dependents ("pdl" in the config): each starts while the launch before it finishes and
    # waits for it in-kernel (decode_mma.gdc_wait), which hides the launch gaps
    pdl = pl.pdl
    st1, st2 = (_tma_stages(c1, w13), _tma_stages(c2, w2)) if mma else (0, 0)  # TMA ring stages, 0: none
    clamp = float(clamp_limit) if has_clamp else 0.0
    if not wg:
        act = torch.empty(P, I, dtype=torch.bfloat16, device=dev)
        if poison:
            act.fill_(float("nan"))
    _mark("buffers")
    if wg:  # hidden states gathered per sorted row in the kernels' k order, then wgmma
        act = wgmma_path.gemm1(wgmma_path.prep(x, sorted_slots, S, topk, P), w13, s13, sorted_slots,
                               block_expert, S, H, I, wgmma_path.token_parts(pl.cfg), c1, clamp, has_clamp, poison)
    elif st1:  # the TMA form (kernels/decode_tma.py)
        Q1, NW1 = c1["Q"], c1["num_warps"]
        d1 = _tma_desc(w13, [2 * E, I, H // 8], [2, 16 * Q1, 16 * NW1], pk, "w13")
        _mark("descriptors")
        l2p, l2a, l2k = _l2_args(c1, w2, s2, H, I)
        _launch(pl, "gemm1", _decode_tma.decode_gemm1_swiglu_tma_kernel, pl.g1, (
            xb.view(torch.int32), d1, s13, act, sorted_slots,
            block_expert, S, H, I, NB, topk, xb.stride(0), s13.stride(0), s13.stride(1), act.stride(0),
            clamp) + l2a, dict(HAS_CLAMP=has_clamp, Q=Q1, NW=NW1, STAGES=st1, AHEAD=c1.get("ahead", 0), L2P=l2p,
                               PF_AT=c1.get("l2_at", 0), **l2k, num_warps=NW1, launch_pdl=pdl,
                               **_configs.reg_cap(c1)), pk)
    elif mma:
        l2p, l2a, l2k = _l2_args(c1, w2, s2, H, I)
        _launch(pl, "gemm1", _decode_mma.decode_gemm1_swiglu_kernel, pl.g1, (
            xb.view(torch.int32), w13.view(torch.int32), s13, act, sorted_slots, block_expert,
            S, H, I, NB, topk,
            xb.stride(0), w13.stride(0), w13.stride(1), s13.stride(0), s13.stride(1), act.stride(0),
            clamp) + l2a, dict(HAS_CLAMP=has_clamp, Q=c1["Q"], NW=c1["num_warps"], WC=c1.get("w_cache", ""),
                               MASK=pl.mask1, L2P=l2p, **l2k, num_warps=c1["num_warps"], launch_pdl=pdl,
                               **_configs.reg_cap(c1)))
    else:
        _launch(pl, "gemm1", gemm1_swiglu_kernel, pl.g1, (
            x, w13, s13, act, sorted_slots, block_expert,
            S, H, I, NB, topk,
            x.stride(0), w13.stride(0), w13.stride(1), s13.stride(0), s13.stride(1), act.stride(0),
            clamp), dict(HAS_CLAMP=has_clamp, **pl.dot1))
    _mark("launch_gemm1")

    # 3. down GEMM + weighted top-k combine
    if wg:
        wgmma_path.gemm2(act, w2, s2, buf, sorted_slots, block_expert, tw, S, H, I, topk,
                         wgmma_path.token_parts(pl.cfg), c2, rsf, mode)
    elif st2:
        Q2, NW2 = c2["Q"], c2["num_warps"]
        d2 = _tma_desc(w2, [E * H, I // 8], [16 * Q2, 16 * NW2], pk, "w2")
        _mark("descriptors")
        _launch(pl, "gemm2", _decode_tma.decode_gemm2_combine_tma_kernel, pl.g2, (
            act.view(torch.int32), d2, s2, buf, sorted_slots,
            block_expert, tw, S, H, I, NB, topk, act.stride(0), s2.stride(0), s2.stride(1), buf.stride(0),
            rsf), dict(OUT_MODE=mode, Q=Q2, NW=NW2, STAGES=st2, AHEAD=c2.get("ahead", 0),
                       num_warps=NW2, launch_pdl=pdl, **_configs.reg_cap(c2)), pk)
    elif mma:
        _launch(pl, "gemm2", _decode_mma.decode_gemm2_combine_kernel, pl.g2, (
            act.view(torch.int32), w2.view(torch.int32), s2, buf, sorted_slots, block_expert, tw,
            S, H, I, NB, topk,
            act.stride(0), w2.stride(0), w2.stride(1), s2.stride(0), s2.stride(1), buf.stride(0),
            rsf), dict(OUT_MODE=mode, Q=c2["Q"], NW=c2["num_warps"], WC=c2.get("w_cache", ""),
                       AV=c2.get("atom_vec", 2), MASK=pl.mask2, num_warps=c2["num_warps"], launch_pdl=pdl,
                       **_configs.reg_cap(c2)))
    else:
        _launch(pl, "gemm2", gemm2_combine_kernel, pl.g2, (
            act, w2, s2, buf, sorted_slots, block_expert, tw,
            S, H, I, NB, topk,
            act.stride(0), w2.stride(0), w2.stride(1), s2.stride(0), s2.stride(1), buf.stride(0),
            rsf), dict(OUT_MODE=mode, **pl.dot2))
    _mark("launch_gemm2")
    if mode == 0:
        return buf
    if mode == 1:
        out = buf.to(torch.bfloat16)
        _mark("epilogue")
        return out
    return _reduce_topk(pl, buf, ids, M, H, E, topk, dev, poison)


def fused_workspace(pl, dev, M, H, I):
    """The one-launch path's workspace, made once per plan (a plan is one shape, device, config and
    output mode): the B pairs, the gate/up output, each program's routing rows, and the flags, zeroed
    here once and left zero by every launch (kernels/decode_fused.py). Calls of one plan must not run
    concurrently on two streams."""
    if pl.ws is None:
        fz = pl.fz
        pl.ws = (torch.empty(M, H, dtype=torch.bfloat16, device=dev),
                 torch.empty(pl.P, I, dtype=torch.bfloat16, device=dev),
                 torch.empty(fz["G"] * fz["RS"], dtype=torch.int32, device=dev),
                 torch.zeros(_decode_fused.N_FLAGS + pl.NB, dtype=torch.int32, device=dev))
    return pl.ws


def _forward_fused(pl, pk, x, w13, w2, s13, s2, ids, tw, M, E, H, I, topk, rsf, clamp, has_clamp, poison):
    """Routing, gate/up + SwiGLU and down + combine in one launch (kernels/decode_fused.py); in the
    deterministic mode the per-slot rows are summed by reduce_topk in a second launch."""
    dev = x.device
    S = M * topk
    fz, mode = pl.fz, pl.mode
    xb, act, rs, flags = fused_workspace(pl, dev, M, H, I)
    if poison:
        act.fill_(float("nan"))
        xb.fill_(float("nan"))
    if mode == 2:
        buf = torch.empty(S, H, dtype=torch.float32, device=dev)
        if poison:
            buf.fill_(float("nan"))
    else:
        buf = torch.empty(M, H, dtype=torch.bfloat16, device=dev)
    _mark("buffers")
    Q1, Q2, NW = pl.c1["Q"], pl.c2["Q"], pl.c1["num_warps"]
    d1 = _tma_desc(w13, [2 * E, I, H // 8], [2, 16 * Q1, 16 * NW], pk, "w13")
    d2 = _tma_desc(w2, [E * H, I // 8], [16 * Q2, 16 * NW], pk, "w2")
    _mark("descriptors")
    kw = fz["kw"] if not has_clamp else dict(fz["kw"], HAS_CLAMP=True)
    _launch(pl, "fused", _decode_fused.decode_fused_kernel, (fz["G"],), (
        x, xb, xb.view(torch.int32), ids, tw, d1, s13, d2, s2, act, act.view(torch.int32), buf, rs, flags,
        S, E, H, I, topk, pl.P, pl.NB, fz["NPREP"], fz["T1"], fz["T2"], M * H,
        x.stride(0), xb.stride(0), s13.stride(0), s13.stride(1), s2.stride(0), s2.stride(1), act.stride(0),
        buf.stride(0), clamp, rsf), kw, pk)
    _mark("launch_fused")
    if mode != 2:
        return buf
    return _reduce_topk(pl, buf, ids, M, H, E, topk, dev, poison)
