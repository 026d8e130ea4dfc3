"""Device and model profiles: the GPU a gate is evaluated for, and the shapes a kernel runs at.

Profiles are data (``recon/data/devices/*.yaml``, ``recon/data/models/*.yaml``). ``--device``
takes the name ``torch.cuda.get_device_name()`` reports (any case), a short alias, or a path to a
profile file (YAML or JSON); ``--model`` takes a profile name or alias, a profile file, or a
Hugging Face ``config.json`` (or the folder holding one). Bad input raises :class:`ReconError` with
one line that names the known profiles, or the file and field at fault.
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional, Union

from .yamltext import YAMLError, load_yaml

from .errors import ReconError

DATA_DIR = Path(__file__).resolve().parent / "data"
DEVICES_DIR = DATA_DIR / "devices"
MODELS_DIR = DATA_DIR / "models"

DEFAULT_DEVICE = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
DEFAULT_MODEL = "DeepSeek-V4-Flash"
DEFAULT_DECODE_BATCHES = [1, 2, 4, 8, 16, 32, 64]

# Block-scaled formats: element group size and scale dtype of each (OCP MX spec / NVIDIA NVFP4).
FORMAT_GROUP = {"mxfp4": (32, "e8m0"), "mxfp8": (32, "e8m0"), "mxfp6": (32, "e8m0"), "nvfp4": (16, "e4m3")}


class ProfileError(ReconError):
    pass


# What a kernel may need of the SM besides its compute capability; every NVIDIA profile says each
# (true or false), so a library op's requirement is checked against a stated fact, never a guess.
FEATURES = {
    "clusters": "thread-block clusters with distributed shared memory and TMA multicast across the cluster",
    "tma_scatter": "TMA scatter (cp.async.bulk.tensor .tile::scatter4)",
    "tmem_tcgen05": "Tensor Memory and the tcgen05 MMA instructions (datacenter Blackwell)",
    "wgmma": "warpgroup MMA (wgmma.mma_async, sm_90a)",
    "block_scaled_mma": "FP4/FP8 block-scaled tensor-core MMA (MX / NVFP4 scale factors in the instruction)",
}


@dataclass
class DeviceProfile:
    name: str  # exactly as torch.cuda.get_device_name() reports it
    short: str  # the canonical alias, e.g. "rtx-pro-6000"
    aliases: list[str]
    vendor: str  # "nvidia" | "amd"
    compute_capability: tuple[int, int]  # (12, 0); AMD: what torch reports on ROCm (gfx942 -> (9, 4))
    sm_count: int  # SMs (NVIDIA) or CUs (AMD)
    smem_per_block_bytes: int  # opt-in maximum shared memory (LDS on AMD) per block, exact
    mem_bandwidth_tbs: float  # peak DRAM bandwidth, TB/s
    block_scaled_formats: list[str]  # formats the tensor cores take natively with block scales
    cuda_version: Optional[tuple[int, int]]  # assumed CUDA toolkit of the install; None on ROCm
    bf16_tflops: float  # dense BF16 tensor throughput (FP32 accumulate)
    arch: str = ""  # "sm_120", "gfx942"
    fp8: bool = False  # native FP8 (E4M3/E5M2) tensor-core GEMM
    rocm_version: Optional[tuple[int, int]] = None
    notes: str = ""
    source: str = ""  # the file it came from
    features: dict = field(default_factory=dict)  # FEATURES key -> bool (AMD: all false)

    @property
    def smem_per_block_kb(self) -> float:
        return self.smem_per_block_bytes / 1024

    def has(self, feature: str) -> Optional[bool]:
        """Whether the device has ``feature`` (a FEATURES key); None where the profile does not say."""
        return self.features.get(feature)
    # copy bandwidth measured on this device by recon's own benchmarks (the anchors), with where;
    # every floor uses it where it exists, the datasheet figure otherwise (one number per device)
    measured_bandwidth_tbs: Optional[float] = None
    measured_bandwidth_source: str = ""

    @property
    def bandwidth_tbs(self) -> float:
        """The bandwidth every floor divides by: measured where recon has a measurement, else the datasheet's."""
        return self.measured_bandwidth_tbs or self.mem_bandwidth_tbs

    @property
    def bandwidth_basis(self) -> str:
        if self.measured_bandwidth_tbs:
            return f"measured copy bandwidth ({self.measured_bandwidth_source}; datasheet {self.mem_bandwidth_tbs} TB/s)"
        return "datasheet peak (no measurement on this device)"

    @property
    def config_name(self) -> str:
        """The device part of SGLang's tuned-config file names (``device_name=...``)."""
        return self.name.replace(" ", "_")

    @property
    def sm(self) -> str:
        """``sm_120`` style label (``gfx942`` on AMD)."""
        return self.arch or f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    def to_dict(self) -> dict:
        return {
            "name": self.name, "short": self.short, "aliases": list(self.aliases), "vendor": self.vendor,
            "arch": self.sm, "compute_capability": list(self.compute_capability), "sm_count": self.sm_count,
            "smem_per_block_bytes": self.smem_per_block_bytes, "smem_per_block_kb": self.smem_per_block_kb,
            "features": dict(self.features), "mem_bandwidth_tbs": self.mem_bandwidth_tbs,
            "block_scaled_formats": list(self.block_scaled_formats), "fp8": self.fp8,
            "cuda_version": list(self.cuda_version) if self.cuda_version else None,
            "rocm_version": list(self.rocm_version) if self.rocm_version else None,
            "bf16_tflops": self.bf16_tflops, "config_name": self.config_name,
            "bandwidth_tbs": self.bandwidth_tbs, "bandwidth_basis": self.bandwidth_basis,
        }


