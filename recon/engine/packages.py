"""Which Python packages a serving install of the analysed SGLang brings along, read from the
tree's own declared requirements: a wheel's (or site-packages') ``sglang-X.dist-info/METADATA``
``Requires-Dist`` lines, or a checkout's ``python/pyproject.toml``.

Code that probes for an optional package (``importlib.util.find_spec("flashinfer") is not None``)
is then decided where the release itself requires the package: ``pip install sglang`` installs it,
so the probe holds on any machine installed the way the release says. A package the release does
not require stays undecided (a user may have installed it), and both outcomes are shown.

What a required kernel wheel ships besides its own package (``triton_kernels`` inside
``sglang-kernel``) is read from that wheel's RECORD (:mod:`recon.shipped`), for its pinned version.

Requirements count when their environment marker holds on Linux x86_64 (CPython 3.12) for a plain
install, or for the ``srt`` extra on releases that declare one (their documented serving install is
``sglang[srt]``); ``sglang[...]`` self-references are expanded.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from email.parser import HeaderParser
from typing import Optional

from packaging.requirements import InvalidRequirement, Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from .asts import tree_memo

# The platform the installs are evaluated for (where the GPUs recon models are served).
_MARKER_ENV = {
    "os_name": "posix", "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
    "platform_release": "", "platform_version": "", "python_version": "3.12", "python_full_version": "3.12.0",
    "implementation_name": "cpython", "implementation_version": "3.12.0", "platform_python_implementation": "CPython",
}
# Extras that are part of the serving install on the releases that declare them.
_SERVING_EXTRAS = ("srt",)
# Distributions whose import name is not their (normalized) distribution name.
_IMPORT_NAMES = {
    "sglang_kernel": "sgl_kernel", "sgl_deep_gemm": "deep_gemm", "sgl_deep_ep": "deep_ep",
    "sgl_flash_mla": "flash_mla", "nvidia_cutlass_dsl": "cutlass",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@dataclass
class Declared:
    """The packages a serving install brings: import name -> (requirement text, where declared)."""

    where: str
    extras: tuple = ()
    modules: dict = field(default_factory=dict)
    bundles: dict = field(default_factory=dict)  # normalized kernel dist -> (pinned version, requirement)

    def provides(self, module: str) -> Optional[str]:
        """The requirement that installs ``module`` (its top-level package), or None."""
        return self.lookup(module)[0]

    def lookup(self, module: str) -> tuple[Optional[str], str]:
        """(the requirement that installs ``module``, or None; what the answer assumes). A module
        no requirement is named for may still ship inside a pinned kernel wheel: its RECORD says."""
        top = _norm(module.split(".", 1)[0])
        if top in self.modules:
            return self.modules[top], ""
        from ..shipped import modules as shipped

        unread = []
        for dist, (version, req) in sorted(self.bundles.items()):
            names, why = shipped(dist, version)
            if names is None:
                unread.append(why)
            elif top in {_norm(n) for n in names}:
                return f"{req} (its wheel ships {top})", ""
        return None, "; ".join(unread)

    def shipped_state(self) -> tuple:
        """What the pinned kernel wheels ship, as read now (a part of derived cache keys)."""
        from ..shipped import modules as shipped

        return tuple((d, v, tuple(sorted(shipped(d, v)[0] or ()))) for d, (v, _r) in sorted(self.bundles.items()))


def _import_names(dist: str) -> set:
    n = _norm(dist)
    names = {n, _IMPORT_NAMES.get(n, n)}
    if n.endswith("_python"):
        names.add(n[: -len("_python")])  # flashinfer_python provides flashinfer
    return names


def _collect(lines: list[str], extras: tuple, own: str = "sglang", bundles: Optional[dict] = None) -> dict:
    """The import names a plain install plus ``extras`` brings: each line's marker is evaluated for
    every active extra, and ``sglang[x]`` self-references activate ``x`` until nothing changes.
    Kernel wheels pinned to one version are put in ``bundles`` (their RECORD is read on demand)."""
    from ..shipped import BUNDLES
    active = {""} | set(extras)
    reqs = []
    for text in lines:
        try:
            reqs.append(Requirement(text))
        except InvalidRequirement:
            continue
    out: dict = {}
    grew = True
    while grew:
        grew = False
        for req in reqs:
            try:
                if req.marker is not None and not any(req.marker.evaluate({**_MARKER_ENV, "extra": e}) for e in sorted(active)):
                    continue
            except Exception:  # an odd marker: not counted
                continue
            if _norm(req.name) == own:
                new = {_norm(e) for e in req.extras} - active
                if new:
                    active |= new
                    grew = True
                continue
            for m in _import_names(req.name):
                out.setdefault(m, str(req))
            pins = [sp.version for sp in req.specifier if sp.operator in ("==", "===")]
            if bundles is not None and _norm(req.name) in BUNDLES and len(pins) == 1:
                bundles.setdefault(_norm(req.name), (pins[0], str(req)))
    return out


def _from_metadata(text: str, where: str) -> Declared:
    msg = HeaderParser().parsestr(text)
    provided = {_norm(e) for e in (msg.get_all("Provides-Extra") or [])}
    extras = tuple(e for e in _SERVING_EXTRAS if e in provided)
    bundles: dict = {}
    return Declared(where, extras, _collect(list(msg.get_all("Requires-Dist") or []), extras, bundles=bundles), bundles)


def _from_pyproject(text: str, where: str) -> Optional[Declared]:
    try:
        project = tomllib.loads(text).get("project", {})
    except (tomllib.TOMLDecodeError, AttributeError):
        return None
    deps = project.get("dependencies")
    if not isinstance(deps, list):
        return None
    optional = project.get("optional-dependencies") or {}
    lines = [str(d) for d in deps]
    for extra, reqs in optional.items():
        for r in reqs if isinstance(reqs, list) else []:
            head, sep, marker = str(r).partition(";")
            lines.append(f'{head}; ({marker}) and extra == "{extra}"' if sep else f'{head}; extra == "{extra}"')
    extras = tuple(e for e in _SERVING_EXTRAS if e in optional)
    bundles: dict = {}
    return Declared(where, extras, _collect(lines, extras, bundles=bundles), bundles)


def declared(tree) -> Optional[Declared]:
    """The tree's declared serving requirements, or None where it declares none that can be read."""
    memo = tree_memo(tree)
    if "declared_packages" in memo:
        return memo["declared_packages"]
    memo["declared_packages"] = got = _read(tree.target)
    return got


def _read(target) -> Optional[Declared]:
    src = getattr(target, "source", None)
    if src is None:
        return None
    candidates = []
    version = getattr(target, "version", None)
    if version:
        candidates.append(("meta", f"sglang-{version}.dist-info/METADATA"))
    prefix = getattr(target, "package_prefix", "")
    candidates.append(("toml", f"{prefix}/pyproject.toml" if prefix else "pyproject.toml"))
    for kind, rel in candidates:
        try:
            if not src.exists(rel):
                continue
            text = src.read(rel).decode("utf-8", "replace")
        except (OSError, KeyError, ValueError):
            continue
        got = _from_metadata(text, rel) if kind == "meta" else _from_pyproject(text, rel)
        if got is not None and got.modules:
            return got
    return None
