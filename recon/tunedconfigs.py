"""Tuned-config file names: SGLang's ``device_name=`` templates, and the JSON files that fill them.

SGLang looks tuned Triton configs up by a file name built from an f-string such as
``N={N},K={K},device_name={device_name},dtype=fp8_w8a8,block_shape=[{block_n}, {block_k}].json``.
This module turns such a template into a matcher and a renderer, and a shipped file name back
into its fields, so a check can say which (shape, device) pairs exist and which are missing.
Pure string work: no SGLang code is imported.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Optional

_FIELD = re.compile(r"\{([^{}]*)\}")
# key=value pairs of a file name; a value may be a bracketed list holding commas
_PAIR = re.compile(r"(\w+)=(\[[^\]]*\]|[^,]*)")


def fields(template: str) -> list[str]:
    """Field expressions of a template, in order (``["N", "K", "device_name", ...]``)."""
    return _FIELD.findall(template)


def literal_value(template: str, key: str) -> Optional[str]:
    """A ``key=value`` written literally in the template (``dtype`` -> ``fp8_w8a8``), else None."""
    for m in _PAIR.finditer(_FIELD.sub("\0", template)):
        if m.group(1) == key and "\0" not in m.group(2):
            return m.group(2)
    return None


def matcher(template: str) -> re.Pattern:
    """A regex matching every file name the template can produce (fields match anything)."""
    out, pos = [], 0
    for m in _FIELD.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        out.append(".*?")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("^" + "".join(out) + "$")


def render(template: str, values: dict) -> Optional[str]:
    """The file name for ``values`` (field name -> value), or None when a field has no value.

    Optional pieces written as ``{x_selector}`` (``",dtype=fp8_w8a8"`` or ``""``) render from
    ``values[x]``: ``,x=value`` when given, empty when None; ``{down_moe_selector}`` renders
    ``_down`` only when ``values["down_moe"]`` is true.
    """

    def one(m: re.Match) -> str:
        name = m.group(1)
        if name in values:
            v = values[name]
            if v is None:
                raise KeyError(name)
            return _fmt(v)
        if name.endswith("_selector"):
            base = name[: -len("_selector")]
            if base == "down_moe":
                return "_down" if values.get("down_moe") else ""
            v = values.get(base)
            return "" if v in (None, False) else ("," + f"{base}=" + (_fmt(v) if v is not True else "True"))
        raise KeyError(name)

    try:
        return _FIELD.sub(one, template)
    except KeyError:
        return None


def _fmt(v) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


def parse_name(name: str) -> dict:
    """Fields of a config file name: ``{"N": 1536, "K": 7168, "device_name": "NVIDIA_H200",
    "dtype": "fp8_w8a8", "block_shape": [128, 128], "down": False}``; ints where they are ints."""
    stem = name[:-5] if name.endswith(".json") else name
    out: dict = {"down": stem.endswith("_down")}
    if out["down"]:
        stem = stem[: -len("_down")]
    for m in _PAIR.finditer(stem):
        key, raw = m.group(1), m.group(2)
        if raw.startswith("["):
            try:
                out[key] = [int(x) for x in raw[1:-1].split(",") if x.strip()]
            except ValueError:
                out[key] = raw
        elif raw.isdigit():
            out[key] = int(raw)
        else:
            out[key] = raw
    return out


def device_of(name: str) -> Optional[str]:
    d = parse_name(name)
    return d.get("device_name") or d.get("device")


def count_by_device(names) -> dict[str, int]:
    """How many config files each device has, most first then by name (deterministic)."""
    c = Counter(dv for n in names if (dv := device_of(n)))
    return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))
