"""What a release's METADATA requires, read independently of recon (the oracle must not share
recon's mistakes): the pinned ``transformers`` and the top-level modules its required
distributions ship, which the oracle stubs when they cannot be installed on a CPU machine.
"""

from __future__ import annotations

import re
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import Requirement

MARKERS = {"os_name": "posix", "sys_platform": "linux", "platform_system": "Linux",
           "platform_machine": "x86_64", "python_version": "3.11", "python_full_version": "3.11.0",
           "implementation_name": "cpython", "platform_python_implementation": "CPython",
           "platform_release": "", "platform_version": "", "implementation_version": "3.11.0"}

# Top-level modules a distribution ships, where they are not its normalized name; a distribution
# not listed ships its own name. The kernel wheels' lists are read from their RECORD files
# (sgl-kernel 0.3.16.post5: sgl_kernel deep_gemm flash_attn triton_kernels; sglang-kernel 0.4.1:
# sgl_kernel deep_gemm triton_kernels; 0.4.10: sgl_kernel triton_kernels). Versions between two
# read ones are taken to ship what both ship; deep_gemm left the kernel wheel when releases began
# to require sgl-deep-gemm (sglang-kernel 0.4.2.post2).
KERNEL_WHEEL = [  # (first version, last version or None, modules)
    ("sgl_kernel", "0.3.0", None, ["sgl_kernel", "deep_gemm", "flash_attn", "triton_kernels"]),
    ("sglang_kernel", "0.4.0", "0.4.2.post1", ["sgl_kernel", "deep_gemm", "triton_kernels"]),
    ("sglang_kernel", "0.4.2.post2", None, ["sgl_kernel", "triton_kernels"]),
]
TOP_LEVELS = {
    "sgl_deep_gemm": ["deep_gemm"],
    "sgl_deep_ep": ["deep_ep"], "sgl_flash_mla": ["flash_mla"], "nvidia_cutlass_dsl": ["cutlass"],
    "flashinfer_python": ["flashinfer"], "flash_attn_4": ["flash_attn"], "quack_kernels": ["quack"],
    "nvidia_ml_py": ["pynvml"], "cuda_python": ["cuda"], "humming_kernels": ["humming"],
    "apache_tvm_ffi": ["tvm_ffi"], "smg_grpc_servicer": ["smg_grpc_servicer"],
    "nvshmem4py_cu13": ["nvshmem"], "nvidia_mathdx": ["nvmath"], "py_spy": [],
    "openai_harmony": ["openai_harmony"], "grpcio": ["grpc"], "grpcio_tools": ["grpc_tools"],
    "grpcio_reflection": ["grpc_reflection"], "grpcio_health_checking": ["grpc_health"],
    "ipython": ["IPython"], "pyzmq": ["zmq"], "pillow": ["PIL"], "python_multipart": ["multipart"],
    "python_dateutil": ["dateutil"], "prometheus_client": ["prometheus_client"], "torch_memory_saver": ["torch_memory_saver"],
    "decord2": ["decord"], "deepseek_recipe": ["deepseek_recipe"], "tml_renderers": ["tml_renderers"],
}

