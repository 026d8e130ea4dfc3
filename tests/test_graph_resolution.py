"""Name resolution on small synthetic trees: one mechanism per test."""

from __future__ import annotations

from recon import query


def _edge(G, src_suffix, dst_suffix, kind="calls"):
    src = query.find(G, src_suffix)
    dst = query.find(G, dst_suffix)
    return [e for _, v, e in G.out_edges(src, data=True) if v == dst and e["kind"] == kind]


def test_relative_lazy_and_aliased_imports(synthetic):
    tree = synthetic(
        {
            "sglang/srt/a/kernels.py": "import triton\n@triton.jit\ndef k(x):\n    pass\ndef helper():\n    pass\n",
            "sglang/srt/a/ops.py": (
                "from . import kernels as K\n"
                "from .kernels import helper as h\n"
                "def run(x):\n"
                "    from sglang.srt.a.kernels import k\n"
                "    k[(1,)](x)\n"
                "    h()\n"
                "    K.helper()\n"
            ),
        }
    )
    G = tree.graph
    assert _edge(G, "ops.run", "kernels.k", "launches")[0]["line"] == 5
    lines = sorted(e["line"] for e in _edge(G, "ops.run", "kernels.helper"))
    assert lines == [6, 7]


def test_self_method_through_base_class_and_attribute_types(synthetic):
    tree = synthetic(
        {
            "sglang/srt/m.py": (
                "class Base:\n"
                "    def prep(self):\n"
                "        pass\n"
                "class Layer:\n"
                "    def forward(self, x):\n"
                "        return x\n"
                "class Child(Base):\n"
                "    def __init__(self):\n"
                "        self.inner = Layer()\n"
                "    def run(self, x):\n"
                "        self.prep()\n"
                "        return self.inner(x)\n"
            )
        }
    )
    G = tree.graph
    assert _edge(G, "Child.run", "Base.prep")
    assert _edge(G, "Child.run", "Layer.forward")


def test_callable_assignment_alias_chain_and_reexport(synthetic):
    tree = synthetic(
        {
            "sglang/srt/utils/common.py": (
                "from functools import lru_cache, partial\n"
                "def _check(majors, cuda_version):\n"
                "    return True\n"
                "is_new = is_newer = lru_cache(maxsize=1)(partial(_check, majors=[12], cuda_version=(12, 8)))\n"
            ),
            "sglang/srt/utils/__init__.py": "from .common import *\n",
            "sglang/srt/user.py": "from sglang.srt.utils import is_newer\n_flag = is_newer()\n",
        }
    )
    G = tree.graph
    for name in ("is_new", "is_newer"):
        w = query.where(G, f"common.{name}")
        assert w["defined_by"] == "assignment"
        assert w["wraps_symbol"] == "sglang.srt.utils.common._check"
        assert "majors=[12]" in w["bound_arguments"]
    rows = query.callers(G, "common.is_newer")
    assert [r["call_at"] for r in rows] == ["sglang/srt/user.py:2"]


def test_module_attribute_call_and_dynamic_dispatch(synthetic):
    tree = synthetic(
        {
            "sglang/srt/q/fp4.py": "class Fp4Method:\n    def apply(self, layer, x):\n        return x\n",
            "sglang/srt/q/fp8.py": "class Fp8Method:\n    def apply(self, layer, x):\n        return x\n",
            "sglang/srt/layer.py": (
                "import sglang.srt.q.fp4 as fp4\n"
                "class MoE:\n"
                "    def __init__(self, qc):\n"
                "        self.quant_method = qc.get()\n"
                "        self.m = fp4.Fp4Method()\n"
                "    def forward(self, x):\n"
                "        return self.quant_method.apply(self, x)\n"
            ),
        }
    )
    G = tree.graph
    assert _edge(G, "MoE.__init__", "Fp4Method")  # module attribute call
    dyn = {v for _, v, e in G.out_edges(query.find(G, "MoE.forward"), data=True) if e["kind"] == "calls_dynamic"}
    assert dyn == {"sglang.srt.q.fp4.Fp4Method.apply", "sglang.srt.q.fp8.Fp8Method.apply"}
    hops = query.path(G, "MoE.forward", "Fp8Method.apply")
    assert hops[-1].inferred


def test_capture_site_links_model_forward(synthetic):
    tree = synthetic(
        {
            "sglang/srt/models/toy.py": "class ToyForCausalLM:\n    def forward(self, x):\n        return x\nEntryClass = ToyForCausalLM\n",
            "sglang/srt/runner.py": (
                "import torch\n"
                "class Runner:\n"
                "    def capture(self, model, g):\n"
                "        fwd = model.forward\n"
                "        with torch.cuda.graph(g):\n"
                "            fwd(1)\n"
            ),
        }
    )
    hops = query.path(tree.graph, "Runner.capture", "ToyForCausalLM.forward")
    assert [h.kind for h in hops] == ["function", "capture_site", "entry", "function"]
    assert hops[1].at == "sglang/srt/runner.py:5"


def test_conditional_alias_follows_its_first_branch(synthetic):
    tree = synthetic(
        {
            "sglang/srt/layers.py": (
                "_is_cuda = True\n"
                "class CudaLayer:\n    def forward(self, x):\n        return x\n"
                "class OtherLayer:\n    def forward(self, x):\n        return x\n"
                "Layer = CudaLayer if _is_cuda else OtherLayer\n"
                "def build():\n    return Layer()\n"
            )
        }
    )
    assert _edge(tree.graph, "layers.build", "CudaLayer")
    assert not _edge(tree.graph, "layers.build", "OtherLayer")
