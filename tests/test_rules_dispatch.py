"""arch-gate, backend-selection, misleading-backend-name, quant-format-mismatch on real SGLang trees.

Every cited line is re-read from the tree and must hold what the finding claims.
"""

from __future__ import annotations

import pytest

from recon.checks import CheckContext
from recon.profiles import load_device, load_model
from recon.rules import load_rules
from recon.scan import run_rules

RULES = ("arch-gate", "backend-selection", "misleading-backend-name", "quant-format-mismatch")


def _scan(tree, device="rtx-pro-6000", model="DeepSeek-V4-Flash", ids=RULES):
    rules = [r for r in load_rules() if r.id in ids]
    res = run_rules(tree, load_device(device), load_model(model), rules)
    assert not res.errors, res.errors
    return res


@pytest.fixture(scope="module")
def scan_0513(tree_0513):
    return _scan(tree_0513)


@pytest.fixture(scope="module")
def scan_0513_h200(tree_0513):
    return _scan(tree_0513, "h200")


@pytest.fixture(scope="module")
def scan_new(tree_new):
    return _scan(tree_new)


def _by(res, rule_id):
    return [f for f in res.findings if f.rule_id == rule_id]


def _line(tree, ev):
    return tree.lines(ev.path)[ev.line - 1]


# --- arch-gate ----------------------------------------------------------------------------------


def test_is_sm120_supported_true_on_pro6000(tree_0513, scan_0513):
    gate = [f for f in _by(scan_0513, "arch-gate") if f.data.get("gate") == "is_sm120_supported"]
    assert len(gate) == 1
    f = gate[0]
    assert f.data["value"] is True and f.data["form"] == "assignment" and f.data["wraps"] == "_check_cuda_device_version"
    assert f.data["kwargs"] == {"device_capability_majors": [12], "cuda_version": (12, 8)}
    assert (f.evidence[0].path, f.evidence[0].line) == ("sglang/srt/utils/common.py", 277)
    assert "is_sm120_supported" in _line(tree_0513, f.evidence[0])
    assert "[12]" in f.data["predicate"] and f.data["true_on"] == ["rtx-5090", "rtx-pro-6000"]
    # alias chain is one finding that names both
    bw = [f for f in _by(scan_0513, "arch-gate") if f.data.get("gate") in ("is_blackwell", "is_blackwell_supported")
          and f.evidence[0].path == "sglang/srt/utils/common.py"]
    assert len(bw) == 1 and set(bw[0].data["aliases"]) | {bw[0].data["gate"]} == {"is_blackwell", "is_blackwell_supported"}
    assert bw[0].data["value"] is True and "b200" in bw[0].data["true_on"]


def test_gates_false_on_h200(tree_0513, scan_0513_h200):
    vals = {f.data["gate"]: f.data["value"] for f in _by(scan_0513_h200, "arch-gate") if "gate" in f.data}
    assert vals["is_sm120_supported"] is False and vals["is_sm90_supported"] is True and vals["is_sm100_supported"] is False


def test_evaluate_gates_shared_cache(tree_0513):
    from recon.engine.gatemodel import DEFAULT_DISCOVERY, evaluate_gates

    ctx = CheckContext(tree_0513, load_device("rtx-pro-6000"), load_model("dsv4"))
    vals = evaluate_gates(ctx)
    assert vals["sglang.srt.utils.common.is_sm120_supported"] is True
    assert vals["sglang.srt.utils.common.is_sm100_supported"] is False
    assert ctx.cache[("gates", DEFAULT_DISCOVERY)] is vals
    assert evaluate_gates(ctx) is vals


def test_sm120_patch_site(tree_0513, scan_0513):
    sites = [f for f in _by(scan_0513, "arch-gate") if "_patch_sm120_mxfp4_min_warps" in f.data.get("patches", [])]
    assert sites, "the SM120 min-warps patch applied under is_sm120_supported() in mxfp4.py"
    f = sites[0]
    assert f.evidence[0].path == "sglang/srt/layers/quantization/mxfp4.py" and f.data["value"] is True
    assert "is_sm120_supported" in _line(tree_0513, f.evidence[0])
    assert "_patch_sm120_mxfp4_min_warps()" in _line(tree_0513, f.evidence[1])


