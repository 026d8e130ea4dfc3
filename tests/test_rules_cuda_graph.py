"""cuda-graph-host-sync on real SGLang trees and synthetic capture chains."""

from __future__ import annotations

import pytest

from recon import spec
from recon.profiles import load_device, load_model
from recon.rules import get_rule
from recon.scan import run_rules

RUNNER = '''
import torch

class CudaGraphRunner:
    def _capture_graph(self, graph, run_once_fn):
        with torch.cuda.graph(graph):
            out = run_once_fn()
        return out

    def capture_one_batch_size(self, bs, forward):
        def run_once():
            return forward(bs)

        return self._capture_graph(None, run_once)
'''


def _scan(tree, device="rtx-pro-6000-server", model="dsv4-flash"):
    res = run_rules(tree, load_device(device), load_model(model), [get_rule("cuda-graph-host-sync")])
    assert not res.errors
    return res.findings


def _model(body: str) -> str:
    return "import torch\n\nclass DeepseekV4ForCausalLM:\n    def forward(self, x):\n" + body + "\n\nEntryClass = DeepseekV4ForCausalLM\n"


def test_unguarded_item_found_guarded_not(synthetic):
    tree = synthetic({"sglang/srt/model_executor/cuda_graph_runner.py": RUNNER,
                      "sglang/srt/models/m.py": _model("        n = x.sum().item()\n        return x * n")})
    f = _scan(tree)
    assert len(f) == 1
    assert f[0].data["functions"][0]["hazards"][0]["call"].endswith(".item()")
    assert any(".item()" in tree.lines(e.path)[e.line - 1] for e in f[0].evidence)


def test_guarded_and_unreached_are_not_hazards(synthetic):
    body = ("        if not torch.cuda.is_current_stream_capturing():\n            n = x.sum().item()\n        return x")
    helper = "def never_called(x):\n    return x.nonzero()\n"
    tree = synthetic({"sglang/srt/model_executor/cuda_graph_runner.py": RUNNER,
                      "sglang/srt/models/m.py": _model(body) + helper})
    assert _scan(tree) == []


def test_no_capture_site_no_finding(synthetic):
    tree = synthetic({"sglang/srt/models/m.py": _model("        return x.sum().item()")})
    assert _scan(tree) == []


def test_layers_through_parameter_defaults_and_local_factories(synthetic):
    """The container hop follows a layer class passed as a defaulted parameter (``layer_type=Layer``,
    then ``layer_type = layer_type or Layer``), and the factory hop a factory bound to a local name
    first (``impl = get_impl(); self.mlp = impl(...)``): the hazard two layers down is reached."""
    model = """
import torch

def make_layers(n, fn):
    return [fn(i) for i in range(n)]

class Mlp:
    def forward(self, x):
        return x * x.sum().item()

def get_impl():
    return Mlp

class Layer:
    def __init__(self, i):
        impl = get_impl()
        self.mlp = impl()

    def forward(self, x):
        return self.mlp(x)

class Model:
    def __init__(self, n, layer_type=Layer):
        layer_type = layer_type or Layer
        self.layers = make_layers(n, lambda i: layer_type(i))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

class DeepseekV4ForCausalLM:
    def __init__(self):
        self.model = Model(4)

    def forward(self, x):
        return self.model.forward(x)

EntryClass = DeepseekV4ForCausalLM
"""
    tree = synthetic({"sglang/srt/model_executor/cuda_graph_runner.py": RUNNER, "sglang/srt/models/m.py": model})
    found = _scan(tree)
    assert len(found) == 1
    hazards = [h for fn in found[0].data["functions"] for h in fn["hazards"]]
    assert [h["call"] for h in hazards] == ["x.sum().item()"]
    reached = [h["node"] for fn in found[0].data["functions"] for h in fn["reached_by"]]
    assert {"sglang.srt.models.m.Layer.forward", "sglang.srt.models.m.Mlp.forward"} <= set(reached)


