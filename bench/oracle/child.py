"""SGLang's own server-argument resolution, run inside the oracle's virtual environment.

This file is executed by the oracle's Python (never imported by recon): the SGLang release is on
PYTHONPATH, the packages its METADATA requires but that cannot be installed on a CPU machine are
stubbed (only those: a package the release does not require stays absent, so optional-package
probes answer as on a real install), and ``torch.cuda`` / NVML / ``nvidia-smi`` answer as the
device. Input is one JSON object on stdin::

    {"device": {"name", "capability": [M, m], "sm_count", "memory_mib", "cuda": "12.8"},
     "stubs": ["sgl_kernel", ...], "hide": ["kernels"], "fields": [...],
     "cells": [{"id", "model_dir", "flags": [...], "env": {...}}]}

Output: one JSON line per cell on stdout, ``{"id", "ok", "fields": {...}}`` or ``{"id", "ok": false,
"error": "..."}``. Each cell runs in a forked child so one cell's writes (environment, globals that
``ServerArgs.__post_init__`` sets) never leak into the next.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import tempfile
import traceback
import types


# --- stubs for required packages that cannot be installed here ---------------------------------


class _StubMeta(type):
    """A class that answers every attribute, call and subscript with another stub, so module-level
    ``from sgl_kernel import x``, ``@triton.jit`` and ``class A(stub.Base)`` all work."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{cls.__name__}.{name}")

    def __call__(cls, *args, **kwargs):
        # Used as a decorator (``@stub``, ``@stub(...)``): hand the function back unchanged.
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _stub_class(f"{cls.__name__}()")

    def __getitem__(cls, item):
        return _stub_class(f"{cls.__name__}[]")

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False

    def __int__(cls):
        return 0

    def __index__(cls):
        return 0

    def __or__(cls, other):
        return cls

    __ror__ = __or__


def _any_schema(cls, source, handler):
    from pydantic_core import core_schema
    return core_schema.any_schema()


def _stub_class(name: str):
    # A stub used as a pydantic field type (xgrammar.StructuralTag) validates anything.
    return _StubMeta(name, (), {"__get_pydantic_core_schema__": classmethod(_any_schema)})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        val = _stub_class(f"{self.__name__}.{name}")
        setattr(self, name, val)
        return val


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, tops):
        self.tops = set(tops)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] in self.tops:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _StubModule(spec.name)
        mod.__path__ = []
        mod.__version__ = "0.0.0"
        return mod

    def exec_module(self, module):
        pass


def _stub_metadata(dists, stubbed) -> None:
    """An installed distribution's metadata (name, version, top_level.txt) for each stubbed one."""
    d = tempfile.mkdtemp(prefix="oracle-dists-")
    for name, version, mods in dists:
        mods = [m for m in mods if m in stubbed]
        if not mods:
            continue
        info = os.path.join(d, f"{name.replace('-', '_')}-{version}.dist-info")
        os.makedirs(info, exist_ok=True)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        with open(os.path.join(info, "top_level.txt"), "w") as f:
            f.write("\n".join(mods) + "\n")
    sys.path.append(d)


class _HidingPathFinder:
    """The path finder, blind to some top-level modules and their distributions' metadata: what the
    base venv holds for its own packages' sake and the release would not have installed."""

    def __init__(self, finder, tops):
        self.finder, self.tops = finder, set(tops)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] in self.tops:
            return None
        return self.finder.find_spec(fullname, path, target)

    def find_distributions(self, context=None, **kw):
        import importlib.metadata as md
        context = context or md.DistributionFinder.Context(**kw)
        for dist in self.finder.find_distributions(context):
            top = (dist.read_text("top_level.txt") or dist.metadata["Name"] or "").split()
            if not self.tops & {t.replace("-", "_") for t in top} and \
                    (dist.metadata["Name"] or "").replace("-", "_") not in self.tops:
                yield dist

    def invalidate_caches(self):
        self.finder.invalidate_caches()


