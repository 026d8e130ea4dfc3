"""Every kernel the wrapper launches compiles for every architecture arch.py lets it run on
(sm_80, sm_90, sm_100, sm_120), with the configs that architecture gets, on any machine: no GPU
needed, so CI catches a path allowed where it does not build, and a Triton release that renames
or drops a builtin the kernels use (as one renamed the TMA load and the CTA barrier;
kernels/compat.py).

The launches are the wrapper's own: grouped_mxfp4_moe runs on CPU tensors with the device
answered as the architecture under test (arch.for_capability), and each launch (Triton and Gluon)
is recorded instead of run, then compiled for that architecture with the argument types,
constexprs and compile options it was given. The configs: each architecture's heuristic
defaults at the batch sizes of the benchmark, for both shipped model shapes, in both output
modes; on sm_90 also every entry of the shipped tuned H200 files.
"""
import dataclasses
import inspect
import json
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
triton = pytest.importorskip("triton", reason="triton is not installed")

try:
    from triton.experimental.gluon._runtime import GluonJITFunction
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction, mangle_type
except ImportError as e:  # pragma: no cover - depends on the installed Triton
    pytest.skip(f"this Triton has no Gluon runtime ({e})", allow_module_level=True)

from refimpl_data import make_problem  # noqa: E402
from reference_impl import arch as arch_mod, configs as cfgs, grouped_mxfp4_moe, moe, wgmma_path  # noqa: E402

if moe._decode_mma is None or moe._decode_tma is None or wgmma_path._k is None:
    pytest.skip("this Triton lacks Gluon's Hopper modules", allow_module_level=True)

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
SHAPES = {"E=256,N=2048": dict(E=256, H=4096, I=2048, topk=8, rsf=2.5, clamp=None),
          "E=128,N=2880": dict(E=128, H=2880, I=2880, topk=4, rsf=None, clamp=7.0)}
MS = (1, 4, 16, 64, 256, 1024, 4096)
OPTIONS = ("num_warps", "num_stages", "maxnreg")  # compile options among a launch's keywords
ARCHS = [arch_mod.for_capability(cc) for cc in arch_mod.COMPILED]


def _tuned():
    """(label, shape, M, config) for every entry of the shipped H200 config files."""
    out = []
    for name in sorted(os.listdir(cfgs.CONFIG_DIR)):
        key = name.split(",device_name=")[0]
        if "NVIDIA_H200" not in name or key not in SHAPES:
            continue
        with open(os.path.join(cfgs.CONFIG_DIR, name)) as f:
            for m, c in json.load(f).items():
                out.append((f"{key}/M={m}", SHAPES[key], int(m), c))
    return out


def _configs_for(a):
    """(label, shape, M, config, deterministic) the architecture gets: its defaults at every M of
    both shapes (deterministic at M = 16 too), and on sm_90 the tuned files' entries."""
    out = []
    for key, s in SHAPES.items():
        for M in MS:
            c = cfgs.default_config(M, s["E"], s["topk"], s["H"], s["I"], a, arch_mod.H200_LIKE)
            out.append((f"{key}/M={M}/default", s, M, c, False))
            if M == 16:
                out.append((f"{key}/M={M}/default/det", s, M, c, True))
    if a.wgmma:
        out += [(label + "/tuned", s, M, c, False) for label, s, M, c in _tuned()]
    if a.fused:  # the one-launch decode path (kernels/decode_fused.py), both output modes
        for key, s in SHAPES.items():
            for M, q, nw in ((1, 1, 2), (4, 2, 2), (16, 1, 4)):
                c = {"path": "mma", "gemm1": {"Q": q, "num_warps": nw, "tma": 2},
                     "gemm2": {"Q": q, "num_warps": nw, "atom_vec": 8, "tma": 2}, "pdl": True,
                     "fused": {"ctas_per_sm": 8}}
                out.append((f"{key}/M={M}/fused", s, M, c, M == 4))
        c = {"path": "mma", "gemm1": {"Q": 1, "num_warps": 2, "tma": 2},  # experimental: items block by block
             "gemm2": {"Q": 1, "num_warps": 2, "atom_vec": 8, "tma": 2}, "pdl": True,
             "fused": {"ctas_per_sm": 8, "order": 1}}
        out.append(("E=256,N=2048/M=1/fused/order1", SHAPES["E=256,N=2048"], 1, c, False))
    return out