def test_gpt_oss_moe_runs_inside_capture_0513(tree_0513):
    """gpt-oss builds its decoder layers from a defaulted class parameter and its experts from a factory
    bound to a local name (``experts_type = get_moe_impl_class(...)``): both hops are followed, so the
    MXFP4 quant method taken on the H200 is found inside the decode capture."""
    paths = _moe_path(_scan(tree_0513, device="h200", model="gpt-oss-120b"))
    mx = [f for f in paths if f.data["quant_method"].endswith(".Mxfp4MoEMethod.apply")]
    assert len(mx) == 1 and mx[0].data["in_capture"] and mx[0].data["selected_for_device"]
    hops = [h["node"] for h in mx[0].data["path_to_apply"]]
    assert any(h.endswith("GptOssDecoderLayer.forward") for h in hops)
    assert any(h.endswith("FusedMoE.forward") for h in hops)
    text = [tree_0513.lines(e.path)[e.line - 1] for e in mx[0].evidence]
    assert any("self.experts(" in t for t in text) and any("layer(" in t for t in text)


# a model whose MoE block calls its quant method's apply from the captured forward
MOE_MODEL = """
class SparseMoeBlock:
    def forward(self, x):
        return self.quant_method.apply(self, x)

class DeepseekV4ForCausalLM:
    def __init__(self):
        self.mlp = SparseMoeBlock()

    def forward(self, x):
        return self.mlp.forward(x)

EntryClass = DeepseekV4ForCausalLM
"""


# the quantization registry the runtime view follows: the model's config.json says fp8, and the FP8
# config's get_quant_method returns the MXFP4 method for a FusedMoE layer (the method lives in the
# model file so the names the tests assert stay short)
QUANT_FILES = {
    "sglang/srt/layers/moe/fused_moe_triton/layer.py": "class FusedMoE:\n    pass\n",
    "sglang/srt/layers/quantization/__init__.py": (
        "from sglang.srt.layers.quantization.fp8 import Fp8Config\n"
        "QUANTIZATION_METHODS = {'fp8': Fp8Config}\n"
    ),
    "sglang/srt/layers/quantization/fp8.py": (
        "from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE\n"
        "from sglang.srt.models.m import Mxfp4MoEMethod\n"
        "class Fp8Config:\n"
        "    @classmethod\n"
        "    def from_config(cls, config):\n"
        "        return cls()\n"
        "    def get_quant_method(self, layer, prefix):\n"
        "        if isinstance(layer, FusedMoE):\n"
        "            return Mxfp4MoEMethod()\n"
        "        return None\n"
    ),
}


def _moe_tree(synthetic, methods: str):
    """A capture runner, a model whose MoE block calls ``self.quant_method.apply`` from its forward,
    the quant-method classes in ``methods`` and the registry that picks one of them."""
    return synthetic({"sglang/srt/model_executor/cuda_graph_runner.py": RUNNER,
                      "sglang/srt/models/m.py": methods + MOE_MODEL, **QUANT_FILES})


def test_no_method_is_picked_by_its_name(synthetic):
    """Without a registry the runtime view can follow, no MoE method is decided: a class named for
    the expert format (``Mxfp4MoEMethod``) reached through ``self.quant_method.apply`` is not taken
    for the one that runs, so no MoE kernel path and no hand-off note name it."""
    model = """
from fastlib.moe import fused_fp4_moe

class Mxfp4MoEMethod:
    def apply(self, layer, x):
        return fused_fp4_moe(x)
"""
    tree = synthetic({"sglang/srt/model_executor/cuda_graph_runner.py": RUNNER, "sglang/srt/models/m.py": model + MOE_MODEL})
    found = _scan(tree)
    assert not _moe_path(found)
    assert not [f for f in found if f.data.get("unresolved_quant_methods")]
    assert "Mxfp4MoEMethod" not in " ".join(f.message for f in found)
    # the same tree with the registry: the view decides the method, and its path is reported
    paths = _moe_path(_scan(_moe_tree(synthetic, model)))
    assert [(f.data["quant_method"], f.data["resolved_by"]) for f in paths] == [
        ("sglang.srt.models.m.Mxfp4MoEMethod.apply", "runtime view")]
    assert [lb["op"] for lb in paths[0].data["library_ops"]] == ["fastlib.moe.fused_fp4_moe"]


