"""The objects the runtime evaluator stands in for when it reads SGLang's code.

recon never runs SGLang; it evaluates SGLang's own expressions over a few stand-in values:

- the server arguments as resolved so far (``self.moe_runner_backend`` in ``ServerArgs``,
  ``cfg.moe_runner_backend`` in a hook, ``server_args.quantization`` anywhere);
- the checkpoint's ``config.json`` (``hf_config.architectures[0]``, ``quantization_config``);
- an instance of an in-tree class (``ModelConfig``, ``Fp8Config``), whose attributes are read
  from the writes the class makes to ``self.<attr>``;
- an enum member (``MoeRunnerBackend.MARLIN``), whose methods are in-tree code;
- the layer a quant method is asked for (``isinstance(layer, FusedMoE)``).

Anything else stays unknown (``None`` in the evaluator's three-valued logic).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


class Missing:
    """An attribute a config does not have: ``getattr(cfg, "x", default)`` takes the default."""

    def __repr__(self) -> str:
        return "<missing>"


MISSING = Missing()


@dataclass
class ServerArgsObj:
    """The server arguments: reading a field gives its value in the resolution state."""

    state: Any  # recon.engine.serverargs.State

    def __repr__(self) -> str:
        return "<server_args>"


class HFConfig:
    """A checkpoint's config.json (or a nested mapping of it) read as attributes and as a dict."""

    def __init__(self, data: dict):
        self.data = data

    def attr(self, name: str):
        if name in self.data:
            v = self.data[name]
            return HFConfig(v) if isinstance(v, dict) and name != "quantization_config" else v
        if name in ("text_config", "hf_text_config"):
            return self
        return MISSING

    def __repr__(self) -> str:
        return f"<hf_config {sorted(self.data)[:4]}>"


@dataclass(eq=False)
class Instance:
    """An instance of an in-tree class; ``attrs`` holds what the evaluation has set."""

    cls: str  # qualname of the class
    attrs: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"<{self.cls.rsplit('.', 1)[-1]} instance>"


@dataclass(frozen=True)
class EnumVal:
    """A member of an in-tree enum class, compared by value (enum members of one value are one)."""

    cls: str
    name: str
    value: Any

    def __eq__(self, other) -> bool:
        if isinstance(other, EnumVal):
            return self.value == other.value
        return self.value == other

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"{self.cls.rsplit('.', 1)[-1]}.{self.name}"


@dataclass(frozen=True)
class LayerObj:
    """The layer a quant method is asked for: an instance of ``cls`` (and of its bases)."""

    cls: str
    bases: frozenset = frozenset()

    def __repr__(self) -> str:
        return f"<{self.cls.rsplit('.', 1)[-1]} layer>"


@dataclass(frozen=True)
class ClassRef:
    """An in-tree class used as a value (``return Mxfp4MarlinMoEMethod(...)`` makes an Instance)."""

    qual: str


@dataclass(frozen=True)
class FuncRef:
    """A function taken out of a decorator registry (``@register_fused_func("none", "marlin")``)."""

    qual: str
    keys: tuple = ()
    site: tuple = ()  # (path, line) of the registration
    bound: object = field(default=None, compare=False, hash=False)  # the instance of a bound method (self.forward_cuda)


@dataclass(frozen=True)
class Partial:
    """``functools.partial(fn, *args, **kwargs)`` of an in-tree function: called, it runs ``fn``
    with these arguments first."""

    qual: str
    args: tuple = ()
    kwargs: tuple = ()  # (name, value) pairs


@dataclass(frozen=True)
class ExtRef:
    """A callable from outside the tree, kept as a value (``fn = cutlass_fused_moe``; returned from
    a helper that imports it lazily)."""

    name: str  # dotted, as imported: "flashinfer.fused_moe.cutlass_fused_moe"


@dataclass(frozen=True)
class ModelPath:
    """``--model-path`` of the served checkpoint: a Hugging Face repo id or a local folder holding
    the ``config.json`` recon reads, never a single file (a single-file checkpoint is a GGUF file,
    which has no ``config.json``). Filesystem probes that need more (is it a local folder?) stay
    unknown; string tests on it stay unknown too (the path is the user's)."""

    model: str

    def __repr__(self) -> str:
        return f"<model path of {self.model}>"


def plain(v: Any) -> Optional[str]:
    """How a value reads in the spec."""
    if isinstance(v, EnumVal):
        return repr(v.value)
    if isinstance(v, Instance):
        return v.cls.rsplit(".", 1)[-1]
    if v is MISSING:
        return "unset"
    if isinstance(v, FuncRef):
        if v.bound is not None or not v.keys:
            return v.qual.rsplit(".", 1)[-1]
        return f"{v.qual.rsplit('.', 1)[-1]} (registered for {v.keys!r})"
    if isinstance(v, ExtRef):
        return v.name  # a value from outside the tree, by the name it is read under
    return repr(v)
