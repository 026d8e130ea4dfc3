"""The files recon apply writes into the checkout: the grouped kernel as a self-contained package.

The package is built from ``reference_impl/`` (never imported here: it needs torch and triton):
the modules the kernel's host wrapper (``moe.py``) reaches through imports, followed by parsing,
with any absolute ``reference_impl`` import rewritten to a relative one (LibCST), a header naming
the recon version it came from, the tuned config JSON files, and an ``__init__`` holding the entry
point the codemod calls. That entry point reads the environment variable on each call, so the
switch back to the slot kernel needs no re-apply.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path, PurePosixPath

import libcst as cst

from .. import __version__
from ..errors import ReconError
from ..refkernel import MARK
from .codemod import ENV_VAR
from .swap import PREPACK, WRAPPER

HOST_MODULE = "moe.py"  # reference_impl's host wrapper: grouped_mxfp4_moe(...)


def source_dir() -> Path:
    """reference_impl/ as installed beside recon (found without importing it)."""
    spec = importlib.util.find_spec("reference_impl")
    if spec is None or not spec.submodule_search_locations:
        raise ReconError("reference_impl is not installed beside recon: reinstall recon (pip install -e .)")
    return Path(list(spec.submodule_search_locations)[0])


def _header(rel: str) -> str:
    return (f"# {MARK} (recon {__version__}) from reference_impl/{rel}: the grouped MXFP4 MoE kernel.\n"
            f"# {ENV_VAR}=0 switches back to the slot kernel at run time; `recon apply --revert` removes it.\n")


def _closure(root: Path) -> list[str]:
    """Relative paths of the modules ``moe.py`` reaches through imports inside the package."""
    todo, seen = [HOST_MODULE], []
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.append(rel)
        pkg = PurePosixPath(rel).parent
        for node in ast.walk(ast.parse((root / rel).read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg
                    for _ in range(node.level - 1):
                        base = base.parent
                    mod = [p for p in (node.module or "").split(".") if p]
                elif (node.module or "").split(".")[0] == "reference_impl":
                    base, mod = PurePosixPath("."), node.module.split(".")[1:]
                else:
                    continue
                here = base.joinpath(*mod) if mod else base
                cands = [here.with_suffix(".py"), here / "__init__.py"] if mod else []
                cands += [here / f"{a.name}.py" for a in node.names]  # from . import configs
                for c in cands:
                    if (root / c).is_file() and c.as_posix() != "__init__.py":
                        todo.append(c.as_posix())
        # each package folder on the way needs its __init__
        for parent in PurePosixPath(rel).parents:
            init = parent / "__init__.py"
            if parent != PurePosixPath(".") and (root / init).is_file() and init.as_posix() not in seen:
                todo.append(init.as_posix())
    return sorted(seen)


class _Relative(cst.CSTTransformer):
    """``from reference_impl.x import y`` -> ``from .x import y`` (relative to the file's depth)."""

    def __init__(self, depth: int):
        self.depth = depth

    def leave_ImportFrom(self, orig, node):
        if node.relative or node.module is None:
            return node
        code = cst.Module([]).code_for_node(node.module)
        if code != "reference_impl" and not code.startswith("reference_impl."):
            return node
        rest = code[len("reference_impl."):] if "." in code else ""
        dots = [cst.Dot() for _ in range(self.depth + 1)]
        return node.with_changes(relative=dots, module=cst.parse_expression(rest) if rest else None)


def _entry(host: str, slot_module: str) -> str:
    return f'''# {MARK} (recon {__version__}): the grouped MXFP4 MoE kernel and the switch back.
"""Grouped MXFP4 MoE forward (recon's reference_impl), called where {slot_module}.{host} was.

{ENV_VAR}=0 (or false/off/no) runs {host} again; the variable is read on every call, so set it
before the server starts: a captured CUDA graph keeps the path it was captured with. Inputs the
grouped kernel does not take (hidden states that are not bfloat16) also go to {host}.

{PREPACK} is called once per layer at weight-load time (process_weights_after_loading): it
prepacks the layer's experts (prepack_mxfp4_moe) keeping one copy of them, the packed weights
aliased and the scale Parameters replaced by float8_e8m0fnu views of the prepacked bytes (which
{host} takes too, converting them on each call). The forward finds the prepacked object from the
tensors it is given (SGLang passes `.data` views, not the layer) by w13's address, checked against
all four tensors; anything else takes the raw tensors. With {ENV_VAR}=0 at load nothing is prepacked.
`recon apply --revert` removes this package and the calls.
"""
import inspect
import os
import weakref

ENV_VAR = "{ENV_VAR}"
_OFF = ("0", "false", "off", "no")
# w13's address -> the layer's prepacked weights; the layer holds the object, so it goes with the layer
_PREPACKED = weakref.WeakValueDictionary()
_WEIGHTS = ("w13_packed", "w2_packed", "w13_scale", "w2_scale")


def grouped_enabled() -> bool:
    return os.environ.get(ENV_VAR, "1").strip().lower() not in _OFF


def {PREPACK}(layer, w13_name, w2_name, w13_scale_name, w2_scale_name):
    """Prepack ``layer``'s MXFP4 experts once (module docstring); returns the object, or None when
    switched off. Bad weights raise ValueError naming the tensor, as the kernel would on every call."""
    if not grouped_enabled():
        return None
    import torch

    from .prepack import prepack_mxfp4_moe

    w13 = getattr(layer, w13_name).data
    p = prepack_mxfp4_moe(w13, getattr(layer, w2_name).data, getattr(layer, w13_scale_name).data,
                          getattr(layer, w2_scale_name).data)
    e8m0 = torch.float8_e8m0fnu
    setattr(layer, w13_scale_name, torch.nn.Parameter(p.s13.view(e8m0), requires_grad=False))
    setattr(layer, w2_scale_name, torch.nn.Parameter(p.s2.view(e8m0), requires_grad=False))
    layer._recon_mxfp4_prepacked = p
    _PREPACKED[w13.data_ptr()] = p
    return p


def _prepacked_for(kwargs):
    """The prepacked object whose four tensors are exactly the ones given, else None."""
    w13 = kwargs.get("w13_packed")
    p = _PREPACKED.get(w13.data_ptr()) if hasattr(w13, "data_ptr") else None
    if p is None:
        return None
    for name, mine in zip(_WEIGHTS, (p.w13, p.w2, p.s13, p.s2)):
        t = kwargs.get(name)
        if not hasattr(t, "data_ptr") or t.data_ptr() != mine.data_ptr() or tuple(t.shape) != tuple(mine.shape):
            return None
    return p


def {WRAPPER}(slot_forward, *args, **kwargs):
    """Same arguments as {host}; runs the grouped kernel unless switched off."""
    if not grouped_enabled():
        return slot_forward(*args, **kwargs)
    if args:  # positional arguments follow the slot function's order
        kwargs = dict(inspect.signature(slot_forward).bind(*args, **kwargs).arguments)
    hidden_states = kwargs.get("hidden_states")
    if hidden_states is None or str(getattr(hidden_states, "dtype", "")) != "torch.bfloat16":
        return slot_forward(**kwargs)
    from .moe import grouped_mxfp4_moe

    p = _prepacked_for(kwargs)
    if p is not None:
        kwargs.update(w13_packed=p, w2_packed=None, w13_scale=None, w2_scale=None)
    return grouped_mxfp4_moe(**kwargs)
'''


_REWRITTEN: dict = {}  # (source text, depth) -> rewritten text: LibCST takes seconds per bundle


def _relative_imports(text: str, depth: int) -> str:
    """``text`` with its absolute ``reference_impl`` imports made relative (``depth`` folders deep);
    kept per process: a process that applies to several checkouts rewrites each file once."""
    key = (text, depth)
    if key not in _REWRITTEN:
        _REWRITTEN[key] = cst.parse_module(text).visit(_Relative(depth)).code
    return _REWRITTEN[key]


def build(bundle_dir: str, host: str, slot_module: str) -> dict[str, bytes]:
    """{target-relative path: bytes} of every file of the package at ``bundle_dir``."""
    root = source_dir()
    files: dict[str, bytes] = {}
    for rel in _closure(root):
        if rel == "__init__.py":
            continue  # reference_impl's own __init__ exports the PyTorch reference too; ours is the entry
        text = _relative_imports((root / rel).read_text(encoding="utf-8"), rel.count("/"))
        files[f"{bundle_dir}/{rel}"] = (_header(rel) + text).encode("utf-8")
    for js in sorted(root.rglob("*.json")):  # tuned configs read by configs.py at run time
        rel = js.relative_to(root).as_posix()
        files[f"{bundle_dir}/{rel}"] = js.read_bytes()
    files[f"{bundle_dir}/__init__.py"] = _entry(host, slot_module).encode("utf-8")
    return dict(sorted(files.items()))


def is_generated(data: bytes) -> bool:
    return MARK.encode() in data[:400]
