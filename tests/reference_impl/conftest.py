"""reference_impl tests: without CUDA, run the Triton kernels under the CPU
interpreter. TRITON_INTERPRET must be set before any @triton.jit decoration,
so it is set here, before the tests import reference_impl.moe."""
import os

try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except ImportError:  # the test modules skip themselves
    _HAS_CUDA = False

if not _HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"
