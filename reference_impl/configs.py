"""Kernel configs as data: one JSON file per (experts, intermediate size, device),
named like SGLang's tuned MoE configs, mapping batch size M -> config.

  configs/E=256,N=2048,device_name=NVIDIA_H200,dtype=mxfp4.json
  {"1": {"BLOCK_M": 16, "gemm1": {"BLOCK_N": 32, "BLOCK_K": 256, "num_warps": 4, "num_stages": 4},
         "gemm2": {...}}, "64": {...}, ...}

The entry whose M is nearest (ties -> smaller) is used; with no file, default_config().
"""
from __future__ import annotations

import functools
import json
import os
from typing import Optional

CONFIG_DIR = os.path.join(os.path.dirname(__file__), "configs")


def config_file_name(E: int, N: int, device_name: str) -> str:
    return f"E={E},N={N},device_name={device_name.replace(' ', '_')},dtype=mxfp4.json"


@functools.lru_cache(maxsize=None)
def _load(path: str) -> Optional[dict]:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return {int(k): v for k, v in json.load(f).items()}


def default_config(M: int, E: int, topk: int, H: int, I: int) -> dict:
    rows_per_expert = M * topk / max(1, min(E, M * topk))
    if rows_per_expert <= 16:
        bm = 16
    elif rows_per_expert <= 48:
        bm = 32
    elif rows_per_expert <= 96:
        bm = 64
    else:
        bm = 128
    if bm <= 32:
        g1 = {"BLOCK_N": 32, "BLOCK_K": 256, "num_warps": 4, "num_stages": 4}
        g2 = {"BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 4}
    else:
        g1 = {"BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
        g2 = {"BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
    return {"BLOCK_M": bm, "gemm1": g1, "gemm2": g2}


def reg_cap(gemm_cfg: dict) -> dict:
    """The launch option capping a kernel's registers a thread, where a GEMM's config names one
    ("maxnreg"), else none."""
    return {"maxnreg": gemm_cfg["maxnreg"]} if gemm_cfg.get("maxnreg") is not None else {}


def get_config(M: int, E: int, topk: int, H: int, I: int, device_name: Optional[str]) -> dict:
    if device_name:
        table = _load(os.path.join(CONFIG_DIR, config_file_name(E, I, device_name)))
        if table:
            key = min(table, key=lambda k: (abs(k - M), k))
            return table[key]
    return default_config(M, E, topk, H, I)
