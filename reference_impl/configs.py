"""Kernel configs as data: one JSON file per (experts, intermediate size, device), named like
SGLang's tuned MoE configs, mapping batch size M -> config.

  E=256,N=2048,device_name=NVIDIA_H200,dtype=mxfp4.json
  {"1": {"path": "mma", "gemm1": {...}, "gemm2": {...}, "pdl": true}, "4096": {"path": "wgmma", ...}}

Where the files are looked for, first match wins:
  1. the user folder: $REFIMPL_CONFIG_DIR, else $XDG_CACHE_HOME/reference_impl/configs
     (~/.cache/reference_impl/configs); `python -m reference_impl.tune` writes there;
  2. the bundled folder (configs/ beside this module).
The entry whose M is nearest (ties -> smaller) is used; the wrapper resolves it once per
(M, shape, device, output mode) in a process (moe._PLANS), so a file written later in the same process
applies to shapes not yet run there. A file is checked whole when first read:
an entry the kernels cannot take, or one naming a path this GPU cannot run (arch.py), is a
ValueError naming the file and the key, never a silent fallback. With no file:
default_config(), heuristics on the shape and the device (SM count, shared memory, capability).

Paths ("path" in a config): "dot" (or absent) the tl.dot kernels, "mma" the Gluon decode path,
"wgmma" the Gluon prefill path. Experimental knobs (no shipped or default config uses them; kept
for the measurements bench/NOTES.md cites): "scale_vec" (dot), "PF" and "CREGS" (wgmma).
"""
from __future__ import annotations

import json
import math
import os
from typing import Optional

from . import arch as _arch

CONFIG_DIR = os.path.join(os.path.dirname(__file__), "configs")
PATHS = ("dot", "mma", "wgmma")


def user_config_dir() -> str:
    d = os.environ.get("REFIMPL_CONFIG_DIR")
    if d:
        return d
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "reference_impl", "configs")


def config_file_name(E: int, N: int, device_name: str) -> str:
    return f"E={E},N={N},device_name={device_name.replace(' ', '_')},dtype=mxfp4.json"


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _pow2(v) -> bool:
    return _is_int(v) and v > 0 and v & (v - 1) == 0


def check_dot_config(cfg: dict) -> None:
    """The tl.dot kernels' config: BLOCK_M (16..256), per GEMM BLOCK_N / BLOCK_K (powers of two,
    BLOCK_K a multiple of 32: whole scale groups), num_warps (1..16), num_stages (1..8)."""
    bad = []
    bm = cfg.get("BLOCK_M")
    if not (_pow2(bm) and 16 <= bm <= 256):
        bad.append(f"BLOCK_M={bm} (a power of two in 16..256)")
    for g in ("gemm1", "gemm2"):
        c = cfg.get(g)
        if not isinstance(c, dict):
            bad.append(f"{g}={c} (an object)")
            continue
        if not (_pow2(c.get("BLOCK_N")) and 16 <= c["BLOCK_N"] <= 256):
            bad.append(f"{g}.BLOCK_N={c.get('BLOCK_N')} (a power of two in 16..256)")
        if not (_pow2(c.get("BLOCK_K")) and 32 <= c["BLOCK_K"] <= 512):
            bad.append(f"{g}.BLOCK_K={c.get('BLOCK_K')} (a power of two in 32..512)")
        if not (_pow2(c.get("num_warps")) and c["num_warps"] <= 16):
            bad.append(f"{g}.num_warps={c.get('num_warps')} (1, 2, 4, 8 or 16)")
        if not (_is_int(c.get("num_stages")) and 1 <= c["num_stages"] <= 8):
            bad.append(f"{g}.num_stages={c.get('num_stages')} (1..8)")
    if bad:
        raise ValueError("config: the tl.dot path (\"dot\") cannot take " + "; ".join(bad))