def test_platform_property_gates_on_new(tree_new, scan_new):
    gates = {f.data["gate"]: f for f in _by(scan_new, "arch-gate") if "gate" in f.data}
    assert gates["is_sm120_supported"].data["value"] is True
    assert gates["is_sm120"].data["value"] is True and gates["is_sm121"].data["value"] is False
    # get_platform().is_sm120 resolves through the platform table to is_sm120_supported
    sites = [f for f in _by(scan_new, "arch-gate") if "site" in f.data and "get_platform().is_sm120" in f.data["test"]]
    assert sites and all(f.data["value"] is True for f in sites if f.data["test"] == "get_platform().is_sm120")


@pytest.mark.parametrize("which", ["tree_0513", "tree_new"])
def test_cited_lines_hold_the_gate(which, request):
    tree = request.getfixturevalue(which)
    res = request.getfixturevalue(which.replace("tree_", "scan_"))
    fs = _by(res, "arch-gate")
    assert len(fs) > 10
    for f in fs:
        text = _line(tree, f.evidence[0])
        if "gate" in f.data:
            assert f.data["gate"] in text or any(a in text for a in f.data["aliases"]), (f.message, text)
        else:
            names = [n.split(".")[-1].rstrip("()") for n in f.data["gates"]] + [f.data["test"].split("(")[0].split(".")[-1]]
            tokens = [t for t in __import__("re").findall(r"\w+", f.data["test"]) if len(t) > 3]
            assert any(n in text for n in names) or any(t in text for t in tokens), (f.message, text)


# --- backend-selection / misleading-backend-name ------------------------------------------------


def test_backend_sm120_triton(tree_0513, scan_0513):
    fs = [f for f in _by(scan_0513, "backend-selection") if f.data["attribute"] == "_dsv4_mxfp4_backend"]
    assert len(fs) == 1
    f = fs[0]
    path = "sglang/srt/layers/quantization/mxfp4_marlin_moe.py"
    assert f.data["value"] == "sm120_triton" and f.data["taken"] is True
    assert f.data["set_in"] == ["sglang.srt.layers.quantization.mxfp4_marlin_moe.Mxfp4MarlinMoEMethod.process_weights_after_loading", path, 145]
    assert f.data["taken_in"] == ["sglang.srt.layers.quantization.mxfp4_marlin_moe.Mxfp4MarlinMoEMethod.apply", path, 181]
    lines = tree_0513.lines(path)
    assert '"sm120_triton"' in lines[144] and "_dsv4_mxfp4_backend" in lines[144]
    assert '== "sm120_triton"' in lines[180]
    chain = [c[0] for c in f.data["chain"]]
    assert "sglang.srt.layers.moe.fused_moe_triton.mxfp4_moe_sm120_triton.mxfp4_moe_forward_triton" in chain
    assert "sglang.srt.layers.moe.fused_moe_triton.mxfp4_moe_sm120_triton._mxfp4_slot_gemv_kernel" in f.data["kernels"]
    # what H200 takes instead, in the same finding
    assert f.data["reference"]["h200"]["value"] == "marlin"
    assert any("MarlinMoeQuantInfo" in c[0] for c in f.data["reference"]["h200"]["chain"])


def test_backend_on_h200(scan_0513_h200):
    fs = [f for f in _by(scan_0513_h200, "backend-selection") if f.data["attribute"] == "_dsv4_mxfp4_backend"]
    assert len(fs) == 1 and fs[0].data["value"] == "marlin" and fs[0].data["taken"] is False
    assert fs[0].data["set_in"][2] == 166
    assert not _by(scan_0513_h200, "misleading-backend-name")


