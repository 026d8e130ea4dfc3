"""What each GPU architecture may run: the one place the wrapper asks.

A path is allowed on an architecture only where tests/reference_impl/test_gluon_compile.py
compiles every kernel the wrapper launches for it, with the configs that architecture gets
(its heuristic defaults, and on sm_90 the shipped tuned configs).

  dot           the tl.dot kernels (gemm1_swiglu, gemm2_combine): every supported GPU (sm_80+)
  fast_dequant  their PTX e2m1 dequant (mul.rn.bf16x2: sm_90+)
  mma           the Gluon decode path (decode_mma: mma.sync fed from e2m1 words, bf16x2 PTX,
                griddepcontrol for programmatic dependent launch): sm_90+
  mma_tma       its TMA ring form (decode_tma: Gluon's Hopper TMA + mbarrier): sm_90, sm_100, and sm_120
                where Triton's ptxas for it is 13.0 or newer (tma_native: 12.8 and 12.9, the ptxas of
                Triton 3.4 and 3.6, compile the TMA copies there into calls of a system routine with
                a stack frame, not the copy engine's instructions); else its direct-load form
  fused         the one-launch decode kernel (decode_fused; off in every shipped config, slower than the
                three launches on the H200, bench/NOTES.md v14): sm_90 only (it spills on sm_100)
  wgmma         the Gluon prefill path (prefill_wgmma, prefill_ws): sm_90 only (wgmma is sm_90a)
  bf16_atomics  the down GEMM adds bf16 into the output (atom.add.bf16): sm_90+; else float32 + cast

Under the Triton interpreter (TRITON_INTERPRET=1, the CPU tests) only the tl.dot kernels run
(no inline PTX): INTERPRETER.

The environment can turn a Gluon path off (REFIMPL_DECODE_MMA=0, REFIMPL_WGMMA=0,
REFIMPL_FAST_DEQUANT=0), never on where the architecture does not allow it.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Optional, Tuple

MIN_CAPABILITY = (8, 0)  # bf16 mma.sync (the tl.dot kernels' bf16 dots)


@dataclasses.dataclass(frozen=True)
class Arch:
    name: str
    capability: Optional[Tuple[int, int]]
    dot: bool = True
    fast_dequant: bool = False
    mma: bool = False
    mma_tma: bool = False
    fused: bool = False
    wgmma: bool = False
    bf16_atomics: bool = False

    def paths(self) -> tuple:
        """The config paths ("dot", "mma", "wgmma") this architecture may run."""
        return tuple(p for p, ok in (("dot", self.dot), ("mma", self.mma), ("wgmma", self.wgmma)) if ok)


INTERPRETER = Arch("interpreter", None)

# capability (major) -> what it may run; minor versions share their major's row (sm_86 = sm_80's,
# sm_103 = sm_100's, sm_121 = sm_120's) except sm_90, the one wgmma architecture
_TABLE = {
    8: dict(),
    9: dict(fast_dequant=True, mma=True, mma_tma=True, fused=True, wgmma=True, bf16_atomics=True),
    10: dict(fast_dequant=True, mma=True, mma_tma=True, bf16_atomics=True),
    12: dict(fast_dequant=True, mma=True, mma_tma=True, bf16_atomics=True),
}
# the architectures CI compiles for (the compile test), as (major, minor)
COMPILED = ((8, 0), (9, 0), (10, 0), (12, 0))


class UnsupportedArch(ValueError):
    pass


# (major, the oldest ptxas, as (major, minor), that compiles the TMA ring's copies for it natively):
# measured with tests/reference_impl/test_gluon_compile.py (bench/NOTES.md, v16)
_TMA_PTXAS = {12: (13, 0)}


@functools.lru_cache(maxsize=None)
def ptxas_version(cc: int) -> Optional[Tuple[int, int]]:
    """The (major, minor) release of the ptxas Triton compiles compute capability cc (e.g. 120)
    with (its TRITON_PTXAS*_PATH where set), None if Triton or its ptxas cannot tell."""
    try:
        from triton.backends.nvidia import compiler
        try:
            out = compiler.get_ptxas_version(cc)
        except TypeError:  # Triton 3.4: one ptxas for every architecture
            out = compiler.get_ptxas_version()
        m = re.search(r"release (\d+)\.(\d+)", out) or re.search(r"cuda_(\d+)\.(\d+)", out)
        return (int(m.group(1)), int(m.group(2))) if m else None
    except Exception:
        return None


def tma_native(cc: Tuple[int, int]) -> bool:
    """Whether the decode path's TMA ring compiles to the copy engine's instructions on cc with
    this Triton (see mma_tma above); an unknown ptxas counts as too old."""
    need = _TMA_PTXAS.get(int(cc[0]))
    if need is None:
        return True
    have = ptxas_version(int(cc[0]) * 10 + int(cc[1]))
    return have is not None and have >= need


def for_capability(cc: Tuple[int, int]) -> Arch:
    """The row of compute capability cc; UnsupportedArch below sm_80 or for a major no row covers."""
    cc = (int(cc[0]), int(cc[1]))
    if cc < MIN_CAPABILITY or cc[0] not in _TABLE:
        known = ", ".join(f"sm_{a}{b}" for a, b in COMPILED)
        raise UnsupportedArch(f"compute capability {cc[0]}.{cc[1]} is not supported (rows: {known} and their minors)")
    row = dict(_TABLE[cc[0]])
    if cc[0] == 9 and cc[1] != 0:
        row["wgmma"] = row["fused"] = False
    if row.get("mma_tma") and not tma_native(cc):
        row["mma_tma"] = False
    return Arch(f"sm_{cc[0]}{cc[1]}", cc, **row)


def _env_off(name: str) -> bool:
    return os.environ.get(name, "1") == "0"


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.lru_cache(maxsize=None)
def _device_arch(index: int) -> Arch:
    import torch
    return for_capability(torch.cuda.get_device_capability(index))


def for_device(dev, env: bool = True) -> Arch:
    """The architecture of a torch device (INTERPRETER under TRITON_INTERPRET=1), with the
    environment's off-switches applied (env=False: without them)."""
    if interpreting() or getattr(dev, "type", "cuda") != "cuda":
        return INTERPRETER
    import torch
    a = _device_arch(dev.index if dev.index is not None else torch.cuda.current_device())
    if not env:
        return a
    off = {}
    if _env_off("REFIMPL_FAST_DEQUANT"):
        off["fast_dequant"] = False
    if _env_off("REFIMPL_DECODE_MMA"):
        off["mma"] = off["mma_tma"] = off["fused"] = False
    if _env_off("REFIMPL_WGMMA"):
        off["wgmma"] = False
    return dataclasses.replace(a, **off) if off else a


@dataclasses.dataclass(frozen=True)
class DeviceProps:
    """What the heuristic defaults look at: SM count and shared memory a block may opt into."""
    sm_count: int
    smem_per_block: int


H200_LIKE = DeviceProps(132, 232448)


@functools.lru_cache(maxsize=None)
def device_props(index: int) -> DeviceProps:
    import torch
    p = torch.cuda.get_device_properties(index)
    smem = getattr(p, "shared_memory_per_block_optin", 0) or getattr(p, "max_shared_memory_per_block_optin", 0)
    return DeviceProps(int(p.multi_processor_count), int(smem or 101376))