@dataclass
class ModelProfile:
    name: str
    architectures: list[str]  # class names SGLang registers (EntryClass), e.g. DeepseekV4ForCausalLM
    num_experts: int  # routed experts
    hidden_size: int
    moe_intermediate_size: int
    top_k: int
    num_layers: int
    num_moe_layers: int
    expert_quant: str  # "mxfp4" | "nvfp4" | "fp8" | "bf16"
    expert_group_size: Optional[int]  # elements per scale along K (32 for mxfp4, 16 nvfp4, 128 fp8 block)
    expert_scale_dtype: Optional[str]  # "e8m0" | "e4m3" | "fp32" | None
    dense_quant: str  # "fp8" | "bf16" | ...
    dense_block_shape: Optional[list[int]]  # [128, 128] for FP8 block quant
    dense_gemm_shapes: list[list[int]]  # (N, K) of the dense quantized linears at TP=1
    decode_batches: list[int] = field(default_factory=lambda: list(DEFAULT_DECODE_BATCHES))
    short: str = ""
    aliases: list[str] = field(default_factory=list)
    notes: str = ""
    source: str = ""
    num_attention_heads: Optional[int] = None  # query heads at TP=1 (attention kernels' grids use it)
    # What SGLang's loader reads from the checkpoint's config.json (architectures, model_type,
    # quantization_config, ...): the runtime view evaluates SGLang's own code against it.
    hf_config: dict = field(default_factory=dict)
    # KV cache as the attention kernels read it at decode: bytes_per_token_layer (K and V, all KV
    # heads, as stored), and optionally sliding_window with sliding_window_layers (layers that read
    # at most that many tokens). Empty when the profile does not give it.
    kv_cache: dict = field(default_factory=dict)

    @property
    def is_moe(self) -> bool:
        """Whether the model routes tokens to experts; a dense model (no experts in its config.json)
        has ``num_experts`` 0 and no MoE layer, and every product leaves the MoE out for it."""
        return self.num_experts > 0

    def to_dict(self) -> dict:
        return {
            "name": self.name, "short": self.short, "num_attention_heads": self.num_attention_heads, "aliases": list(self.aliases),
            "moe": self.is_moe, "notes": self.notes,
            "architectures": list(self.architectures), "num_experts": self.num_experts,
            "hidden_size": self.hidden_size, "moe_intermediate_size": self.moe_intermediate_size,
            "top_k": self.top_k, "num_layers": self.num_layers, "num_moe_layers": self.num_moe_layers,
            "expert_quant": self.expert_quant, "expert_group_size": self.expert_group_size,
            "expert_scale_dtype": self.expert_scale_dtype, "dense_quant": self.dense_quant,
            "dense_block_shape": list(self.dense_block_shape) if self.dense_block_shape else None,
            "dense_gemm_shapes": [list(s) for s in self.dense_gemm_shapes],
            "decode_batches": list(self.decode_batches),
        }


# --- reading files ------------------------------------------------------------------------------


# A config.json or profile is a few KB (the largest Hugging Face configs, with label tables, well
# under 1 MB): a file past this is not one, and is refused before it is read into memory.
MAX_PROFILE_BYTES = 16 << 20