# torch's Linux CUDA wheels require triton; the CPU build used here does not bring it.
ALWAYS_STUB = ["triton"]
# Required packages left absent rather than stubbed: transformers probes them (a stub would pass
# its find_spec check and then break its imports), and no dispatch decision reads them.
NEVER_STUB = {"torchaudio", "torchcodec", "timm", "datasets", "soundfile", "av",
              "decord", "kernels", "mistral_common", "numba", "accelerate", "torchao",
              "sentencepiece", "tiktoken", "PIL", "cv2"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def metadata(release_root: Path, version: str) -> str:
    path = release_root / f"sglang-{version}.dist-info" / "METADATA"
    return path.read_text(encoding="utf-8", errors="replace")


def requirements(text: str) -> list:
    msg = HeaderParser().parsestr(text)
    extras = [e for e in (msg.get_all("Provides-Extra") or []) if norm(e) == "srt"]
    out = []
    for line in msg.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is not None and not any(req.marker.evaluate({**MARKERS, "extra": e}) for e in ["", *extras]):
            continue
        if norm(req.name) == "sglang":
            continue
        out.append(req)
    return out


def transformers_pin(reqs: list) -> str:
    for r in reqs:
        if norm(r.name) == "transformers":
            pins = [s.version for s in r.specifier if s.operator == "=="]
            if pins:
                return pins[0]
    return "4.57.1"


# Required packages that install on a CPU machine and that the base venv may hold at another
# version (transformers pulls HF's `kernels`; 0.5.16 pins kernels<0.15 and imports it): the
# release's own requirement goes into its overlay.
OVERLAY_PINS = {"kernels"}


# A release that requires one of them without a version got, on a real install, the newest final
# release on PyPI at the time: pinned to that (PyPI upload times: sglang 0.5.11 2026-05-05, 0.5.12
# 05-16, 0.5.12.post1 05-23; kernels 0.13.0 04-10, 0.14.0 05-06, 0.14.1 05-14). The base venv's
# kernels (0.19.1, a dependency of its newer transformers) fails at import under their transformers.
AT_RELEASE_DATE = {"kernels": {"0.5.11": "0.13.0", "0.5.12": "0.14.1", "0.5.12.post1": "0.14.1"}}


def overlay_requirements(reqs: list, version: str = "") -> tuple:
    out = []
    for r in reqs:
        n = norm(r.name)
        if n not in OVERLAY_PINS:
            continue
        if r.specifier:
            out.append(str(r).split(";")[0].strip())
        elif version in AT_RELEASE_DATE.get(n, {}):
            out.append(f"{r.name}=={AT_RELEASE_DATE[n][version]}")
    return tuple(sorted(out))


# Distributions the base venv holds only as dependencies of its own (newer) packages: a release
# that does not require them (nor does its pinned transformers, which names `kernels` only under
# extras) would not have them installed, so the child hides their modules (transformers probes
# `kernels` at import and takes a found one as usable).
HIDE_UNLESS_REQUIRED = {"kernels": ["kernels"]}


def hidden_modules(reqs: list) -> list:
    required = {norm(r.name) for r in reqs}
    return sorted(m for d, mods in HIDE_UNLESS_REQUIRED.items() if d not in required for m in mods)


def required_modules(reqs: list) -> list:
    """Top-level import names the release's required distributions ship."""
    mods = set(ALWAYS_STUB)
    for r in reqs:
        n = norm(r.name)
        pins = [s.version for s in r.specifier if s.operator == "=="]
        kernel = [m for d, lo, hi, m in KERNEL_WHEEL if d == n and pins and _ver(lo) <= _ver(pins[0])
                  and (hi is None or _ver(pins[0]) <= _ver(hi))]
        mods.update(kernel[0] if kernel else TOP_LEVELS.get(n, [n]))
    return sorted(mods - NEVER_STUB)


def stub_distributions(reqs: list) -> list:
    """[(distribution, version, [top-level modules])] for each required distribution whose modules
    are stubbed: the stubs get its metadata too, so ``importlib.metadata`` maps them to it as on a
    real install (transformers 5.x looks a found module's distribution up and fails without one)."""
    stubbed = set(required_modules(reqs))
    out = []
    for r in reqs:
        n = norm(r.name)
        pins = [s.version for s in r.specifier if s.operator in ("==", ">=", "~=")]
        kernel = [m for d, lo, hi, m in KERNEL_WHEEL if d == n and pins and _ver(lo) <= _ver(pins[0])
                  and (hi is None or _ver(pins[0]) <= _ver(hi))]
        mods = [m for m in (kernel[0] if kernel else TOP_LEVELS.get(n, [n])) if m in stubbed]
        if mods:
            out.append((r.name, pins[0] if pins else "0.0.0", mods))
    return out


def _ver(v: str) -> tuple:
    from packaging.version import Version
    return Version(v)
