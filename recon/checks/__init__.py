"""Checks: Python that reads the runtime view and the graph and returns findings. Rules (YAML) name them.

A check is a function ``(ctx: CheckContext, rule: Rule) -> list[Finding]`` registered with
``@check("name", params=P, payload=(D, ...))``:

* ``P`` is a dataclass whose fields are the parameters the check takes, each with its type and its
  one default. :mod:`recon.rules` validates a rule's ``params:`` against it when rules load (an
  unknown key or a wrong type is an error naming the file and the key), fills in the defaults and
  hands the check ``rule.params`` as a ``P``. A field typed :data:`Devices` holds device names in
  YAML and the loaded :class:`recon.profiles.DeviceProfile` objects in the check.
* each ``D`` is a dataclass declaring one kind of ``Finding.data`` the check writes (what ``spec``
  and ``apply`` may read); the tests check every finding's data against them.

Modules in this package are imported by :func:`registry`, so a new check is a new module here plus
a YAML file in ``rules/``.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

_REGISTRY: dict[str, Callable] = {}
_LOADED = False


class Devices(tuple):
    """A parameter naming devices (``[h200, b200]`` in YAML): resolved to device profiles when the
    rule loads, so a misspelled name is an error, never a device silently skipped."""


@dataclass(frozen=True)
class NoParams:
    """A check that takes no parameters."""


def params_dict(params: Any) -> dict:
    """A check's parameters as plain data (devices by their short names), for display and keys."""
    if isinstance(params, dict):
        return dict(params)
    out = {}
    for f in dataclasses.fields(params):
        v = getattr(params, f.name)
        out[f.name] = [d.short for d in v] if isinstance(v, Devices) else v
    return out


SCAN_KEYS = {"on_moe_path": bool, "placement": str, "placement_tests": list, "placement_said": bool}  # what recon.scan adds to a finding's data


def _is(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is typing.Union:
        return any(_is(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is list or origin is list:
        return isinstance(value, (list, tuple))
    if hint is dict or origin is dict:
        return isinstance(value, dict)
    return isinstance(value, hint) if isinstance(hint, type) else True


def payload_fields(cls: type) -> dict:
    """{data key: type} of a payload dataclass (a field ``class_`` is the key ``class``)."""
    hints = typing.get_type_hints(cls)
    return {f.name.rstrip("_"): hints[f.name] for f in dataclasses.fields(cls)}


def payload_errors(data: dict, classes) -> Optional[str]:
    """None when ``data`` (less :data:`SCAN_KEYS`) is exactly one of the declared payloads, its keys
    and the types of its values; else what is wrong with the closest one."""
    keys = {k: v for k, v in data.items() if k not in SCAN_KEYS}
    for k, hint in SCAN_KEYS.items():
        if k in data and not _is(data[k], hint):
            return f"{k} = {data[k]!r} is not {hint.__name__}"
    best = None
    for cls in classes:
        fields = payload_fields(cls)
        extra, missing = sorted(set(keys) - set(fields)), sorted(set(fields) - set(keys))
        wrong = sorted(f"{k} = {keys[k]!r:.60} is not {fields[k]}" for k in set(keys) & set(fields) if not _is(keys[k], fields[k]))
        if not (extra or missing or wrong):
            return None
        err = f"{cls.__name__}: " + "; ".join(x for x in (extra and f"undeclared {extra}", missing and f"missing {missing}", wrong and f"wrong types {wrong}") if x)
        score = len(extra) + len(missing) + len(wrong)
        if best is None or score < best[0]:
            best = (score, err)
    return best[1] if best else "the check declares no payload"


def check(name: str, params: type = NoParams, payload: tuple = ()):
    def deco(fn):
        fn.params_class = params
        fn.payload = tuple(payload)
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
    # the scenario's one engine (recon.engine.engine): built on first use, never pickled
    engine: Any = field(default=None, repr=False, compare=False)
    # its runtime view (recon.runtime.runtime_view): a value of the scenario, never a cache entry
    view: Any = field(default=None, repr=False, compare=False)

    @property
    def flags_key(self) -> str:
        return repr((sorted(self.server_flags.items()), sorted(self.env.items())))

    def snippet(self, path: str, line: int, end_line: Optional[int] = None) -> str:
        lines = self.cache.setdefault(("lines", path), None)
        if lines is None:
            lines = self.cache[("lines", path)] = self.tree.lines(path)
        end = end_line or line
        return "\n".join(l.strip() for l in lines[line - 1 : end])
