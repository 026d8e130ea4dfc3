"""Weights prepared once, at load time, for grouped_mxfp4_moe.

prepack_mxfp4_moe(w13_packed, w2_packed, w13_scale, w2_scale, hidden_size, intermediate_size)
returns a PrepackedMXFP4MoE, which grouped_mxfp4_moe takes in place of the four weight tensors
(pass it as w13_packed and None for w2_packed, w13_scale, w2_scale). What is done once instead
of on every call:

* the checks of the four tensors (shapes, dtypes, devices);
* contiguous uint8 bytes (the kernels' int32 word views need them) and E8M0 exponents as uint8
  (float32 scales are converted once, not by a kernel a call);
* the TMA descriptors of the decode path's weight rings, one per box shape, and the launcher's
  encoding of each (the CUtensorMap the driver needs), kept beside the weights they describe, so a
  call neither builds nor encodes one (16-32 us a call before, bench/NOTES.md issue 19).

The bit layout of the e2m1 words is kept as SGLang stores it: nibble k of a word holds value k, and
the decode kernels pair nibbles (k, k + 4), which is the cheapest dequant measured on the H200
(two shifts and two masks a bf16 pair; the re-encodings tried in v11 and v13 lost or gained <= 7%
while needing other operand layouts). The object holds the only copy: where the caller's tensors
already had this form (contiguous uint8/int8, uint8 or e8m0 scales) they are aliased, not copied,
so replacing the raw tensors by the object keeps one copy of the weights in memory.
"""
from __future__ import annotations

from typing import Optional

import torch


class PrepackedMXFP4MoE:
    """MXFP4 MoE weights as the kernels read them (module docstring)."""

    __slots__ = ("w13", "w2", "s13", "s2", "E", "H", "I", "device", "dev_index", "_descs", "_enc", "_graphs", "__weakref__")

    def __init__(self, w13, w2, s13, s2, E, H, I):
        self.w13, self.w2, self.s13, self.s2 = w13, w2, s13, s2
        self.E, self.H, self.I = E, H, I
        self.device = w13.device
        self.dev_index = w13.get_device()  # -1 on the CPU (tensor.get_device), as the calls' tensors compare
        self._descs = {}
        self._enc = {}  # the launcher's encoding of each descriptor (moe._launch_encoded)
        self._graphs = {}  # eager calls' CUDA graphs over these weights (moe._eager_graph)

    def desc(self, which: str, shape: list, block: list):
        """The TMA descriptor of w13 / w2 seen as int32 words of `shape`, boxes of `block`
        (decode_tma's unswizzled ring layout), made once per box shape."""
        key = (which, tuple(block))
        d = self._descs.get(key)
        if d is None:
            from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
            from .kernels.decode_tma import ring_layout
            v = getattr(self, which).view(torch.int32).view(shape)
            d = TensorDescriptor(v, shape, list(v.stride()), block, ring_layout(len(shape)))
            self._descs[key] = d
        return d

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.w13, self.w2, self.s13, self.s2))

    def __repr__(self):
        return f"PrepackedMXFP4MoE(E={self.E}, H={self.H}, I={self.I}, device={self.device})"


def _bytes(name, w, shape):
    if not isinstance(w, torch.Tensor) or w.dtype not in (torch.int8, torch.uint8):
        raise ValueError(f"{name}: dtype {getattr(w, 'dtype', type(w))}, expected int8/uint8 packed e2m1")
    if tuple(w.shape) != shape:
        raise ValueError(f"{name}: shape {tuple(w.shape)}, expected {shape}")
    w = w if w.is_contiguous() else w.contiguous()
    return w.view(torch.uint8)


def _scales(name, s, shape):
    if not isinstance(s, torch.Tensor) or tuple(s.shape) != shape:
        raise ValueError(f"{name}: shape {tuple(getattr(s, 'shape', ()))}, expected {shape}")
    if s.dtype == torch.uint8:
        b = s
    elif s.dtype == getattr(torch, "float8_e8m0fnu", None):
        b = s.view(torch.uint8)
    elif s.dtype == torch.float32:
        b = ((s.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
    else:
        raise ValueError(f"{name}: dtype {s.dtype} not one of float8_e8m0fnu, uint8, float32")
    return b if b.is_contiguous() else b.contiguous()


def prepack_mxfp4_moe(w13_packed: torch.Tensor, w2_packed: torch.Tensor, w13_scale: torch.Tensor,
                      w2_scale: torch.Tensor, hidden_size: Optional[int] = None,
                      intermediate_size: Optional[int] = None) -> PrepackedMXFP4MoE:
    """SGLang's raw MXFP4 MoE weights ([E, 2I, H/2] and [E, H, I/2] packed e2m1, [E, 2I, H/32] and
    [E, H, I/32] E8M0 scales) -> PrepackedMXFP4MoE. Bad input: ValueError naming the argument."""
    if not isinstance(w13_packed, torch.Tensor) or w13_packed.dim() != 3:
        raise ValueError(f"w13_packed: expected a 3-D tensor [E, 2I, H/2], got {getattr(w13_packed, 'shape', None)}")
    E = w13_packed.shape[0]
    H = int(hidden_size) if hidden_size is not None else 2 * w13_packed.shape[2]
    I = int(intermediate_size) if intermediate_size is not None else w13_packed.shape[1] // 2
    for n, v in (("hidden_size", H), ("intermediate_size", I)):
        if v <= 0 or v % 32:
            raise ValueError(f"{n}: {v} is not a positive multiple of 32")
    w13 = _bytes("w13_packed", w13_packed, (E, 2 * I, H // 2))
    w2 = _bytes("w2_packed", w2_packed, (E, H, I // 2))
    s13 = _scales("w13_scale", w13_scale, (E, 2 * I, H // 32))
    s2 = _scales("w2_scale", w2_scale, (E, H, I // 32))
    for n, t in (("w2_packed", w2), ("w13_scale", s13), ("w2_scale", s2)):
        if t.device != w13.device:
            raise ValueError(f"{n}: on {t.device}, w13_packed on {w13.device}")
    return PrepackedMXFP4MoE(w13, w2, s13, s2, E, H, I)