def test_misleading_marlin_name(tree_0513, scan_0513):
    fs = _by(scan_0513, "misleading-backend-name")
    assert len(fs) == 1
    f = fs[0]
    assert f.data["class"].endswith("Mxfp4MarlinMoEMethod") and f.data["named_for"] == "marlin" and "triton" in f.data["actual"]
    assert any("MarlinMoeQuantInfo" in q for q in f.data["not_run"])
    assert "sm120_triton" in _line(tree_0513, f.evidence[0])
    assert "Mxfp4MarlinMoEMethod" in _line(tree_0513, f.evidence[1])


def test_new_release_says_nothing_stale(tree_new, scan_new):
    """0.5.23 removed the sm120_triton path: no finding may name it; other selections still resolve."""
    for rid in ("backend-selection", "misleading-backend-name"):
        for f in _by(scan_new, rid):
            assert "sm120_triton" not in f.message
    fs = _by(scan_new, "backend-selection")
    assert any(f.data["attribute"] == "_fi_kernel" and f.data["value"] == "cutlass_sm120" for f in fs)


@pytest.mark.parametrize("which", ["tree_0513", "tree_new"])
def test_backend_cited_lines(which, request):
    tree = request.getfixturevalue(which)
    res = request.getfixturevalue(which.replace("tree_", "scan_"))
    for f in _by(res, "backend-selection"):
        attr, value = f.data["attribute"], f.data["value"]
        set_text = tree.lines(f.data["set_in"][1])[f.data["set_in"][2] - 1]
        assert attr in set_text and repr(value)[1:-1] in set_text
        cmp_text = tree.lines(f.data["taken_in"][1])[f.data["taken_in"][2] - 1]
        assert attr in cmp_text
        for ev in f.evidence[2:]:
            callee = ev.note.split()[-1]
            assert callee in _line(tree, ev) or callee.split("(")[0] in _line(tree, ev)


# --- quant-format-mismatch ----------------------------------------------------------------------


def test_cutlass_fp4_group_mm_nvfp4_vs_mxfp4(tree_0513, scan_0513):
    fs = [f for f in _by(scan_0513, "quant-format-mismatch") if f.data["entry"] == "cutlass_fp4_group_mm"]
    assert len(fs) == 1
    f = fs[0]
    assert f.data["requires"]["format"] == "nvfp4" and f.data["requires"]["group_size"] == 16 and f.data["requires"]["scale_dtype"] == "e4m3"
    assert f.data["model"] == {"format": "mxfp4", "group_size": 32, "scale_dtype": "e8m0"}
    assert any("NVFP4" in a for a in f.data["adapt"]) and any("UE8M0" in a for a in f.data["adapt"])
    assert f.data["device_native"] is True
    for ev in f.evidence:
        assert "cutlass_fp4_group_mm" in _line(tree_0513, ev)


def test_format_mismatch_new_release(tree_new, scan_new):
    fs = _by(scan_new, "quant-format-mismatch")
    assert not any(f.data["entry"] == "cutlass_fp4_group_mm" for f in fs)  # removed in 0.5.23
    for f in fs:
        for ev in f.evidence:
            assert f.data["entry"] in _line(tree_new, ev)


def test_format_mismatch_silent_for_bf16_model(tree_0513):
    res = _scan(tree_0513, model="Qwen3-30B-A3B", ids=("quant-format-mismatch",))
    assert not res.findings


# --- synthetic trees: one mechanism each ---------------------------------------------------------


def _ctx(tree, device="rtx-pro-6000"):
    return CheckContext(tree, load_device(device), load_model("dsv4"))