def _encode(v):
    """A launch argument for the compile job: its type where it is a runtime tensor or descriptor."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return {"v": v}
    return {"t": mangle_type(v)}


def _record_launches(monkeypatch, a, shape, M, cfg, det):
    """Every launch grouped_mxfp4_moe makes for cfg on architecture a, recorded, not run:
    (module, kernel name, bound arguments, compile options)."""
    launches = []

    def record(self, *args, grid, warmup, **kwargs):
        fn = self.fn
        names = list(inspect.signature(fn).parameters)
        bound = dict(zip(names, args))
        bound.update({k: v for k, v in kwargs.items() if k in names})
        launches.append({"module": fn.__module__, "name": fn.__name__, "args": {k: _encode(v) for k, v in bound.items()},
                         "opts": {k: v for k, v in kwargs.items() if k in OPTIONS}})

    monkeypatch.setattr(GluonJITFunction, "run", record)
    monkeypatch.setattr(JITFunction, "run", record)
    monkeypatch.setattr(InterpretedFunction, "run", record)
    # CPU tensors pass the validation as under the interpreter; every other question about the
    # device is answered as `a` would
    validate = moe._validate

    def validate_on_cpu(*args):
        monkeypatch.setattr(moe, "_interpreting", lambda: True)
        try:
            return validate(*args)
        finally:
            monkeypatch.setattr(moe, "_interpreting", lambda: False)

    monkeypatch.setattr(moe, "_validate", validate_on_cpu)
    monkeypatch.setattr(moe, "_interpreting", lambda: False)
    monkeypatch.setattr(moe, "_device_arch", lambda dev: a)
    monkeypatch.setattr(arch_mod, "for_device", lambda dev, env=True: a)
    monkeypatch.setattr(moe, "_props", lambda dev: arch_mod.H200_LIKE)
    monkeypatch.setattr(wgmma_path, "usable",
                        lambda c, dev: c.get("path") == "wgmma" and (wgmma_path.check_config(c) or True) and a.wgmma)
    monkeypatch.setattr(moe, "_mma_path",
                        lambda c, dev: c.get("path") == "mma" and (moe.check_mma_config(c) or True) and a.mma)
    E = 4  # the shapes that set the kernels' constexprs are H and I; a few experts keep it small
    p = make_problem(min(M, 64), E, shape["H"], shape["I"], min(shape["topk"], E), device="cpu", seed=M)
    grouped_mxfp4_moe(**p, routed_scaling_factor=shape["rsf"], clamp_limit=shape["clamp"], config=cfg,
                      deterministic=det)
    return launches


# Compiled in child processes without TRITON_INTERPRET: the interpreter, once it has run a kernel
# in a process (the CPU tests before), leaves Triton's language patched for itself
_COMPILER = """
import importlib, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction
from triton.runtime.jit import mangle_type
jobs, out, cc = json.loads(sys.stdin.read()), sys.argv[1], int(sys.argv[2])
for i, j in enumerate(jobs):
    fn = getattr(importlib.import_module(j["module"]), j["name"])
    sig, consts = {}, {}
    for p in fn.params:
        a = j["args"].get(p.name, {"v": p.default if p.has_default else None})
        v = a.get("v")
        if p.is_constexpr or ("t" not in a and v is None):
            sig[p.name] = "constexpr"
            consts[p.name] = v
        else:
            sig[p.name] = a["t"] if "t" in a else mangle_type(v)
    src = (GluonASTSource if isinstance(fn, GluonJITFunction) else ASTSource)(fn=fn, signature=sig, constexprs=consts)
    try:
        k = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=j["opts"])
    except Exception as e:
        sys.stderr.write(f"FAILED {j['name']} {json.dumps(j['args'])[:400]} opts={j['opts']}: {str(e)[-1500:]}\\n")
        sys.exit(1)
    open(f"{out}/{i}.cubin", "wb").write(k.asm["cubin"])
