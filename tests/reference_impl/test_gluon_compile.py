"""The Gluon kernels (decode and prefill paths) compile for sm_90 with the installed Triton, on
any machine: no GPU needed, so CI catches a Triton release that renames or drops a builtin the
kernels use (as one renamed the TMA load and the CTA barrier; kernels/compat.py).

The launches are the wrapper's own: grouped_mxfp4_moe runs on CPU tensors with the device
checks answered as on an H200, and each Gluon launch is recorded instead of run, then compiled
for sm_90 with the argument types and constexprs it was given. The configs are the tuned H200
ones of both shipped models, so every kernel variant those configs select is compiled.
"""
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
from reference_impl import configs as cfgs, grouped_mxfp4_moe, moe, wgmma_path  # noqa: E402

if moe._decode_mma is None or moe._decode_tma is None or wgmma_path._k is None:
    pytest.skip("this Triton lacks Gluon's Hopper modules", allow_module_level=True)

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
SHAPES = {"E=256,N=2048": dict(H=4096, I=2048, topk=8, rsf=2.5, clamp=None),
          "E=128,N=2880": dict(H=2880, I=2880, topk=4, rsf=None, clamp=7.0)}
OPTIONS = ("num_warps", "num_stages", "maxnreg")  # compile options among a launch's keywords


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


def _record_launches(monkeypatch, shape, M, cfg):
    """The Gluon launches grouped_mxfp4_moe makes for cfg, answered as an sm_90 device would be."""
    launches = []

    def record(self, *args, grid, warmup, **kwargs):
        launches.append((self, args, kwargs))

    monkeypatch.setattr(GluonJITFunction, "run", record)
    # the routing's Triton kernels are not needed to compile the GEMMs: not run either (neither
    # interpreted nor launched), which keeps the test off the interpreter and off any device
    monkeypatch.setattr(JITFunction, "run", lambda self, *a, **k: None)
    monkeypatch.setattr(InterpretedFunction, "run", lambda self, *a, **k: None)
    # not interpreting, so the output mode is the device's (bf16 atomics); CPU tensors are let
    # through the validation, as under the interpreter
    validate = moe._validate

    def validate_on_cpu(*a):
        monkeypatch.setattr(moe, "_interpreting", lambda: True)
        try:
            return validate(*a)
        finally:
            monkeypatch.setattr(moe, "_interpreting", lambda: False)

    monkeypatch.setattr(moe, "_validate", validate_on_cpu)
    monkeypatch.setattr(moe, "_interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(moe, "_mma_path", lambda c, dev: c.get("path") == "mma" and (moe.check_mma_config(c) or True))
    monkeypatch.setattr(wgmma_path, "usable",
                        lambda c, dev: c.get("path") == "wgmma" and (wgmma_path.check_config(c) or True))
    E = 4  # the shapes that set the kernels' constexprs are H and I; a few experts keep it small
    p = make_problem(min(M, 64), E, shape["H"], shape["I"], min(shape["topk"], E), device="cpu", seed=M)
    grouped_mxfp4_moe(**p, routed_scaling_factor=shape["rsf"], clamp_limit=shape["clamp"], config=cfg)
    return launches


def _job(fn, args, kwargs):
    """One recorded launch as a compile job: the kernel's module and name, its argument types,
    its constexprs and its compile options."""
    names = [p.name for p in fn.params]
    bound = dict(zip(names, args))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    sig, consts = {}, {}
    for p in fn.params:
        v = bound.get(p.name, p.default if p.has_default else None)
        if p.is_constexpr or v is None:
            sig[p.name] = "constexpr"
            consts[p.name] = v
        else:
            sig[p.name] = mangle_type(v)
    return {"module": fn.fn.__module__, "name": fn.fn.__name__, "sig": sig, "consts": consts,
            "opts": {k: v for k, v in kwargs.items() if k in OPTIONS}}


# Compiled in a child process without TRITON_INTERPRET: the interpreter, once it has run a kernel
# in a process (the routing here, the CPU tests before), leaves Triton's language patched for itself
_COMPILER = """
import importlib, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
jobs, out = json.loads(sys.stdin.read()), sys.argv[1]
for i, j in enumerate(jobs):
    fn = getattr(importlib.import_module(j["module"]), j["name"])
    k = triton.compile(GluonASTSource(fn=fn, signature=j["sig"], constexprs=j["consts"]),
                       target=GPUTarget("cuda", 90, 32), options=j["opts"])
    open(f"{out}/{i}.cubin", "wb").write(k.asm["cubin"])
"""


def _compile(jobs, tmp_path):
    """Compile the jobs for sm_90 in a clean child process -> (SASS, resource usage) each."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")  # a fresh compile, not an earlier run's
    r = subprocess.run([sys.executable, "-c", _COMPILER, str(tmp_path)], input=json.dumps(jobs), env=env,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, "compiling for sm_90 failed:\n" + "\n".join(
        line for line in r.stderr.splitlines() if "leaked" not in line)[-3000:]
    out = []
    for i in range(len(jobs)):
        path = str(tmp_path / f"{i}.cubin")
        run = lambda *a: subprocess.run([CUOBJDUMP, *a, path], capture_output=True, text=True).stdout  # noqa: E731
        out.append((run("-sass"), run("-res-usage")))
    return out


@pytest.mark.parametrize("label,shape,M,cfg", _tuned(), ids=[t[0] for t in _tuned()])
def test_tuned_h200_configs_compile_for_sm90(monkeypatch, tmp_path, label, shape, M, cfg):
    launches = _record_launches(monkeypatch, shape, M, cfg)
    names = [fn.fn.__name__ for fn, _, _ in launches]
    # each config launches its path's two GEMMs (and nothing of another path)
    if cfg["path"] == "mma":
        tma = [bool(cfg[g].get("tma")) for g in ("gemm1", "gemm2")]
        assert names == [("decode_gemm1_swiglu_tma_kernel" if tma[0] else "decode_gemm1_swiglu_kernel"),
                         ("decode_gemm2_combine_tma_kernel" if tma[1] else "decode_gemm2_combine_kernel")]
    else:
        assert len(names) == 2 and all(n.startswith("prefill_gemm") for n in names), names
    jobs = [_job(fn, args, kwargs) for fn, args, kwargs in launches]
    for j, (sass, res) in zip(jobs, _compile(jobs, tmp_path)):
        name = j["name"]
        assert "HMMA" in sass or "HGMMA" in sass, f"{name}: no tensor-core MMA in the SASS"
        if name.startswith("decode"):
            # the decode GEMMs keep everything in registers: a spill would cost more than it saves
            assert re.search(r"STACK:0\b", res), f"{name} spills: {res.strip()}"
        if name.endswith("_tma_kernel"):
            # weights arrive by TMA and are read back with 128-bit shared loads
            assert "UTMALDG" in sass and "LDS.128" in sass, name