def _read_text(path: Path) -> str:
    """The file's text, opened without blocking (a named pipe or device is refused, never waited
    on) and read only when it is a regular file within :data:`MAX_PROFILE_BYTES`. Links are
    followed: a Hugging Face snapshot's ``config.json`` is one."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ProfileError(f"{path}: not a regular file (a pipe, socket, device or folder): not read")
        if st.st_size > MAX_PROFILE_BYTES:
            raise ProfileError(f"{path}: {st.st_size:,} bytes, past the {MAX_PROFILE_BYTES >> 20} MiB any profile or config.json takes: not read")
        data = f.read(MAX_PROFILE_BYTES + 1)
    if len(data) > MAX_PROFILE_BYTES:  # grew while being read
        raise ProfileError(f"{path}: past the {MAX_PROFILE_BYTES >> 20} MiB any profile or config.json takes: not read")
    return data.decode("utf-8")


def _read_mapping(path: Path) -> dict:
    try:
        text = _read_text(path)
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"{path}: cannot be read: {e}") from None
    kind = "JSON" if path.suffix == ".json" else "YAML"
    try:
        data = json.loads(text) if path.suffix == ".json" else load_yaml(text)
    except (json.JSONDecodeError, YAMLError) as e:
        if "nesting depth" in str(e):  # libyaml's own depth limit: the same refusal as Python's
            raise ProfileError(f"{path}: is not valid {kind}: nested too deeply") from None
        raise ProfileError(f"{path}: is not valid {kind}: {str(e).splitlines()[0]}") from None
    except RecursionError:  # [[[[... 100,000 deep: no profile or config.json nests like that
        raise ProfileError(f"{path}: is not valid {kind}: nested too deeply") from None
    except ValueError:  # an integer past Python's 4300-digit limit for decimal text
        raise ProfileError(f"{path}: is not valid {kind}: an integer of more than 4300 digits") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile must hold a mapping, found {type(data).__name__}")
    return data


class _Fields:
    """Typed access to one profile mapping; every error names the file and the field."""

    def __init__(self, data: dict, where: str):
        self.data, self.where = data, where

    def _bad(self, key: str, what: str):
        raise ProfileError(f"{self.where}: field '{key}' {what}")

    def get(self, key: str, kind, required: bool = True, default=None):
        if key not in self.data or self.data[key] is None:
            if required:
                self._bad(key, "is missing")
            return default
        v = self.data[key]
        if kind is float and isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        if kind is int and isinstance(v, bool):
            self._bad(key, f"must be an integer, not {v!r}")
        if not isinstance(v, kind):
            self._bad(key, f"must be {getattr(kind, '__name__', kind)}, not {v!r}")
        return v

    def pair(self, key: str, required: bool = True) -> Optional[tuple[int, int]]:
        v = self.data.get(key)
        if v is None:
            if required:
                self._bad(key, "is missing")
            return None
        if isinstance(v, str) and re.fullmatch(r"\d+\.\d+", v.strip()):
            v = [int(x) for x in v.strip().split(".")]
        if not (isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
            self._bad(key, f"must be a pair of integers like [12, 0] or '12.8', not {v!r}")
        return (v[0], v[1])

    def strs(self, key: str) -> list[str]:
        v = self.data.get(key) or []
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self._bad(key, f"must be a list of strings, not {v!r}")
        return list(v)


def device_from_mapping(data: dict, where: str) -> DeviceProfile:
    f = _Fields(data, where)
    name = f.get("name", str)
    vendor = f.get("vendor", str).lower()
    if vendor not in ("nvidia", "amd"):
        f._bad("vendor", f"must be 'nvidia' or 'amd', not {vendor!r}")
    cc = f.pair("compute_capability")  # checked in file order, so the first bad field is the one named
    sm_count = f.get("sm_count", int)
    smem = f.get("smem_per_block_bytes", int)
    bw = f.get("mem_bandwidth_tbs", float)
    formats = [x.lower() for x in f.strs("block_scaled_formats")]
    unknown = [x for x in formats if x not in FORMAT_GROUP]
    if unknown:
        f._bad("block_scaled_formats", f"has unknown format(s) {unknown} (known: {', '.join(sorted(FORMAT_GROUP))})")
    cuda = f.pair("cuda_version", required=vendor == "nvidia")
    for k, v in (("compute_capability", cc[0]), ("compute_capability", cc[1])):
        _bounded_int(where, k, v, 0, 999, "device")
    _bounded_int(where, "sm_count", sm_count, 1, 1 << 14, "device")  # the largest GPU of 2026 has 160 SMs
    _bounded_int(where, "smem_per_block_bytes", smem, 1, 1 << 24, "device")
    kb = data.get("smem_per_block_kb")  # an older field: where given too, it must say the same
    if kb is not None and (isinstance(kb, bool) or not isinstance(kb, (int, float)) or abs(kb * 1024 - smem) >= 1024):
        f._bad("smem_per_block_kb", f"is {kb!r}, which disagrees with smem_per_block_bytes {smem} ({smem / 1024:g} KB)")
    if not 0 < bw < 1e6:  # also refuses NaN and infinity
        f._bad("mem_bandwidth_tbs", f"must be a positive number below 1e6, not {bw!r}")
    features = _features(f, vendor)
    return DeviceProfile(
        name=name,
        short=f.get("short", str, required=False, default="") or re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-"),
        aliases=f.strs("aliases"),
        vendor=vendor,
        compute_capability=cc,
        sm_count=sm_count,
        smem_per_block_bytes=smem,
        mem_bandwidth_tbs=bw,
        block_scaled_formats=formats,
        cuda_version=cuda,
        bf16_tflops=_positive(f, "bf16_tflops"),
        arch=f.get("arch", str, required=False, default=""),
        fp8=f.get("fp8", bool, required=False, default=False),
        rocm_version=f.pair("rocm_version", required=False),
        notes=(f.get("notes", str, required=False, default="") or "").strip(),
        source=where,
        features=features,
        measured_bandwidth_tbs=_measured_bw(f),
        measured_bandwidth_source=f.get("measured_bandwidth_source", str, required=False, default="") or "",
    )


def _features(f: "_Fields", vendor: str) -> dict:
    """The ``features`` mapping: on NVIDIA every FEATURES key, each true or false (a missing one is
    refused with its name); on AMD none of them exists, so an absent mapping means all false."""
    v = f.data.get("features")
    if v is None:
        if vendor == "amd":
            return {k: False for k in FEATURES}
        f._bad("features", f"is missing (say true or false for each of: {', '.join(FEATURES)})")
    if not isinstance(v, dict):
        f._bad("features", f"must be a mapping of {', '.join(FEATURES)} to true/false, not {_value_text(v)}")
    unknown = sorted(str(k) for k in v if k not in FEATURES)
    if unknown:
        f._bad("features", f"has unknown key(s) {unknown} (known: {', '.join(FEATURES)})")
    out = {}
    for k in FEATURES:
        if k not in v:
            f._bad(f"features.{k}", "is missing (true or false)")
        if not isinstance(v[k], bool):
            f._bad(f"features.{k}", f"must be true or false, not {_value_text(v[k])}")
        out[k] = v[k]
    return out


def _measured_bw(f) -> Optional[float]:
    v = f.get("measured_bandwidth_tbs", float, required=False)
    if v is not None and not 0 < v < 1e6:
        f._bad("measured_bandwidth_tbs", f"must be a positive number below 1e6, not {v!r}")
    return v


# The largest each size may be: well beyond any released model (the largest known in 2026: 384
# routed experts, top-k 16, hidden 16,384, MoE intermediate 53,248, 126 layers, 128 query heads),
# and small enough that every product recon forms of them stays an ordinary number. A config past
# one is refused with the field named rather than analyzed as a model that cannot exist.
MAX_SIZES = {"num_experts": 1 << 16, "top_k": 1 << 10, "hidden_size": 1 << 20, "moe_intermediate_size": 1 << 20,
             "num_layers": 1 << 12, "num_moe_layers": 1 << 12, "expert_group_size": 1 << 16, "num_attention_heads": 1 << 14}
# config.json keys recon computes with besides those (shapes of the attention and shared-expert
# linears, the KV cache): each, when present, an integer from its least to MAX_DIM
MAX_DIM = 1 << 20
HF_DIMS = {"num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 1, "q_lora_rank": 0, "kv_lora_rank": 0,
           "o_lora_rank": 0, "o_groups": 1, "qk_nope_head_dim": 0, "qk_rope_head_dim": 0, "v_head_dim": 1,
           "n_shared_experts": 0, "first_k_dense_replace": 0, "sliding_window": 0, "intermediate_size": 1,
           "moe_intermediate_size": 1, "n_routed_experts": 1, "num_local_experts": 1, "num_experts": 1,
           "num_experts_per_tok": 1, "experts_per_token": 1, "num_experts_per_token": 1, "num_hidden_layers": 1,
           "hidden_size": 1}

_HF_FIELD = {"num_hidden_layers": "num_layers", "n_routed_experts": "num_experts", "num_local_experts": "num_experts",
             "num_experts_per_tok": "top_k", "experts_per_token": "top_k", "num_experts_per_token": "top_k",
             "intermediate_size": "moe_intermediate_size"}  # config.json key -> the profile field it fills


def _bounded_int(where: str, key: str, v, least: int, most: int, what: str = "model") -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProfileError(f"{where}: field '{key}' must be an integer, not {_value_text(v)}")
    if v < least:
        raise ProfileError(f"{where}: field '{key}' must be {'a positive integer' if least == 1 else f'at least {least}'}, not {v}")
    if v > most:
        raise ProfileError(f"{where}: field '{key}' is {_value_text(v)}, beyond any real {what} (at most {most})")


def _value_text(v) -> str:
    """A value for a one-line message: ``10**4000`` is not printed in full."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"an integer of {len(str(abs(v))) if v.bit_length() < 13_000 else 'thousands of'} digits"
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _positive(f: "_Fields", key: str) -> float:
    v = f.get(key, float)
    if not 0 < v < 1e9:
        f._bad(key, f"must be a positive number below 1e9, not {v!r}")
    return v


