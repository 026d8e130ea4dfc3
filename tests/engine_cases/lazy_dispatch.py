"""A dispatch resolved on the first call, as ``BaseFusedOp.forward`` does it (SGLang 0.5.19's
MoE methods): ``method = self._forward_method; if method is None: method = self._forward_method =
self._resolve_forward_method()``, the resolver picking ``forward_<platform>`` through an
lru_cache'd platform key. A walk of ``Method.apply`` (which calls ``self.forward(...)``) follows
the method the resolver returns on this device (``forward_cuda``), not the native fallback.
``tests/test_engine_cases.py::test_a_dispatch_resolved_on_first_call_is_followed`` walks it."""

import functools
from typing import Callable, Optional

import flashinfer

_PLATFORM_METHODS = {"cuda": ("forward_cuda",), "hip": ("forward_hip", "forward_cuda")}


@functools.lru_cache(maxsize=1)
def _platform_key() -> str:
    return "cuda"


class BaseOp:
    def __init__(self):
        self._forward_method: Optional[Callable] = None

    def _defined_method(self, name):
        return getattr(self, name, None)

    def _platform_method(self, platform_key):
        for name in _PLATFORM_METHODS.get(platform_key, (f"forward_{platform_key}",)):
            method = self._defined_method(name)
            if method is not None:
                return method
        return None

    def _resolve_forward_method(self):
        method = self._platform_method(_platform_key())
        return method if method is not None else self.forward_native

    def forward(self, *args, backend=None, **kwargs):
        if backend is not None:
            return getattr(self, backend)(*args, **kwargs)
        method = self._forward_method
        if method is None:
            method = self._forward_method = self._resolve_forward_method()
        return method(*args, **kwargs)

    def forward_native(self, *args, **kwargs):
        flashinfer.op_native()


class Method(BaseOp):
    def apply(self, layer, x):
        return self.forward(layer=layer, x=x)

    def forward_cuda(self, layer, x):
        flashinfer.op_cuda(x)


# expect: 'cuda'
def case_the_platform_key():
    return _platform_key()