def check_mma_config(cfg: dict) -> None:
    """A decode-path config the kernels cannot take is an error, not a silent fallback: Q
    tiles of 16 rows a program (1 or 2: the sizes tested on the GPU), a power-of-two warp
    count (1..8), an optional register cap a thread ("maxnreg": fewer registers, more resident
    warps), the weights through a TMA ring of 2..6 shared-memory stages ("tma", kernels/decode_tma.py;
    0 or absent: direct loads) with its scales (and activations) loaded a step ahead or not ("ahead"), the
    down GEMM's epilogue width (2: bf16 pairs, 8: 16-byte vectors),
    and whether the GEMMs are launched as programmatic dependents ("pdl"). Experimental (in no
    shipped or default config; slower on the H200, bench/NOTES.md v16): the gate/up GEMM prefetching
    the down weights into L2 ("l2" 1..4 in gemm1, gluon_common._PF_ASM; "l2_at": the step that
    issues it, TMA form only)."""
    bad = []
    for g in ("gemm1", "gemm2"):
        c = cfg.get(g, {})
        if c.get("Q", 1) not in (1, 2):
            bad.append(f"{g}.Q={c.get('Q')} (1 or 2)")
        if c.get("num_warps", 4) not in (1, 2, 4, 8):
            bad.append(f"{g}.num_warps={c.get('num_warps')} (1, 2, 4 or 8)")
        mr = c.get("maxnreg")
        if mr is not None and not (isinstance(mr, int) and not isinstance(mr, bool) and 32 <= mr <= 255):
            bad.append(f"{g}.maxnreg={mr} (registers a thread, 32..255)")
        st = c.get("tma", 0)
        if not (isinstance(st, int) and not isinstance(st, bool) and st in (0, 2, 3, 4, 5, 6)):
            bad.append(f"{g}.tma={st} (0: direct loads, or 2..6 ring stages)")
        ah = c.get("ahead", 0)
        if not (isinstance(ah, int) and not isinstance(ah, bool) and ah in (0, 1, 2)):
            bad.append(f"{g}.ahead={ah} (0, 1: the scales, 2: the scales and activations, a step ahead)")
        elif ah and not st:
            bad.append(f"{g}.ahead without tma (only the TMA form loads operands a step ahead)")
    c1 = cfg.get("gemm1", {})
    l2, at = c1.get("l2", 0), c1.get("l2_at", 0)
    if not (_is_int(l2) and l2 in (0, 1, 2, 3, 4)):
        bad.append(f"gemm1.l2={l2} (0: off; the down weights prefetched into L2 by bulk requests, 1 plain, 2 "
                   "evict_last, or by line prefetches, 3 evict_last, 4 evict_normal)")
    if not (_is_int(at) and 0 <= at <= 64):
        bad.append(f"gemm1.l2_at={at} (the gate/up step that issues the prefetch, 0..64)")
    elif at and not c1.get("tma", 0):
        bad.append("gemm1.l2_at without tma (the direct-load form prefetches at its start)")
    if "l2" in cfg.get("gemm2", {}) or "l2_at" in cfg.get("gemm2", {}):
        bad.append("gemm2.l2 (the gate/up GEMM prefetches the down weights: gemm1.l2)")
    if cfg.get("pdl", False) not in (True, False):
        bad.append(f"pdl={cfg.get('pdl')} (true or false)")
    fu = cfg.get("fused")
    if fu is not None:
        if not isinstance(fu, dict):
            bad.append(f"fused={fu!r} (an object: ctas_per_sm, maxnreg)")
        else:
            c1, c2 = cfg.get("gemm1", {}), cfg.get("gemm2", {})
            if not (c1.get("tma") and c2.get("tma")):
                bad.append("fused without tma in both GEMMs (the one-launch kernel streams both through TMA rings)")
            if c1.get("num_warps", 4) != c2.get("num_warps", 4):
                bad.append("fused with gemm1.num_warps != gemm2.num_warps (one kernel, one warp count)")
            if c1.get("ahead", 0) or c2.get("ahead", 0):
                bad.append("fused with ahead (the one-launch kernel loads operands at their step)")
            cps = fu.get("ctas_per_sm", 8)
            if not (_is_int(cps) and 1 <= cps <= 32):
                bad.append(f"fused.ctas_per_sm={cps} (1..32 programs an SM in the persistent grid)")
            mr = fu.get("maxnreg")
            if mr is not None and not (_is_int(mr) and 32 <= mr <= 255):
                bad.append(f"fused.maxnreg={mr} (registers a thread, 32..255)")
            if fu.get("order", 0) not in (0, 1):
                bad.append(f"fused.order={fu.get('order')} (0: gate/up items first, 1: block by block)")
            if set(fu) - {"ctas_per_sm", "maxnreg", "order"}:
                bad.append(f"fused: unknown keys {sorted(set(fu) - {'ctas_per_sm', 'maxnreg', 'order'})}")
    if cfg.get("gemm2", {}).get("atom_vec", 2) not in (2, 8):
        bad.append(f"gemm2.atom_vec={cfg['gemm2'].get('atom_vec')} (2 or 8)")
    elif cfg.get("gemm2", {}).get("tma") and cfg["gemm2"].get("atom_vec", 2) != 8:
        bad.append("gemm2.tma with atom_vec 2 (the TMA form has the 16-byte epilogue only: atom_vec 8)")
    if bad:
        raise ValueError("config: the decode path (\"mma\") cannot take " + "; ".join(bad))