def _check_hf(cfg: dict, where: str) -> None:
    """The config.json keys recon computes with, each an integer within bounds when present
    (a bool is not an integer: ``num_experts_per_tok: true`` is refused)."""
    for key, least in HF_DIMS.items():
        if cfg.get(key) is not None:
            _bounded_int(where, key, cfg[key], least, MAX_SIZES.get(_HF_FIELD.get(key, key), MAX_DIM))
    mlp_only = cfg.get("mlp_only_layers")
    if mlp_only is not None and not (isinstance(mlp_only, list) and len(mlp_only) <= MAX_SIZES["num_layers"]):
        raise ProfileError(f"{where}: field 'mlp_only_layers' must be a list of layer numbers, not {_value_text(mlp_only)}")
    qc = cfg.get("quantization_config")
    if isinstance(qc, dict):
        if qc.get("group_size") is not None:
            _bounded_int(where, "quantization_config.group_size", qc["group_size"], 1, MAX_SIZES["expert_group_size"])
        block = qc.get("weight_block_size")
        if block is not None:
            if not (isinstance(block, list) and len(block) == 2):
                raise ProfileError(f"{where}: field 'quantization_config.weight_block_size' must be [N, K], not {_value_text(block)}")
            for b in block:
                _bounded_int(where, "quantization_config.weight_block_size", b, 1, MAX_DIM)


