"""Triton kernels of the graph, by file, with their :mod:`recon.tritonast` summaries (cached by
content): the service the kernel, launch and epilogue checks and ``apply`` read kernels through.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Optional

from ..tritonast import file_summary

if TYPE_CHECKING:
    from ..checks import CheckContext

def kernels_by_file(ctx: CheckContext) -> dict[str, list[tuple[str, dict]]]:
    """{path: [(node id, node attrs)]} of every Triton kernel in the graph, computed once per run."""
    key = ("kernels", "by_file")
    if key not in ctx.cache:
        out: dict[str, list] = defaultdict(list)
        for n, d in ctx.tree.graph.nodes(data=True):
            if d.get("kind") == "triton_kernel" and d.get("path"):
                out[d["path"]].append((n, d))
        ctx.cache[key] = {p: sorted(v, key=lambda x: x[1].get("line", 0)) for p, v in sorted(out.items())}
    return ctx.cache[key]


def kernel_summary(ctx: CheckContext, node: str) -> Optional[dict]:
    """The :mod:`recon.tritonast` summary of the kernel at graph node ``node``."""
    d = ctx.tree.graph.nodes.get(node) if node in ctx.tree.graph else None
    if not d or not d.get("path"):
        return None
    s = file_summary(ctx.tree, d["path"], ctx.cache)
    return s["kernels"].get(d.get("qualname") or d.get("name"))