def test_quant_method_whose_kernels_are_picked_at_run_time(synthetic):
    """A MoE quant method reached from the captured forward whose apply hands off to a runner the
    graph cannot resolve: one note naming it, and no MoE kernel path claimed."""
    model = """
class Mxfp4MoEMethod:
    def apply(self, layer, x):
        return self.runner.run(x)
"""
    tree = _moe_tree(synthetic, model)
    found = _scan(tree)
    assert not _moe_path(found)
    notes = [f for f in found if f.data.get("unresolved_quant_methods")]
    assert len(notes) == 1 and notes[0].severity == "note"
    assert notes[0].data["unresolved_quant_methods"] == ["sglang.srt.models.m.Mxfp4MoEMethod.apply"]
    assert "Mxfp4MoEMethod.apply" in notes[0].message and "not resolve" in notes[0].message


def test_unresolved_quant_method_says_where_it_hands_off(synthetic):
    """The note names each call that leaves the analysed code, with the branch tests it runs under:
    a library kernel in an early-returning branch, a held runner after it; torch calls are not
    hand-offs, and tests the device decides are settled (the ROCm branch does not run on an NVIDIA
    GPU, and `not is_hip()` is not repeated in the guards after it)."""
    model = """
import torch
from fastlib.moe import fused_fp4_moe
from rocmlib import fused_moe as rocm_moe
from sglang.srt.utils import is_hip

class Runner:
    def run(self, x):
        return self.impl(x)

class Mxfp4MoEMethod:
    def __init__(self):
        self.runner = Runner()

    def apply(self, layer, x):
        if is_hip():
            return rocm_moe(x)
        if self.use_lib:
            if self.precision == "bf16":
                x = torch.nn.functional.pad(x, (0, 1))
            out = fused_fp4_moe(x)
            return out
        return self.runner.run(x)
"""
    tree = _moe_tree(synthetic, model)
    note = next(f for f in _scan(tree) if f.data.get("unresolved_quant_methods"))
    offs = note.data["handoffs"]["sglang.srt.models.m.Mxfp4MoEMethod.apply"]
    assert [(h["kind"], h["target"], h["when"]) for h in offs] == [
        ("library", "fastlib.moe.fused_fp4_moe", ["self.use_lib"]),
        ("delegation", "sglang.srt.models.m.Runner.run", ["not self.use_lib"])]
    assert [tree.lines(h["path"])[h["line"] - 1].strip() for h in offs] == ["out = fused_fp4_moe(x)",
                                                                          "return self.runner.run(x)"]
    assert "fastlib's fused_fp4_moe (when self.use_lib)" in note.message
    assert "Runner.run through self.runner (when not self.use_lib)" in note.message


def test_handoff_behind_a_module_flag_is_settled_for_the_device(synthetic):
    """A module flag made of an environment variable and a platform gate
    (`_use_rocm_lib = get_bool_env_var(...) and _is_hip`, `_is_hip = is_hip()`) is evaluated where the
    guard reads it: false on an NVIDIA GPU whatever the variable says, so the ROCm hand-off is left out
    and `not _use_rocm_lib` is not said; on an AMD GPU it depends on the variable, so both stay."""
    model = """
from fastlib.moe import fused_fp4_moe
from rocmlib import fused_moe as rocm_moe
from sglang.srt.utils import get_bool_env_var, is_hip

_is_hip = is_hip()
_use_rocm_lib = get_bool_env_var("SGLANG_USE_ROCM_LIB") and _is_hip

class Mxfp4MoEMethod:
    def apply(self, layer, x):
        if _use_rocm_lib:
            return rocm_moe(x)
        return fused_fp4_moe(x)
"""
    from recon.checks import CheckContext
    from recon.runtime import build

    tree = _moe_tree(synthetic, model)

    def leaves(device):
        view = build(CheckContext(tree, load_device(device), load_model("dsv4-flash")))
        return [(lf["name"], lf["when"], lf["decided"]) for lf in view.moe["leaves"]]

    assert leaves("h200") == [("fastlib.moe.fused_fp4_moe", [], True)]
    assert leaves("mi300x") == [("rocmlib.fused_moe", ["_use_rocm_lib"], False),
                                ("fastlib.moe.fused_fp4_moe", ["not _use_rocm_lib"], False)]
    # the check reads the same decision: on the H200 the MoE path names the one library op
    paths = _moe_path(_scan(tree, device="h200"))
    assert [lb["op"] for f in paths for lb in f.data["library_ops"]] == ["fastlib.moe.fused_fp4_moe"]