def _check_sizes(m: "ModelProfile", where: str, names: Optional[dict] = None, dense: bool = False) -> "ModelProfile":
    """Refuse a model no checkpoint can have (a spec of it would be all zeros): every size positive
    and within :data:`MAX_SIZES`, top-k within the experts. ``names`` maps a profile field to the
    key the file used for it; ``dense`` allows no experts at all (a config.json that names none)."""
    names = names or {}
    key = lambda f: names.get(f, f)
    # a dense model (experts 0: only a config.json without experts gives one) has no MoE sizes to check
    moe = m.is_moe or not dense  # a dense model (a config.json without experts) has no MoE sizes to check
    for f in ("num_experts", "top_k", "hidden_size", "moe_intermediate_size", "num_layers", "num_moe_layers") if moe else ("hidden_size", "num_layers"):
        v = getattr(m, f)
        if v < 1:
            after = " MoE layers after first_k_dense_replace and mlp_only_layers" if f == "num_moe_layers" and names else ""
            raise ProfileError(f"{where}: field '{key(f)}' must be a positive integer, not {v}{after}")
        if v > MAX_SIZES[f]:
            raise ProfileError(f"{where}: field '{key(f)}' is {_value_text(v)}, beyond any real model (at most {MAX_SIZES[f]})")
    if m.num_attention_heads is not None:
        _bounded_int(where, key("num_attention_heads"), m.num_attention_heads, 1, MAX_SIZES["num_attention_heads"])
    for i, (n, k) in enumerate(m.dense_gemm_shapes):
        for v in (n, k):
            _bounded_int(where, f"dense_gemm_shapes[{i}]", v, 1, MAX_DIM)
    for b in m.decode_batches:
        _bounded_int(where, "decode_batches", b, 1, MAX_DIM)
    if m.is_moe and m.top_k > m.num_experts:
        raise ProfileError(f"{where}: field '{key('top_k')}' is {m.top_k}, more than the {m.num_experts} experts ('{key('num_experts')}')")
    if m.num_moe_layers > m.num_layers:
        raise ProfileError(f"{where}: field '{key('num_moe_layers')}' is {m.num_moe_layers}, more than the {m.num_layers} layers ('{key('num_layers')}')")
    if m.expert_group_size is not None:
        _bounded_int(where, key("expert_group_size"), m.expert_group_size, 1, MAX_SIZES["expert_group_size"])
    return m


def _hf_names(cfg: dict) -> dict:
    """The config.json key each profile field came from (errors name the key the user wrote)."""
    used = lambda *keys: next((k for k in keys if cfg.get(k) is not None), keys[0])
    return {"num_experts": used("n_routed_experts", "num_local_experts", "num_experts"), "hidden_size": "hidden_size",
            "moe_intermediate_size": used("moe_intermediate_size", "intermediate_size"),
            "top_k": used("num_experts_per_tok", "experts_per_token", "num_experts_per_token"),
            "num_layers": "num_hidden_layers", "num_moe_layers": "num_hidden_layers", "expert_group_size": "quantization_config.group_size"}