"""


def _compile(jobs, tmp_path, cc):
    """Compile the jobs for compute capability cc (e.g. 90) in a clean child process -> (SASS,
    resource usage) each."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")  # a fresh compile, not an earlier run's
    r = subprocess.run([sys.executable, "-c", _COMPILER, str(tmp_path), str(cc)], input=json.dumps(jobs), env=env,
                       capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, f"compiling for sm_{cc} failed:\n" + "\n".join(
        line for line in r.stderr.splitlines() if "leaked" not in line)[-3000:]
    out = []
    for i in range(len(jobs)):
        path = str(tmp_path / f"{i}.cubin")
        run = lambda *a: subprocess.run([CUOBJDUMP, *a, path], capture_output=True, text=True).stdout  # noqa: E731
        out.append((run("-sass"), run("-res-usage")))
    return out


def _expected_gemms(a, cfg):
    """The two GEMM kernels a config should launch on a."""
    path = cfg.get("path", "dot")
    if path == "mma" and a.mma and cfg.get("fused") is not None and a.fused:
        return []  # one kernel: decode_fused_kernel
    if path == "mma" and a.mma:
        return [("decode_gemm1_swiglu_tma_kernel" if cfg["gemm1"].get("tma") else "decode_gemm1_swiglu_kernel"),
                ("decode_gemm2_combine_tma_kernel" if cfg["gemm2"].get("tma") else "decode_gemm2_combine_kernel")]
    if path == "wgmma" and a.wgmma:
        return [("prefill_gemm1_ws_kernel" if cfg["gemm1"].get("ws") else "prefill_gemm1_swiglu_kernel"),
                ("prefill_gemm2_ws_kernel" if cfg["gemm2"].get("ws") else "prefill_gemm2_combine_kernel")]
    return ["gemm1_swiglu_kernel", "gemm2_combine_kernel"]


@pytest.mark.parametrize("a", ARCHS, ids=[x.name for x in ARCHS])
def test_every_launched_kernel_compiles_for_its_architecture(monkeypatch, tmp_path, a):
    jobs, seen = [], set()
    for label, shape, M, cfg, det in _configs_for(a):
        # the defaults (and tuned files) of an architecture name only paths it may run
        cfgs.validate(cfg, a, label)
        launches = _record_launches(monkeypatch, a, shape, M, cfg, det)
        names = [j["name"] for j in launches]
        gemms = [n for n in names if "gemm" in n]
        assert gemms == _expected_gemms(a, cfg), (label, names)
        if cfg.get("fused") is not None:
            assert names[0] == "decode_fused_kernel", (label, names)
        if det:
            assert names[-1] == "reduce_topk_kernel", (label, names)
        for j in launches:
            key = json.dumps(j, sort_keys=True)
            if key not in seen:
                seen.add(key)
                jobs.append(j)
    cc = a.capability[0] * 10 + a.capability[1]
    for j, (sass, res) in zip(jobs, _compile(jobs, tmp_path, cc)):
        name = j["name"]
        assert sass.strip(), f"{name}: no SASS for sm_{cc}"
        if "gemm" in name:
            assert "HMMA" in sass or "HGMMA" in sass, f"{name}: no tensor-core MMA in the SASS"
        if name.startswith("decode"):
            # the decode GEMMs keep everything in registers: a spill would cost more than it saves
            assert re.search(r"STACK:0\b", res), f"{name} spills on sm_{cc}: {res.strip()}"
        if name == "decode_fused_kernel":
            assert "HMMA" in sass and "UTMALDG" in sass and "LDS.128" in sass, name
        if name.endswith("_tma_kernel"):
            # weights arrive by TMA and are read back with 128-bit shared loads
            assert "UTMALDG" in sass and "LDS.128" in sass, name
        if name.startswith("prefill_gemm"):
            assert "HGMMA" in sass, name


def test_tuned_files_launch_their_paths_on_sm90(monkeypatch):
    """Each tuned H200 entry launches its own path's two GEMMs on sm_90 (nothing of another)."""
    a = arch_mod.for_capability((9, 0))
    for label, shape, M, cfg in _tuned():
        names = [j["name"] for j in _record_launches(monkeypatch, a, shape, M, cfg, False)]
        assert [n for n in names if "gemm" in n] == _expected_gemms(a, cfg), (label, names)
        assert _expected_gemms(a, cfg)[0].startswith("decode" if cfg["path"] == "mma" else "prefill")


def test_arch_rows_say_what_the_compile_test_checks():
    """wgmma on sm_90 only; the decode path on sm_90+; nothing Gluon on sm_80; bf16 atomics sm_90+;
    below sm_80 (or a major with no row) unsupported."""
    rows = {x.capability: x for x in ARCHS}
    assert [cc for cc, x in rows.items() if x.wgmma] == [(9, 0)]
    assert not rows[(8, 0)].mma and not rows[(8, 0)].fast_dequant and not rows[(8, 0)].bf16_atomics
    assert all(rows[cc].mma and rows[cc].bf16_atomics for cc in ((9, 0), (10, 0), (12, 0)))
    assert arch_mod.for_capability((8, 6)).paths() == ("dot",)
    assert arch_mod.for_capability((12, 1)).paths() == ("dot", "mma")
    for bad in ((7, 5), (11, 0), (13, 0)):
        with pytest.raises(arch_mod.UnsupportedArch, match=f"{bad[0]}.{bad[1]}"):
            arch_mod.for_capability(bad)
    # the interpreter runs the tl.dot kernels only
    assert arch_mod.INTERPRETER.paths() == ("dot",) and not dataclasses.asdict(arch_mod.INTERPRETER)["mma"]
