"""What a library op needs: the architectures it is built for, read from ``data/external_ops.yaml``
(rows with ``archs`` or ``builds``, each with its evidence), for the package version the release pins.

An op no row matches is "not known": nothing here assumes it runs. Where the architectures changed
with the package's version and the release pins no single version, both outcomes are given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

ANY = "any"


@dataclass
class Support:
    """Whether an op runs on an architecture: ``runs`` True / False, or None (not known, or the
    installed version decides: ``by_version`` then says which versions have it)."""

    op: str
    arch: str
    runs: Optional[bool]
    what: str = ""
    archs: list = field(default_factory=list)  # what the op is built for (the row that applies)
    package: str = ""
    requirement: Optional[str] = None  # the release's requirement line that installs the package
    version: Optional[str] = None  # the version it pins
    by_version: list = field(default_factory=list)  # [(specifier, archs)] every row
    first_with: Optional[str] = None  # the version range whose row has the arch (what avoids it)
    evidence: str = ""

    @property
    def known(self) -> bool:
        return self.runs is not None


_OPS: dict = {}


def external_ops() -> list:
    """recon's table of outside ops (``data/external_ops.yaml``), read once per data directory."""
    from .. import derived

    if derived.DATA_DIR not in _OPS:
        import re

        from ..yamltext import load_yaml
        data = load_yaml((derived.DATA_DIR / "external_ops.yaml").read_text()) or []
        _OPS[derived.DATA_DIR] = [(re.compile(d["match"]), d) for d in data]
    return _OPS[derived.DATA_DIR]


def _rows() -> list:
    return [(rx, d) for rx, d in external_ops() if "archs" in d or "builds" in d]


def entry(name: str) -> Optional[dict]:
    """The first requirement row whose ``match`` finds the op's dotted name."""
    for rx, d in _rows():
        if rx.search(name):
            return d
    return None


def pinned(requirement: Optional[str]) -> Optional[str]:
    """The single version an ``==`` requirement pins, else None."""
    if not requirement:
        return None
    try:
        req = Requirement(requirement)
    except InvalidRequirement:
        return None
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "==="):
        return specs[0].version
    return None


def _holds(spec: str, version: str) -> Optional[bool]:
    try:
        return Version(version) in SpecifierSet(spec, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return None


def support(tree, name: str, arch: str) -> Support:
    """Whether the op ``name`` has kernels for ``arch`` in the package the release installs."""
    d = entry(name)
    if d is None:
        return Support(name, arch, None)
    from .packages import declared

    decl = declared(tree)
    top = name.split(".", 1)[0]
    req = decl.provides(top) if decl is not None else None
    version = pinned(req)
    try:  # the distribution the release installs the module from (sglang-kernel brings sgl_kernel.flash_mla)
        dist = Requirement(req).name if req else d.get("package", top)
    except InvalidRequirement:
        dist = d.get("package", top)
    base = dict(what=d.get("what", ""), package=dist, requirement=req, version=version,
                evidence=str(d.get("evidence", "")).strip())
    if "archs" in d:
        archs = d["archs"]
        runs = True if archs == ANY else arch in archs
        return Support(name, arch, runs, archs=[ANY] if archs == ANY else list(archs), **base)
    rows = [(str(r.get("versions", "")), list(r.get("archs") or [])) for r in d["builds"]]
    first = next((s for s, a in rows if arch in a), None)
    if version is not None:
        row = next((a for s, a in rows if _holds(s, version)), None)
        if row is None:  # a version no row covers: not known
            return Support(name, arch, None, by_version=rows, first_with=first, **base)
        return Support(name, arch, arch in row, archs=row, by_version=rows, first_with=first, **base)
    verdicts = {arch in a for _, a in rows}
    runs = verdicts.pop() if len(verdicts) == 1 and len(rows) > 0 and _covers_all(rows) else None
    return Support(name, arch, runs, archs=sorted({x for _, a in rows for x in a}), by_version=rows, first_with=first, **base)


def _covers_all(rows) -> bool:
    """Rows that say the same for every version only decide an unpinned install when they span
    every version (a lone '<0.1.5' row says nothing of later versions)."""
    return any(s in ("", ">=0") for s, _ in rows) or (len(rows) > 1 and all(re.match(r"^(<|>=)", s) for s, _ in rows))