def model_from_mapping(data: dict, where: str) -> ModelProfile:
    f = _Fields(data, where)
    shapes = data.get("dense_gemm_shapes") or []
    out_shapes = []
    for i, s in enumerate(shapes):
        nk = s.get("nk") if isinstance(s, dict) else s  # a bare [N, K] or {nk: [N, K], layer: ..., from: ...}
        if not (isinstance(nk, (list, tuple)) and len(nk) == 2 and all(isinstance(x, int) for x in nk)):
            f._bad(f"dense_gemm_shapes[{i}]", f"must be [N, K] or {{nk: [N, K], ...}}, not {s!r}")
        out_shapes.append([nk[0], nk[1]])
    batches = data.get("decode_batches") or DEFAULT_DECODE_BATCHES
    if not (isinstance(batches, list) and batches and all(isinstance(b, int) and b > 0 for b in batches)):
        f._bad("decode_batches", f"must be a list of positive integers, not {batches!r}")
    archs = f.strs("architectures")
    if not archs:
        f._bad("architectures", "is missing")
    num_layers = f.get("num_layers", int)
    return ModelProfile(
        name=f.get("name", str),
        architectures=archs,
        num_experts=f.get("num_experts", int),
        hidden_size=f.get("hidden_size", int),
        moe_intermediate_size=f.get("moe_intermediate_size", int),
        top_k=f.get("top_k", int),
        num_layers=num_layers,
        num_moe_layers=f.get("num_moe_layers", int, required=False, default=num_layers),
        expert_quant=f.get("expert_quant", str).lower(),
        expert_group_size=f.get("expert_group_size", int, required=False),
        expert_scale_dtype=f.get("expert_scale_dtype", str, required=False),
        dense_quant=f.get("dense_quant", str, required=False, default="bf16").lower(),
        dense_block_shape=_as_list(f.pair("dense_block_shape", required=False)),
        dense_gemm_shapes=out_shapes,
        decode_batches=list(batches),
        short=f.get("short", str, required=False, default="") or "",
        aliases=f.strs("aliases"),
        notes=(f.get("notes", str, required=False, default="") or "").strip(),
        source=where,
        num_attention_heads=f.get("num_attention_heads", int, required=False),
        hf_config=_hf_of_profile(data, archs, where),
        kv_cache=f.get("kv_cache", dict, required=False, default={}) or {},
    )


def _hf_of_profile(data: dict, archs: list, where: str) -> dict:
    """A profile's ``hf_config`` block (what the checkpoint's config.json says), with its
    architectures filled in; a profile without one has no quantization_config (an unquantized
    checkpoint) as far as SGLang's loader can tell."""
    hf = data.get("hf_config") or {}
    if not isinstance(hf, dict):
        raise ProfileError(f"{where}: hf_config must be a mapping, not {type(hf).__name__}")
    return {"architectures": list(archs), **hf}


def _as_list(pair):
    return list(pair) if pair else None


# --- the shipped profiles -----------------------------------------------------------------------


@lru_cache(maxsize=None)
def _shipped_devices() -> tuple[DeviceProfile, ...]:
    return tuple(device_from_mapping(_read_mapping(p), str(p)) for p in sorted(DEVICES_DIR.glob("*.y*ml")))


@lru_cache(maxsize=None)
def _shipped_models() -> tuple[ModelProfile, ...]:
    return tuple(_check_sizes(model_from_mapping(_read_mapping(p), str(p)), str(p)) for p in sorted(MODELS_DIR.glob("*.y*ml")))


def list_devices() -> list[DeviceProfile]:
    return copy.deepcopy(list(_shipped_devices()))  # copies: a caller's edit must not leak into the next load


def list_models() -> list[ModelProfile]:
    return copy.deepcopy(list(_shipped_models()))


def _norm(s: str) -> str:
    """Case, spaces, underscores and dashes do not matter when naming a profile."""
    return re.sub(r"[\s_\-]+", "", s.strip().lower())


def _find(spec: str, profiles, kind: str):
    key = _norm(spec)
    for p in profiles:
        vendorless = re.sub(r"^(nvidia|amd)\s+", "", p.name, flags=re.I)  # "RTX PRO 6000 ..." without "NVIDIA"
        if key in {_norm(p.name), _norm(vendorless), _norm(p.short), *(_norm(a) for a in p.aliases)}:
            return copy.deepcopy(p)
    known = ", ".join(f"{p.short} ({p.name})" if p.short and p.short != p.name else p.name for p in profiles)
    raise ProfileError(f"unknown {kind} {spec!r}; known: {known}; or give a path to a profile file")


def _looks_like_path(spec: str) -> bool:
    return spec.endswith((".yaml", ".yml", ".json")) or "/" in spec or "\\" in spec


def load_device(spec: Union[str, Path, DeviceProfile, None] = None) -> DeviceProfile:
    """A device by name (any case), alias, or profile file path; None gives the seed's default."""
    if isinstance(spec, DeviceProfile):
        return spec
    spec = DEFAULT_DEVICE if spec is None else spec
    if isinstance(spec, Path) or _looks_like_path(str(spec)):
        path = Path(spec)
        if not path.exists():
            raise ProfileError(f"device profile file not found: {path}")
        return device_from_mapping(_read_mapping(path), str(path))
    return _find(str(spec), _shipped_devices(), "device")


