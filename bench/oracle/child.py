"""SGLang's own server-argument resolution, run inside the oracle's virtual environment.

This file is executed by the oracle's Python (never imported by recon): the SGLang release is on
PYTHONPATH, the packages its METADATA requires but that cannot be installed on a CPU machine are
stubbed (only those: a package the release does not require stays absent, so optional-package
probes answer as on a real install), and ``torch.cuda`` / NVML / ``nvidia-smi`` answer as the
device. Input is one JSON object on stdin::

    {"device": {"name", "capability": [M, m], "sm_count", "memory_mib", "cuda": "12.8"},
     "stubs": ["sgl_kernel", ...], "hide": ["kernels"], "fields": [...],
     "cells": [{"id", "model_dir", "flags": [...], "env": {...}}]}

After the arguments, each cell probes what the loader builds from them (``probe``: quant config,
``get_quant_method`` for a MoE and a linear layer, the attention backend class), reported as
``oracle_*`` fields (``ORACLE_PROBE=0`` skips it). Output: one JSON line per cell on stdout, ``{"id", "ok", "fields": {...}}`` or ``{"id", "ok": false,
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


_ARGS: list = []  # the cell's ServerArgs, for the probe after the fields are read


def resolve(cell, fields):
    import dataclasses
    from sglang.srt import server_args as sa

    os.environ.update(cell.get("env") or {})
    argv = ["--model-path", cell["model_dir"], *cell.get("flags", [])]
    args = sa.prepare_server_args(argv)
    _ARGS[:] = [args]
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


# --- beyond the arguments: what the model loader builds from them --------------------------------
# Prefixes of one MoE layer and one dense linear layer (a decoder layer past DeepSeek-V3's three
# dense ones); they matter only to a quant config's ignore list.
MOE_PREFIX = "model.layers.3.mlp.experts"
LINEAR_PREFIX = "model.layers.3.self_attn.o_proj"


PROBE_MODULES = ["sglang.srt.configs.model_config", "sglang.srt.configs.load_config",
                 "sglang.srt.model_loader.weight_utils", "sglang.srt.layers.linear",
                 "sglang.srt.layers.moe.fused_moe_triton.layer", "sglang.srt.layers.quantization",
                 "sglang.srt.layers.attention.attention_registry"]


def _call(fn, args):
    """``fn(args)`` or ``fn()``: the same initializer took the arguments in older releases."""
    import inspect
    try:
        n = len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        n = 1
    return fn(args) if n else fn()


def _why(e) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = next((f"{fr.filename.split('/sglang/')[-1]}:{fr.lineno}" for fr in reversed(tb) if "/sglang/" in fr.filename), "")
    return f"{type(e).__name__}: {e}"[:300] + (f" at {where}" if where else "")


def probe(args, model_dir, fields) -> dict:
    """The quant config SGLang's loader builds from config.json, the method its ``get_quant_method``
    returns for a MoE layer and for a linear layer, and the attention backend class the registry's
    factory constructs: each step as far as it runs on a CPU with the device faked; a step that
    cannot run says why (``oracle_probe_errors``) instead of answering."""
    import importlib
    out, errors = {}, {}

    def step(name, fn):
        try:
            return fn()
        except BaseException as e:  # noqa: BLE001 -- reported, not hidden
            errors[name] = _why(e)
            return None

    sa = importlib.import_module("sglang.srt.server_args")
    # what the scheduler does before it builds the model: the process-wide arguments, then the MoE
    # and GEMM backend globals the quant methods read
    if hasattr(sa, "set_global_server_args_for_scheduler"):
        step("global_server_args", lambda: sa.set_global_server_args_for_scheduler(args))
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    is_moe = any(k in cfg for k in ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "top_k_experts"))
    for mod, fn in (("sglang.srt.layers.moe.utils", "initialize_moe_config"),
                    ("sglang.srt.layers.quantization.fp8_utils", "initialize_fp8_gemm_config"),
                    ("sglang.srt.layers.quantization.fp4_utils", "initialize_fp4_gemm_config")):
        if fn == "initialize_moe_config" and not is_moe:
            continue
        try:
            f = getattr(importlib.import_module(mod), fn, None)
        except ModuleNotFoundError as e:  # a release before that module: nothing to initialize
            f = None
            if e.name != mod:
                errors[fn] = _why(e)
        except BaseException as e:  # noqa: BLE001
            f, errors[fn] = None, _why(e)
        if f is not None:
            step(fn, lambda: _call(f, args))
    from sglang.srt.configs.model_config import ModelConfig
    mc = step("model_config", lambda: ModelConfig.from_server_args(args))
    if mc is None:
        out["oracle_probe_errors"] = errors
        return out
    out["oracle_quantization"] = mc.quantization
    qc = None
    out["oracle_quant_config"] = None
    if mc.quantization is not None:
        def quant_config():
            from sglang.srt.configs.load_config import LoadConfig
            from sglang.srt.model_loader.weight_utils import get_quant_config
            return get_quant_config(mc, LoadConfig(), {})
        qc = step("quant_config", quant_config)
        out["oracle_quant_config"] = type(qc).__name__ if qc is not None else None
    import torch

    def moe_method():
        from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
        layer = FusedMoE.__new__(FusedMoE)  # isinstance is what get_quant_method asks of the layer
        torch.nn.Module.__init__(layer)
        m = qc.get_quant_method(layer, prefix=MOE_PREFIX)
        return type(m).__name__ if m is not None else None

    def linear_method():
        from sglang.srt.layers.linear import LinearBase, ReplicatedLinear
        if qc is not None:  # what get_quant_method returns for a linear layer (None: it leaves it unquantized)
            layer = LinearBase.__new__(LinearBase)
            torch.nn.Module.__init__(layer)
            m = qc.get_quant_method(layer, prefix=LINEAR_PREFIX)
        else:  # without a quant config a real layer's constructor picks its own method
            m = ReplicatedLinear(256, 256, bias=False, quant_config=None, prefix=LINEAR_PREFIX).quant_method
        return type(m).__name__ if m is not None else None

    if is_moe and qc is not None:
        out["oracle_moe_method"] = step("moe_method", moe_method)
    if mc.quantization is None or qc is not None:  # (a quant config that failed to build: no answer)
        out["oracle_linear_method"] = step("linear_method", linear_method)
    name = fields.get("decode_attention_backend") or fields.get("attention_backend")
    out["oracle_attention_class"] = step("attention_class", lambda: attention_class(args, mc, name))
    if errors:
        out["oracle_probe_errors"] = errors
    return {k: _jsonable(v) for k, v in out.items()}


class _Built(Exception):
    pass


def attention_class(args, mc, name):
    """The class the attention registry's factory for the decode backend constructs: the factory is
    called with a model runner holding only the resolved arguments and the model config; the first
    constructor it enters is stopped there and named (nothing is built)."""
    import importlib
    import sys as _sys
    try:
        reg = importlib.import_module("sglang.srt.layers.attention.attention_registry")
    except ImportError:
        return None  # releases before the registry built backends in ModelRunner itself
    factory = reg.ATTENTION_BACKENDS.get(name)
    if factory is None:
        raise LookupError(f"no factory registered for {name!r}")
    from sglang.srt.configs.model_config import AttentionArch
    try:  # releases that resolve into declarations read the arguments through a resolved view
        from sglang.srt.arg_groups.model_override_base import resolved_view
        view = resolved_view(args)
    except ImportError:
        view = args

    class Runner:
        server_args = view
        model_config = mc
        use_mla_backend = mc.attention_arch == AttentionArch.MLA
        device = "cuda"
        init_new_workspace = False

        def __getattr__(self, attr):
            raise AttributeError(f"the probe's model runner has no {attr!r}")

    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    built = []

    def tracer(frame, event, arg):
        # the first attention backend whose constructor is entered (imports, views and helpers
        # the factory makes on the way are let through)
        if event == "call" and frame.f_code.co_name == "__init__" and \
                isinstance(frame.f_locals.get("self"), AttentionBackend):
            built.append(type(frame.f_locals["self"]).__name__)
            raise _Built()
        return None

    _sys.setprofile(None)
    _sys.settrace(tracer)
    try:
        factory(Runner())
    except _Built:
        pass
    finally:
        _sys.settrace(None)
    if not built:
        raise RuntimeError("the factory returned without constructing a class")
    return built[0]


def run_cell(cell, fields):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the cell's own process
        os.close(r)
        try:
            out = {"id": cell["id"], "ok": True, "fields": resolve(cell, fields)}
            if os.environ.get("ORACLE_PROBE", "1") != "0":
                out["fields"].update(probe(_ARGS[0], cell["model_dir"], out["fields"]))
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
    if os.environ.get("ORACLE_PROBE", "1") != "0":
        # what the probe imports, imported once here rather than in every cell's process (a module
        # that does not import is left to the probe, which reports it)
        for mod in PROBE_MODULES:
            try:
                importlib.import_module(mod)
            except BaseException:  # noqa: BLE001
                pass
    for cell in job["cells"]:
        print(json.dumps(run_cell(cell, job.get("fields"))), flush=True)


if __name__ == "__main__":
    main()