def _hide(tops) -> None:
    if not tops:
        return
    sys.meta_path[:] = [_HidingPathFinder(f, tops) if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
    for name in [m for m in sys.modules if m.split(".", 1)[0] in tops]:
        del sys.modules[name]


# --- the device ----------------------------------------------------------------------------------


def _fake_nvml(dev):
    mod = types.ModuleType("pynvml")
    mem = types.SimpleNamespace(total=dev["memory_mib"] << 20, free=dev["memory_mib"] << 20, used=0)
    for name, fn in {
        "nvmlInit": lambda *a: None, "nvmlShutdown": lambda *a: None,
        "nvmlDeviceGetCount": lambda *a: 1, "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetCudaComputeCapability": lambda h: tuple(dev["capability"]),
        "nvmlDeviceGetName": lambda h: dev["name"], "nvmlDeviceGetMemoryInfo": lambda h: mem,
        "nvmlSystemGetDriverVersion": lambda: "580.00", "nvmlDeviceGetMultiprocessorCount": lambda h: dev["sm_count"],
        "nvmlDeviceGetNvLinkState": lambda h, l: 0, "nvmlDeviceGetP2PStatus": lambda *a: 0,
    }.items():
        setattr(mod, name, fn)
    mod.NVMLError = type("NVMLError", (Exception,), {})
    mod.NVML_P2P_STATUS_OK = 0
    mod.NVML_P2P_CAPS_INDEX_NVLINK = 0
    return mod


def _nvidia_smi(dev) -> str:
    """A folder holding an ``nvidia-smi`` that answers ``--query-gpu=...`` for the device."""
    d = tempfile.mkdtemp(prefix="oracle-smi-")
    answers = {"memory.total": str(dev["memory_mib"]), "name": dev["name"],
               "compute_cap": "%d.%d" % tuple(dev["capability"]), "memory.used": "0",
               "memory.free": str(dev["memory_mib"]), "count": "1", "index": "0"}
    script = os.path.join(d, "nvidia-smi")
    with open(script, "w") as f:
        f.write("#!%s\nimport sys\nA=%r\n" % (sys.executable, answers))
        f.write("q=[a.split('=',1)[1] for a in sys.argv if a.startswith('--query-gpu=')]\n"
                "print(', '.join(A.get(k.strip(),'N/A') for k in q[0].split(',')) if q else 'GPU 0: %s')\n"
                % dev["name"])
    os.chmod(script, 0o755)
    return d


def fake_device(dev) -> None:
    import torch

    cap = tuple(dev["capability"])
    total = dev["memory_mib"] << 20
    props = types.SimpleNamespace(name=dev["name"], major=cap[0], minor=cap[1], total_memory=total,
                                  multi_processor_count=dev["sm_count"], L2_cache_size=50 << 20,
                                  gcnArchName="", is_integrated=False, uuid="GPU-oracle")
    c = torch.cuda
    c.is_available = lambda: True
    c.device_count = lambda: 1
    c.current_device = lambda: 0
    c.is_initialized = lambda: True
    c.get_device_capability = lambda *a, **k: cap
    c.get_device_name = lambda *a, **k: dev["name"]
    c.get_device_properties = lambda *a, **k: props
    c.mem_get_info = lambda *a, **k: (total, total)
    for name in ("set_device", "synchronize", "empty_cache", "init", "manual_seed_all", "manual_seed"):
        setattr(c, name, lambda *a, **k: None)
    torch.version.cuda = dev.get("cuda") or "12.8"
    sys.modules["pynvml"] = _fake_nvml(dev)
    os.environ["PATH"] = _nvidia_smi(dev) + os.pathsep + os.environ.get("PATH", "")


def _fake_triton_target(dev, stubbed) -> None:
    """Where triton is stubbed, its active driver's target answers as the device: module-level
    code asks it for the backend (``getattr(torch, triton...get_current_target().backend)``)."""
    if "triton" not in stubbed:
        return
    import torch

    cap = tuple(dev["capability"])
    target = types.SimpleNamespace(backend="cuda", arch=cap[0] * 10 + cap[1], warp_size=32)
    active = types.SimpleNamespace(get_current_target=lambda: target, get_active_torch_device=lambda: "cuda",
                                   get_device_interface=lambda: torch.cuda)
    runtime, driver = _StubModule("triton.runtime"), _StubModule("triton.runtime.driver")
    runtime.__path__, driver.__path__ = [], []
    driver.active = active
    runtime.driver = driver
    import triton

    triton.runtime = runtime
    sys.modules["triton.runtime"], sys.modules["triton.runtime.driver"] = runtime, driver


def _stub_torch_library() -> None:
    """Kernel ops some releases register at import (``torch.library`` defs over stubbed modules)."""
    import torch

    def tolerant(real):
        # Fake/meta registrations for ops the stubbed kernel library would have defined.
        def wrapper(*a, **k):
            if a and callable(a[-1]) and not isinstance(a[-1], str) and len(a) > 1:
                try:
                    return real(*a, **k)
                except Exception:
                    return a[-1]
            try:
                deco = real(*a, **k)
            except Exception:
                return lambda fn=None, *x, **y: fn
            def apply(fn=None, *x, **y):
                try:
                    return deco(fn, *x, **y)
                except Exception:
                    return fn
            return apply
        return wrapper
    for name in ("impl", "register_fake", "impl_abstract", "register_kernel"):
        if hasattr(torch.library, name):
            setattr(torch.library, name, tolerant(getattr(torch.library, name)))

    # Module-level @torch.compile(...) would bring up inductor over the triton stub; nothing is
    # compiled while arguments resolve.
    def compile(fn=None, *a, **k):
        return fn if callable(fn) else (lambda f: f)
    torch.compile = compile


# --- one cell ------------------------------------------------------------------------------------


def _jsonable(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)


def resolve(cell, fields):
    import dataclasses
    from sglang.srt import server_args as sa

    os.environ.update(cell.get("env") or {})
    argv = ["--model-path", cell["model_dir"], *cell.get("flags", [])]
    args = sa.prepare_server_args(argv)
    # Newer releases leave construction unresolved; launchers call resolve_once() and read the
    # resolved record (resolved_dict), which is what the server then runs with.
    if hasattr(args, "resolve_once"):
        args.resolve_once()
    resolved = args.resolved_dict() if hasattr(args, "resolved_dict") else None
    if dataclasses.is_dataclass(args):
        names = [f.name for f in dataclasses.fields(args)]
    else:  # newer releases build ServerArgs as a msgspec Struct
        import msgspec
        names = [f.name for f in msgspec.structs.fields(args)]
    want = fields or names
    if resolved is not None:
        return {n: _jsonable(resolved[n]) for n in want if n in resolved}
    return {n: _jsonable(getattr(args, n, None)) for n in want if hasattr(args, n)}


def run_cell(cell, fields):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the cell's own process
        os.close(r)
        try:
            out = {"id": cell["id"], "ok": True, "fields": resolve(cell, fields)}
        except SystemExit as e:
            out = {"id": cell["id"], "ok": False, "error": f"exit {e.code}", "exit": e.code}
        except BaseException as e:  # SGLang raised: that is its answer for the cell
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"{fr.filename.split('/sglang/')[-1]}:{fr.lineno}" for fr in reversed(tb)
                          if "/sglang/" in fr.filename), "")
            out = {"id": cell["id"], "ok": False, "error": f"{type(e).__name__}: {e}"[:400], "where": where}
            if os.environ.get("ORACLE_DEBUG"):
                out["traceback"] = traceback.format_exc()
        with os.fdopen(w, "w") as f:
            f.write(json.dumps(out))
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data) if data else {"id": cell["id"], "ok": False, "error": "the cell's process died"}


def main() -> None:
    job = json.load(sys.stdin)
    import importlib.util
    # Stub what the release requires and this environment lacks; what it has stays real.
    _hide(job.get("hide") or [])
    missing = [m for m in job["stubs"] if importlib.util.find_spec(m) is None]
    sys.meta_path.insert(0, _StubFinder(missing))
    _stub_metadata(job.get("stub_dists") or [], set(missing))
    fake_device(job["device"])
    _fake_triton_target(job["device"], missing)
    _stub_torch_library()
    import logging
    logging.disable(logging.CRITICAL)
    try:
        import sglang.srt.server_args  # noqa: F401  (imported once, before the cells fork)
    except BaseException as e:
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"{fr.filename}:{fr.lineno}" for fr in reversed(tb)), "")
        err = f"import failed: {type(e).__name__}: {e} at {where}"[:600]
        for cell in job["cells"]:
            print(json.dumps({"id": cell["id"], "ok": False, "error": err}), flush=True)
        return
    for cell in job["cells"]:
        print(json.dumps(run_cell(cell, job.get("fields"))), flush=True)


if __name__ == "__main__":
    main()