def load_model(spec: Union[str, Path, ModelProfile, None] = None) -> ModelProfile:
    """A model by name or alias, a profile file, or a Hugging Face config.json (file or folder)."""
    if isinstance(spec, ModelProfile):
        return spec
    spec = DEFAULT_MODEL if spec is None else spec
    if isinstance(spec, Path) or _looks_like_path(str(spec)):
        path = Path(spec)
        if path.is_dir() and (path / "config.json").exists():
            path = path / "config.json"
        if not path.exists() or path.is_dir():
            raise ProfileError(f"model profile or config.json not found: {path}")
        data = _read_mapping(path)
        # a Hugging Face config.json names its architectures and no profile name (a profile file has
        # "name"); one without hidden_size is refused below with that field named
        if "architectures" in data and "name" not in data:
            _check_hf(data, str(path))
            m = model_from_hf_config(data, str(path))
            return _check_sizes(m, str(path), _hf_names(data), dense=not m.is_moe)
        return _check_sizes(model_from_mapping(data, str(path)), str(path))
    return _find(str(spec), _shipped_models(), "model")


# --- Hugging Face config.json -------------------------------------------------------------------


def _first(cfg: dict, *keys, default=None):
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def _quant_of(qc: dict) -> tuple[str, Optional[int], Optional[str], str, Optional[tuple[int, int]]]:
    """(expert_quant, group, scale dtype, dense_quant, dense block) from a quantization_config."""
    method = str(qc.get("quant_method") or qc.get("quant_algo") or "").lower()
    block = qc.get("weight_block_size")
    block = (int(block[0]), int(block[1])) if isinstance(block, (list, tuple)) and len(block) == 2 else None
    # Checkpoints that keep experts in FP4 while the rest is FP8 say so with an extra key.
    expert_fmt = str(qc.get("expert_dtype") or qc.get("experts_dtype") or qc.get("moe_quant") or "").lower()
    if method in ("mxfp4",) or "mxfp4" in method:
        return "mxfp4", 32, "e8m0", "bf16", None  # gpt-oss: attention etc. in modules_to_not_convert
    if "nvfp4" in method or method in ("modelopt_fp4",) or ("fp4" in method and "modelopt" in method):
        return "nvfp4", int(qc.get("group_size") or 16), "e4m3", "bf16", None
    if method.startswith("fp8") or method in ("fbgemm_fp8", "modelopt", "w8a8_fp8"):
        scale = "e8m0" if str(qc.get("scale_fmt", "")).lower() in ("ue8m0", "e8m0") else "fp32"
        if expert_fmt in ("fp4", "mxfp4"):
            return "mxfp4", 32, "e8m0", "fp8", block
        return "fp8", (block[1] if block else None), scale, "fp8", block
    if method:
        return method, qc.get("group_size"), None, method, None
    return "bf16", None, None, "bf16", None


def _dense_shapes(cfg: dict, hidden: int) -> list[tuple[int, int]]:
    """(N, K) of the attention and shared-expert linears at TP=1, for MLA (DeepSeek) or plain attention."""
    heads = cfg.get("num_attention_heads")
    shapes: list[tuple[int, int]] = []
    if cfg.get("kv_lora_rank") and heads:  # DeepSeek V2/V3 MLA
        qn, qr, vd = cfg.get("qk_nope_head_dim", 128), cfg.get("qk_rope_head_dim", 64), cfg.get("v_head_dim", 128)
        qlr, kvl = cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
        if qlr:
            shapes += [(qlr, hidden), (heads * (qn + qr), qlr)]
        else:
            shapes.append((heads * (qn + qr), hidden))
        shapes += [(kvl + qr, hidden), (heads * (qn + vd), kvl), (hidden, heads * vd)]
    elif cfg.get("o_lora_rank") and heads:  # DeepSeek V4 style: wq_a, wkv, wq_b, wo_b
        hd = cfg.get("head_dim", 512)
        qlr, olr, g = cfg.get("q_lora_rank", 1024), cfg["o_lora_rank"], cfg.get("o_groups", 8)
        shapes += [(qlr, hidden), (hd, hidden), (heads * hd, qlr), (hidden, g * olr)]
    elif heads:
        hd = cfg.get("head_dim") or hidden // heads
        kv = cfg.get("num_key_value_heads") or heads
        shapes += [((heads + 2 * kv) * hd, hidden), (hidden, heads * hd)]
    shared = cfg.get("n_shared_experts")
    if shared:
        inter = cfg.get("moe_intermediate_size") * shared
        shapes += [(2 * inter, hidden), (hidden, inter)]
    return shapes


