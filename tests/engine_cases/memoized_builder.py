"""Memoized callees: a builder whose results are kept by key runs its body once per key (at
warm-up), not at each step. Three ways the code memoizes: an in-tree decorator whose wrapper keeps
the decorated function's result in a dict made outside the wrapper (the JIT build cache's
``cache_once``), ``functools.lru_cache`` bound by an import alias, and an in-tree decorator that
hands the function to ``functools.cache``. A walk of ``Method.apply`` does not enter their build
internals (``msgspec``, the loader's bookkeeping), and keeps the op each one returns where the
step calls it: the compiled JIT module, the library's callable, the in-tree function. A decorator
that only wraps (calls the function every time) is not memoizing: its function is walked.
``tests/test_engine_cases.py::test_memoized_builders_are_not_walked`` walks it.

# beside: sglang/kernels/jit/loader.py: def load_jit(name, *args, cuda_files=(), **kwargs): return object()
"""

import functools
from functools import lru_cache as keep

import flashinfer
import msgspec

from sglang.kernels.jit.loader import load_jit


def once_per_key(fn):
    results = {}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in results:
            results[key] = fn(*args, **kwargs)
        return results[key]

    return wrapper


def cached(fn):
    return functools.cache(fn)


def logged(fn):
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        return out

    return wrapper


@once_per_key
def act_module(dtype, fast=True):
    msgspec.json.encode({"dtype": dtype})  # the build cache's bookkeeping
    return load_jit("activation" if fast else "rounded_activation", dtype, cuda_files=["act.cuh"])


@keep(maxsize=None)
def gemm_fn():
    msgspec.json.decode(b"{}")
    return flashinfer.gemm_op


def triton_step(x):
    flashinfer.reduce_op(x)


@cached
def pick_step():
    msgspec.json.decode(b"[]")
    return triton_step


@logged
def plain_wrapped(x):
    flashinfer.wrapped_op(x)


class Method:
    def apply(self, x):
        module = act_module(x.dtype)
        module.run_activation(x)
        gemm_fn()(x)
        step = pick_step()
        step(x)
        plain_wrapped(x)


@once_per_key
def is_hip_runtime():
    return False


# expect: 'cuda'  (a memoized gate still has its body's value: only the walk does not enter it)
def case_a_memoized_gate_is_evaluated_through_its_decorator():
    return "hip" if is_hip_runtime() else "cuda"
