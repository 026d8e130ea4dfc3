"""Triton kernels of the grouped MXFP4 MoE, one per file."""