def model_from_hf_config(cfg: dict, where: str) -> ModelProfile:
    """A profile from a Hugging Face config.json; fields it lacks raise with the file and field.
    A config that names no routed experts (no n_routed_experts / num_local_experts / num_experts)
    is a dense model: experts, top-k and MoE layers 0, every layer's MLP a dense GEMM, as SGLang
    serves Llama, Qwen3 dense, Mistral or Gemma."""
    f = _Fields(cfg, where)
    archs = f.strs("architectures")  # may be empty: the runtime view says what that leaves undecided
    hidden = f.get("hidden_size", int)
    experts = _first(cfg, "n_routed_experts", "num_local_experts", "num_experts")
    layers = f.get("num_hidden_layers", int)
    qc = cfg.get("quantization_config") or {}
    if not isinstance(qc, dict):
        f._bad("quantization_config", "must be a mapping")
    eq, group, scale, dq, block = _quant_of(qc)
    name = str(cfg.get("_name_or_path") or cfg.get("name") or Path(where).parent.name or archs[0]).rstrip("/").rsplit("/", 1)[-1]
    common = dict(name=name, architectures=archs, hidden_size=hidden, num_layers=layers, dense_quant=dq,
                  dense_block_shape=_as_list(block), source=where,
                  num_attention_heads=cfg.get("num_attention_heads") if isinstance(cfg.get("num_attention_heads"), int) else None,
                  hf_config=_hf_view(cfg), kv_cache=_kv_of_config(cfg, layers))
    if experts is None:
        inter = f.get("intermediate_size", int)  # the dense MLP's width: gate_up is 2 x this by hidden
        return ModelProfile(
            num_experts=0, moe_intermediate_size=0, top_k=0, num_moe_layers=0,
            expert_quant="none", expert_group_size=None, expert_scale_dtype=None,
            # every linear of every layer is a dense GEMM: attention's and the MLP's
            dense_gemm_shapes=[list(s) for s in _dense_shapes(cfg, hidden) + [(2 * inter, hidden), (hidden, inter)]],
            notes=(f"dense model: config.json names no routed experts (no n_routed_experts, num_local_experts or "
                   f"num_experts), so there is no MoE layer; each of the {layers} layers runs attention and a dense "
                   f"MLP (intermediate_size {inter})" + (f", linears quantized {dq}" if dq != "bf16" else "")),
            **common)
    if not isinstance(experts, int):
        f._bad("n_routed_experts", "(or num_local_experts / num_experts) must be an integer")
    inter = _first(cfg, "moe_intermediate_size", "intermediate_size")
    if not isinstance(inter, int):
        f._bad("moe_intermediate_size", "(or intermediate_size) is missing")
    top_k = _first(cfg, "num_experts_per_tok", "experts_per_token", "num_experts_per_token")
    if not isinstance(top_k, int):
        f._bad("num_experts_per_tok", "(or experts_per_token) is missing")
    dense_first = cfg.get("first_k_dense_replace") or 0
    mlp_only = cfg.get("mlp_only_layers") or []
    return ModelProfile(
        num_experts=experts,
        moe_intermediate_size=inter,
        top_k=top_k,
        num_moe_layers=max(0, layers - dense_first - len(mlp_only)),
        expert_quant=eq,
        expert_group_size=group,
        expert_scale_dtype=scale,
        dense_gemm_shapes=[list(s) for s in _dense_shapes(cfg, hidden)] if dq == "fp8" else [],
        **common)


def _kv_of_config(cfg: dict, layers: int) -> dict:
    """KV bytes per token and layer for standard (non-latent) attention in 16-bit storage, from
    config.json's num_key_value_heads and head_dim; empty for other layouts (latent/compressed)."""
    kvh, hd, heads = cfg.get("num_key_value_heads"), cfg.get("head_dim"), cfg.get("num_attention_heads")
    if hd is None and isinstance(heads, int) and isinstance(cfg.get("hidden_size"), int):
        hd = cfg["hidden_size"] // heads  # SGLang's ModelConfig: head_dim absent -> hidden_size // num_attention_heads
    if cfg.get("kv_lora_rank") or not (isinstance(kvh, int) and isinstance(hd, int)):
        return {}
    out = {"bytes_per_token_layer": 2 * kvh * hd * 2, "basis": "config.json num_key_value_heads x head_dim"
           + ("" if "head_dim" in cfg else " (hidden_size // num_attention_heads)") + ", K and V, 16-bit"}
    win, types = cfg.get("sliding_window"), cfg.get("layer_types")
    if isinstance(win, int) and isinstance(types, list):
        out.update(sliding_window=win, sliding_window_layers=sum(1 for t in types if "sliding" in str(t)))
    return out


def _hf_view(cfg: dict) -> dict:
    """The config.json keys SGLang's dispatch reads: scalars, short lists and the quantization block."""
    out = {}
    for k, v in cfg.items():
        if isinstance(v, (str, int, float, bool)) or v is None:
            out[k] = v
        elif isinstance(v, list) and len(v) <= 64 and all(isinstance(x, (str, int, float, bool)) for x in v):
            out[k] = list(v)
        elif k == "quantization_config" and isinstance(v, dict):
            out[k] = v
    return out