def test_module_flags_evaluated_on_a_real_tree(tree_0513):
    """0.5.13.post1's flags as the interpreter reads them: `_use_aiter = get_bool_env_var(...) and
    _is_hip` (mxfp4.py) is false on NVIDIA GPUs and open on AMD ones; `_is_cuda = is_cuda()` and the
    Blackwell flags of fp8_utils.py decide `_raw_triton_mxfp8_blockscaled_linear`'s guard per GPU."""
    from recon.checks import CheckContext
    from recon.engine.gatemodel import eval_test
    from recon.profiles import load_model

    mx = ("sglang/srt/layers/quantization/mxfp4.py", "sglang.srt.layers.quantization.mxfp4", "Mxfp4MoEMethod.apply")
    fp8 = ("sglang/srt/layers/quantization/fp8_utils.py", "sglang.srt.layers.quantization.fp8_utils",
           "_raw_triton_mxfp8_blockscaled_linear")
    guard = "not (_is_cuda and (_is_sm100_supported or _is_sm120_supported))"

    def ev(device, where, test):
        ctx = CheckContext(tree_0513, load_device(device), load_model("gpt-oss-120b"), {})
        return eval_test(ctx, *where, test)

    assert ev("h200", mx, "_use_aiter") is False and ev("h200", mx, "not _use_aiter") is True
    assert ev("mi300x", mx, "_is_hip") is True and ev("mi300x", mx, "_use_aiter") is None
    assert ev("h200", fp8, guard) is True  # raises: MXFP8 dense linear needs SM100/SM120
    assert ev("rtx-pro-6000-server", fp8, guard) is False and ev("b200", fp8, guard) is False


def test_handoff_guards_read_as_written():
    from recon.engine.handoffs import _negate

    assert _negate("self.x == 'bf16'") == "self.x != 'bf16'"
    assert _negate("a is not None") == "a is None"
    assert _negate("k not in d") == "k in d"
    assert _negate("not flag") == "flag"
    assert _negate("a and b") == "not (a and b)"
    assert _negate("self.ok") == "not self.ok"


def test_older_release_gpt_oss_kernels_picked_at_run_time(tree_old):
    """SGLang 0.5.5 picks gpt-oss's MoE backend from server arguments at run time, and one test of it
    (is the optional triton_kernels package installed?) cannot be decided statically: the spec follows
    the path with it false (the Triton fused MoE through the runner's registry) and states the other
    outcome (triton_kernels' matmul_ogs) with the test it depends on."""
    ctx = spec.spec_for(tree_old, load_device("h200"), load_model("gpt-oss-120b"))
    assert ctx["moe_path"]["quant_method"].endswith("mxfp4.Mxfp4MoEMethod.apply")
    assert ctx["moe_path"]["unresolved_in_capture"] == []
    rt = ctx["runtime"]
    assert any("is_triton_kernels_available()" in a and "triton_kernel" in a and "matmul_ogs" in a for a in rt["alternatives"])
    chain = " ".join(h["symbol"] for h in ctx["moe_path"]["chain"])
    assert "registered for ('none', 'triton')" in chain
    for h in ctx["moe_path"]["chain"]:  # every hop cites a real line of the tree
        path, _, line = h["at"].rpartition(":")
        if path in tree_old.index.files:
            assert 1 <= int(line) <= len(tree_old.lines(path))