def test_gate_forms_synthetic(synthetic):
    tree = synthetic({
        "sglang/srt/utils/common.py": (
            "import os\nimport torch\nfrom functools import lru_cache, partial\n\n"
            "def _check(majors, cuda_version):\n"
            "    if not is_cuda():\n        return False\n"
            "    return torch.cuda.get_device_capability()[0] in majors and tuple(map(int, torch.version.cuda.split('.')[:2])) >= cuda_version\n\n"
            "def is_cuda():\n    return torch.version.cuda is not None\n\n"
            "is_new = is_sm120_ok = lru_cache(maxsize=1)(partial(_check, majors=[12], cuda_version=(13, 0)))\n"
            "is_bw = lru_cache(maxsize=1)(partial(_check, majors=[10, 12], cuda_version=(12, 8)))\n\n"
            "def is_hopper():\n    major, minor = torch.cuda.get_device_capability()\n    return major == 9\n\n"
            "def is_sm90_plus():\n    return torch.cuda.get_device_capability() >= (9, 0)\n\n"
            "def supports_fp4():\n    return is_bw() and not is_hopper()\n\n"
            "def supports_nvswitch():\n    return is_bw() and os.path.exists('/dev/nvidia-nvswitchctl')\n"
        ),
    })
    from recon.engine.gatemodel import evaluate_gates

    vals = {k.rsplit(".", 1)[-1]: v for k, v in evaluate_gates(_ctx(tree)).items()}
    assert vals["is_bw"] is True and vals["is_sm90_plus"] is True
    assert vals["is_hopper"] is False  # `major, minor = get_device_capability()` unpacked: 12 != 9
    assert vals["supports_fp4"] is True
    assert vals["supports_nvswitch"] is None  # true and (a file on the host): unknown, never guessed
    assert vals["is_new"] is False  # CUDA 12.8 on the profile, the gate wants 13.0
    h = {k.rsplit(".", 1)[-1]: v for k, v in evaluate_gates(_ctx(tree, "h200")).items()}
    assert h["is_bw"] is False and h["supports_fp4"] is False and h["is_hopper"] is True
    assert h["supports_nvswitch"] is False
    amd = {k.rsplit(".", 1)[-1]: v for k, v in evaluate_gates(_ctx(tree, "mi300x")).items()}
    assert amd["is_bw"] is False  # no CUDA on ROCm


def test_gate_predicate_folds_early_returns():
    """A gate's predicate says what it returns on each path: guards returning False or True chain
    with the final return, any other early return becomes a conditional (not just the last line)."""
    import ast

    from recon.engine.gatemodel import _predicate_of

    def pred(src):
        return _predicate_of(ast.parse(src).body[0])

    assert pred("def g():\n    if _is_hip:\n        return cap() >= (9, 4)\n    return False\n") == \
        "cap() >= (9, 4) if _is_hip else False"
    assert pred("def g():\n    if not a:\n        return False\n    if b:\n        return True\n    return c and d\n") == \
        "a and (b or (c and d))"
    assert pred("def g():\n    if not is_cuda():\n        return False\n    return x in y and z\n") == \
        "is_cuda() and (x in y and z)"  # the final return stays one operand, as written
    assert pred("def g():\n    print(1)\n") == "g()"


def test_platform_table_synthetic(synthetic):
    tree = synthetic({
        "sglang/srt/utils/common.py": (
            "import torch\n\ndef is_sm120_supported():\n    return torch.cuda.get_device_capability()[0] == 12\n\n"
            "def is_sm100_supported():\n    return torch.cuda.get_device_capability()[0] == 10\n"
        ),
        "sglang/srt/runtime_context.py": (
            "_PROBES = {'is_sm120': 'is_sm120_supported', 'is_sm100': 'is_sm100_supported'}\n\n"
            "class Ctx:\n    def __getattr__(self, name):\n        return _PROBES[name]\n\n"
            "def get_platform():\n    return Ctx()\n"
        ),
        "sglang/srt/layers/x.py": (
            "from sglang.srt.runtime_context import get_platform\n\n"
            "def pick():\n    if get_platform().is_sm120:\n        return 1\n    return 2\n"
        ),
    })
    res = _scan(tree, ids=("arch-gate",))
    sites = [f for f in res.findings if "site" in f.data]
    assert len(sites) == 1 and sites[0].data["value"] is True and sites[0].evidence[0].line == 4
