"""Grouped MXFP4 MoE kernel (Triton) beside its plain-PyTorch reference."""
from .reference import reference_mxfp4_moe, dequant_mxfp4

__all__ = ["grouped_mxfp4_moe", "prepack_mxfp4_moe", "reference_mxfp4_moe", "dequant_mxfp4"]


def __getattr__(name):  # triton is imported only when the kernel is asked for
    if name == "grouped_mxfp4_moe":
        from .moe import grouped_mxfp4_moe
        return grouped_mxfp4_moe
    if name == "prepack_mxfp4_moe":
        from .prepack import prepack_mxfp4_moe
        return prepack_mxfp4_moe
    raise AttributeError(name)