def _moe_path(findings):
    return [f for f in findings if "quant_method" in f.data]


def test_mxfp4_moe_runs_inside_capture_0513(tree_0513):
    found = _scan(tree_0513)
    paths = _moe_path(found)
    marlin = [f for f in paths if f.data["quant_method"].endswith("Mxfp4MarlinMoEMethod.apply")]
    assert len(marlin) == 1, [f.message for f in found]
    d = marlin[0].data
    assert d["in_capture"] and d["capture_safe"] and d["selected_for_device"]
    assert any(k.endswith("._mxfp4_slot_gemv_kernel") for k in d["kernels"])
    assert any(s.endswith(".mxfp4_moe_forward_triton") for s in d["scanned"]) and not d["hazards"]
    ev = marlin[0].evidence
    text = [tree_0513.lines(e.path)[e.line - 1] for e in ev]
    assert any(e.path.endswith("model_executor/cuda_graph_runner.py") and "graph_ctx(" in t for e, t in zip(ev, text))
    assert any("_mxfp4_slot_gemv_kernel[" in t for t in text)
    assert any("mxfp4_moe_forward_triton(" in t for t in text)
    assert any("self.quant_method.apply(" in t for t in text)
    assert any("self.experts(" in t for t in text)  # the factory hop (get_moe_impl_class) was resolved
    for e, t in zip(ev, text):
        assert e.snippet in t.strip()
    hops = [h["node"] for h in d["path_to_apply"]]
    assert any(h.endswith("FusedMoE.forward") for h in hops)
    assert any(h["inferred"] for h in d["path_to_apply"])
    assert any("no host syncs" in c for c in d["constraints"])


@pytest.mark.parametrize("which", ["tree_0513", "tree_new"])
def test_hazard_lines_hold_what_they_claim(which, request):
    tree = request.getfixturevalue(which)
    found = _scan(tree)
    assert found, "a decode capture site and the model forward exist in both versions"
    for f in found:
        for e in f.evidence:
            line = tree.lines(e.path)[e.line - 1]
            assert e.snippet in line.strip()
            if e.note.startswith(("host sync:", "data-dependent shape:")):
                call = e.note.split(": ", 1)[1].split(" in ")[0]
                tok = "." + call.rsplit(".", 1)[-1].split("(")[0] + "("
                assert tok in line, (e, line)
    for f in found:  # the capture site is cited where the graph context is entered
        site = f.data.get("capture_site") or ""
        if site:
            path, line = site.rsplit(":", 1)
            assert "graph" in tree.lines(path)[int(line) - 1].lower()
    agg = [f for f in found if "functions" in f.data]
    for f in agg:  # nothing guarded by a capture check is reported as a live hazard
        live = {(h["path"], h["line"]) for fn in f.data["functions"] for h in fn["hazards"]}
        assert not live & {(g["path"], g["line"]) for g in f.data["guarded"]}


def test_new_version_says_nothing_stale(tree_new):
    found = _scan(tree_new)
    for f in found:
        for e in f.evidence:
            assert tree_new.index.files.get(e.path) is not None
        assert "mxfp4_moe_sm120_triton" not in str(f.data)  # removed in newer releases


def test_moe_runs_inside_capture_on_newer_release(tree_new):
    # 0.5.23 builds its decoder layers through a conditional alias
    # (`DeepseekV4DecoderLayer = CudaLayer if _is_cuda else PlatformLayer`): the graph follows it
    moe = [f for f in _scan(tree_new) if f.message.startswith("MoE kernel path")]
    assert moe and "runs inside the CUDA-graph capture" in moe[0].message
    assert "mxfp4_moe_sm120_triton" not in " ".join(e.path for f in moe for e in f.evidence)
    for ev in moe[0].evidence:
        assert 1 <= ev.line <= len(tree_new.lines(ev.path))
