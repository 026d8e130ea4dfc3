"""Gluon builtins under the name each Triton release gives them.

Triton 3.6 (the H200 machine's) calls the global -> shared TMA copy
`tma.async_copy_global_to_shared` and the CTA barrier `gl.thread_barrier`; later releases
renamed them `tma.async_load` (same leading arguments: descriptor, coordinates, barrier,
destination) and `gl.barrier`, and turned the old TMA name into an error. The kernels call the
names below, so the TMA and warp-specialized paths compile on both.
"""
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma

tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