def token_parts(cfg: dict) -> tuple:
    """The three token parts of a block (T0, T1, BLOCK_M - T0 - T1): "parts" [T0, T1] in the
    config, else quarters, quarters, half."""
    bn = cfg["BLOCK_M"]
    t0, t1 = cfg.get("parts", (bn // 4, bn // 4))
    return int(t0), int(t1), bn - int(t0) - int(t1)


def _boxes(cfg: dict) -> tuple:
    """Token rows of the two TMA boxes a B stage is loaded with: parts 0 + 1, and part 2."""
    t0, t1, t2 = token_parts(cfg)
    return t0 + t1, t2


def check_wgmma_config(cfg: dict) -> None:
    """BLOCK_M: the MMA's token dim (a TMA box of at most 256 rows, whole 16-row slabs for the
    gather), split in three parts that wgmma needs as multiples of 8 (and registers bound from
    above); num_warps: one or two warpgroups; STAGES >= 2."""
    bad = []
    bn = cfg.get("BLOCK_M")
    if not isinstance(bn, int) or not 32 <= bn <= 256 or bn % 16:
        bad.append(f"BLOCK_M={bn} (a multiple of 16 in 32..256)")
    elif not isinstance(cfg.get("parts", []), (list, tuple)) or len(cfg.get("parts", [0, 0])) != 2:
        bad.append(f"parts={cfg.get('parts')} ([T0, T1]: the first two token parts)")
    elif any(t <= 0 or t % 8 for t in token_parts(cfg)) or not all(_pow2(t) for t in _boxes(cfg)):
        bad.append(f"parts={cfg.get('parts')} with BLOCK_M={bn} (three parts, each a positive multiple of 8; "
                   "the first two and the third each a power of two in all)")
    for g in ("gemm1", "gemm2"):
        c = cfg.get(g, {})
        if c.get("num_warps", 4) not in (4, 8):
            bad.append(f"{g}.num_warps={c.get('num_warps')} (4 or 8)")
        if int(c.get("STAGES", 4)) < 2 or c.get("PF", 1) not in (1, 2):
            bad.append(f"{g}: STAGES={c.get('STAGES')} (>= 2), PF={c.get('PF')} (1 or 2)")
        if c.get("atom_vec", 2) not in (2, 8):
            bad.append(f"{g}.atom_vec={c.get('atom_vec')} (2 or 8)")
        if c.get("ws") not in (None, 2, 3, 4):
            bad.append(f"{g}.ws={c.get('ws')} (2, 3 or 4 warpgroup partitions)")
        elif c.get("ws") and not 1 <= c.get("LAG", 1) < int(c.get("STAGES", 4)):
            bad.append(f"{g}.LAG={c.get('LAG')} (1 .. STAGES - 1)")
    if bad:
        raise ValueError("config: the prefill path (\"wgmma\") cannot take " + "; ".join(bad))


def validate(cfg, arch: _arch.Arch, source: str = "config") -> None:
    """A config the kernels cannot take, or whose path `arch` may not run: ValueError starting with
    `source` (the file and key, or "config"). Under the interpreter (arch.INTERPRETER) every
    path is let through: its kernels are checked, and the wrapper runs the tl.dot kernels."""
    if not isinstance(cfg, dict):
        raise ValueError(f"{source}: {cfg!r} is not an object")
    path = cfg.get("path", "dot")
    try:
        if path == "mma":
            check_mma_config(cfg)
        elif path == "wgmma":
            check_wgmma_config(cfg)
        elif path == "dot":
            check_dot_config(cfg)
        else:
            raise ValueError(f"path={path!r} (one of {', '.join(PATHS)})")
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    if arch is _arch.INTERPRETER:
        return
    if path not in arch.paths():
        raise ValueError(f"{source}: path={path!r}: {arch.name} cannot run it (it may run {', '.join(arch.paths())})")
    if path == "mma" and not arch.mma_tma:
        for g in ("gemm1", "gemm2"):
            if cfg[g].get("tma"):
                why = ""
                if arch.capability and not _arch.tma_native(arch.capability):
                    v = _arch.ptxas_version(arch.capability[0] * 10 + arch.capability[1])
                    why = (f" (with this Triton's ptxas {'%d.%d' % v if v else '(unknown)'}: its TMA copies need "
                           "ptxas 13.0+ there)")
                raise ValueError(f"{source}: {g}.tma={cfg[g]['tma']}: {arch.name} cannot run the decode path's TMA "
                                 f"form{why}")


_TABLES: dict = {}


def load_table(path: str, arch: _arch.Arch) -> Optional[dict]:
    """The file's table {M: config}, every entry checked against arch (cached by path, mtime and
    arch); None if there is no file."""
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return None
    key = (path, mtime, arch)
    if key in _TABLES:
        return _TABLES[key]
    try:
        with open(path) as f:
            raw = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: expected an object mapping batch sizes to configs")
    table = {}
    for k, v in raw.items():
        try:
            m = int(k)
        except ValueError:
            m = 0
        if m <= 0 or str(m) != k.strip():
            raise ValueError(f"{path}: key {k!r} is not a positive batch size")
        validate(v, arch, f"{path}: key {k!r}")
        table[m] = v
    _TABLES[key] = table
    return table


def find_config_file(E: int, I: int, device_name: str) -> Optional[str]:
    """The config file for this shape and device: the user folder's, else the bundled one."""
    name = config_file_name(E, I, device_name)
    for d in (user_config_dir(), CONFIG_DIR):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    return None


def _dot_default(M: int, E: int, topk: int) -> dict:
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


def _mma_default(M: int, E: int, topk: int, H: int, I: int, a: _arch.Arch, props: _arch.DeviceProps) -> dict:
    """Decode path: 8-token blocks, Q tiles of 16 rows a program. Enough programs to fill the GPU
    several times over come first: one tile a program (Q = 1) until the experts touched times
    the tiles of two (Q = 2) reach 16 programs an SM, then two (fewer re-reads of the 8 tokens'
    activations). Four warps share K where few programs run and K splits into whole 4-warp
    chunks, else two; the down GEMM with two tiles, one warp (more programs resident)."""
    used = min(E, M * topk)
    target = 16 * props.sm_count

    def gemm(N, K):
        q = 2 if used * math.ceil(N / 32) >= target else 1
        nw = 4 if used * math.ceil(N / 16) < target // 2 and K % 512 == 0 else 2
        return q, nw

    q1, nw1 = gemm(I, H)
    q2, nw2 = gemm(H, I)
    if q2 == 2:
        nw2 = 1
    tma = 2 if a.mma_tma else 0
    g1 = {"Q": q1, "num_warps": nw1}
    g2 = {"Q": q2, "num_warps": nw2, "atom_vec": 8}
    if tma:
        # the ring (2 stages of 16 Q rows x 16 NW words, x2 for gate/up) is far below any smem limit
        g1["tma"] = g2["tma"] = tma
    return {"path": "mma", "gemm1": g1, "gemm2": g2, "pdl": True}


def _wgmma_default(M: int, E: int, topk: int, props: _arch.DeviceProps) -> dict:
    """Prefill path. Up to ~96 tokens an expert: 64-token blocks, the plain kernels. Beyond: the
    warp-specialized kernels with a block large enough that most experts (the mean plus two
    standard deviations of a random routing's count) fit in one: 128 + 16 or 128 + 32 tokens
    (three parts), four warpgroups up to 144 tokens, three at 160 (registers)."""
    used = min(E, M * topk)
    r = M * topk / used
    if r <= 96:
        return {"path": "wgmma", "BLOCK_M": 64, "gemm1": {"STAGES": 3, "num_warps": 4},
                "gemm2": {"STAGES": 3, "num_warps": 4, "atom_vec": 8}}
    want = r + 2 * math.sqrt(r)
    bm, cw, parts = (128, 4, None) if want <= 128 else (144, 4, [64, 64]) if want <= 144 else (160, 3, [64, 64])
    stages = 4
    while stages > 2 and stages * bm * 64 * 2 > props.smem_per_block // 2:  # the B ring: bm rows x 64 bf16
        stages -= 1
    g = {"STAGES": stages, "ws": cw, "LAG": 1}
    cfg = {"path": "wgmma", "BLOCK_M": bm, "gemm1": dict(g), "gemm2": {**g, "atom_vec": 8}}
    if parts:
        cfg["parts"] = parts
    return cfg


def default_config(M: int, E: int, topk: int, H: int, I: int, arch: Optional[_arch.Arch] = None,
                   props: Optional[_arch.DeviceProps] = None) -> dict:
    """The config with no tuned file: the decode path where few tokens share an expert (<= 16
    rows an expert touched) and the architecture runs it, the prefill path beyond where it
    runs that, else the tl.dot kernels. arch None: the tl.dot kernels (the interpreter's)."""
    a = arch or _arch.INTERPRETER
    p = props or _arch.H200_LIKE
    r = M * topk / max(1, min(E, M * topk))
    if a.mma and r <= 16:
        return _mma_default(M, E, topk, H, I, a, p)
    if a.wgmma and r > 16:
        return _wgmma_default(M, E, topk, p)
    return _dot_default(M, E, topk)


def reg_cap(gemm_cfg: dict) -> dict:
    """The launch option capping a kernel's registers a thread, where a GEMM's config names one
    ("maxnreg"), else none."""
    return {"maxnreg": gemm_cfg["maxnreg"]} if gemm_cfg.get("maxnreg") is not None else {}


def get_config(M: int, E: int, topk: int, H: int, I: int, device_name: Optional[str],
               arch: Optional[_arch.Arch] = None, props: Optional[_arch.DeviceProps] = None) -> dict:
    """The config of the nearest M in this device's file (user folder first), else the defaults."""
    a = arch or _arch.INTERPRETER
    if device_name:
        path = find_config_file(E, I, device_name)
        table = load_table(path, a) if path else None
        if table:
            key = min(table, key=lambda k: (abs(k - M), k))
            return table[key]
    return default_config(M, E, topk, H, I, a, props)
