"""Checks: Python that queries the graph and returns findings. Rules (YAML) name them.

A check is a function ``(ctx: CheckContext, rule: Rule) -> list[Finding]`` registered with
``@check("name")``. Modules in this package are imported by :func:`registry`, so a new check is a
new module here plus a YAML file in ``rules/``.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

_REGISTRY: dict[str, Callable] = {}
_LOADED = False


def check(name: str):
    def deco(fn):
        _REGISTRY[name] = fn
        return fn

    return deco


def registry() -> dict[str, Callable]:
    global _LOADED
    if not _LOADED:
        for mod in pkgutil.iter_modules(__path__):
            if not mod.name.startswith("_"):
                importlib.import_module(f"{__name__}.{mod.name}")
        _LOADED = True
    return _REGISTRY


@dataclass
class CheckContext:
    tree: Any  # recon.tree.Tree: .target, .index, .graph, .resolver, .read_text(path), .lines(path)
    device: Any  # recon.profiles.DeviceProfile
    model: Any  # recon.profiles.ModelProfile
    cache: dict = field(default_factory=dict)  # shared by checks within one run (e.g. evaluated gates)
    server_flags: dict = field(default_factory=dict)  # --server-args, parsed against the tree's ServerArgs
    env: dict = field(default_factory=dict)  # --env NAME=VALUE

    @property
    def flags_key(self) -> str:
        return repr((sorted(self.server_flags.items()), sorted(self.env.items())))

    def snippet(self, path: str, line: int, end_line: Optional[int] = None) -> str:
        lines = self.cache.setdefault(("lines", path), None)
        if lines is None:
            lines = self.cache[("lines", path)] = self.tree.lines(path)
        end = end_line or line
        return "\n".join(l.strip() for l in lines[line - 1 : end])
