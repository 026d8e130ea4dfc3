"""Mechanisms the differential oracle (bench/oracle: SGLang's own argument resolution run beside
recon) found wrong, each pinned by a one-feature synthetic tree and by a real release that the
rest of the suite does not read (``tree_unseen``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from recon.errors import ReconError
from recon.runtime import parse_server_args

_ARG_GROUPS = {
    "sglang/srt/server_args.py": (
        "from sglang.srt.arg_groups.fields.exec_ import ExecArgs\n"
        "class ServerArgs(ExecArgs):\n"
        "    model_path: str = ''\n"
    ),
    "sglang/srt/arg_groups/choices.py": "RUNNER_CHOICES = ['auto', 'triton', 'marlin']\n",
    "sglang/srt/arg_groups/fields/exec_.py": (
        "from typing import Annotated as A\n"
        "from sglang.srt.arg_groups.arg_utils import Arg\n"
        "from sglang.srt.arg_groups.choices import RUNNER_CHOICES\n"
        "class ExecArgs:\n"
        "    moe_runner_backend: A[str, Arg(help='x', choices=RUNNER_CHOICES)] = 'auto'\n"
    ),
    "sglang/srt/arg_groups/arg_utils.py": "class Arg:\n    def __init__(self, **kw):\n        pass\n",
}


def test_choices_imported_from_another_module_are_checked(synthetic):
    # The choices list is a module-level name of another module, bound by an import: no graph node.
    tree = synthetic(_ARG_GROUPS)
    assert parse_server_args(tree, "--moe-runner-backend marlin") == {"moe_runner_backend": "marlin"}
    with pytest.raises(ReconError, match="not one of SGLang's choices .*auto, triton, marlin"):
        parse_server_args(tree, "--moe-runner-backend nonsense")


def test_bad_choice_exits_2_on_arg_groups_releases(tree_unseen, tree_new):
    for tree in (tree_unseen, tree_new):
        with pytest.raises(ReconError, match="not one of SGLang's choices") as e:
            parse_server_args(tree, "--moe-runner-backend nonsense")
        assert e.value.exit_code == 2
        with pytest.raises(ReconError, match="not one of SGLang's choices"):
            parse_server_args(tree, "--attention-backend nonsense")
        assert parse_server_args(tree, "--attention-backend triton") == {"attention_backend": "triton"}


def test_cli_bad_choice_exit_code_on_unseen_release(tree_unseen):
    from recon.cli import app
    from tests.conftest import UNSEEN_VERSION

    res = CliRunner().invoke(app, ["runtime", "--sglang", UNSEEN_VERSION, "--server-args",
                                   "--moe-runner-backend nonsense", "--format", "json"])
    assert res.exit_code == 2, res.output


_PROPERTY_TREE = {
    "sglang/srt/configs/model_config.py": (
        "class ModelConfig:\n"
        "    def __init__(self):\n"
        "        self.head_dim = 128\n"
        "        self.v_head_dim = None\n"
        "        if self.v_head_dim is None:\n"
        "            self.v_head_dim = self.head_dim\n"
        "    @property\n"
        "    def has_asymmetric_kv(self):\n"
        "        return self.head_dim != self.v_head_dim\n"
    ),
}


def _evaluator(tree, device="b200"):
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.engine.evaluator import Evaluator
    from recon.engine.gatemodel import gate_model
    from recon.engine.interp import Dev
    from recon.engine.world import World

    ctx = CheckContext(tree, load_device(device), load_model("qwen3-30b-a3b"))
    world = World(tree, ctx.model, {})
    gm = gate_model(ctx)
    world.shared_asts = gm._module_ast
    return world, Evaluator(world, Dev.of(ctx.device), gm)


def _eval(ev, text, **env):
    import ast
    return ev.eval(ast.parse(text, mode="eval").body, env, "sglang.srt.configs.model_config", "sglang.srt.configs.model_config", 0)


def test_property_is_its_getters_value_and_self_reads_see_earlier_writes(synthetic):
    from recon.engine.values import Instance

    tree = synthetic(_PROPERTY_TREE)
    world, ev = _evaluator(tree)
    mc = Instance("sglang.srt.configs.model_config.ModelConfig")
    # `if self.v_head_dim is None` reads the value the line above wrote, not an unknown
    assert world.instance_attr(mc, "v_head_dim", ev, 0) == 128
    # a @property is its getter's result (False here), never the (truthy) bound method
    assert _eval(ev, "mc.has_asymmetric_kv", mc=mc) is False


def test_mha_model_on_b200_is_trtllm_mha_not_fa4(tree_unseen, tree_new):
    # SGLang's default MHA backend on SM100 is trtllm_mha unless K and V widths differ
    # (ModelConfig.has_asymmetric_kv); Qwen3's are both 128. The oracle's answer on 0.5.23.
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.runtime import build

    for tree in (tree_unseen, tree_new):
        view = build(CheckContext(tree, load_device("b200"), load_model("qwen3-30b-a3b")), {})
        assert view.server_args["attention_backend"]["value"] == "'trtllm_mha'"


def test_getattr_with_a_name_the_helper_was_handed(synthetic):
    # def _hf_attr(config, name): return getattr(config, name, None) -- the name is a parameter
    tree = synthetic({"sglang/srt/configs/model_config.py": (
        "def _hf_attr(config, name):\n"
        "    if isinstance(config, dict):\n"
        "        return config.get(name)\n"
        "    return getattr(config, name, None)\n"
        "def is_dsa(config):\n"
        "    return _hf_attr(config, 'index_topk') is not None\n"
    )})
    world, ev = _evaluator(tree)
    assert _eval(ev, "_hf_attr(hf, 'architectures')", hf=world.hf) == ["Qwen3MoeForCausalLM"]
    assert _eval(ev, "is_dsa(hf)", hf=world.hf) is False


def test_deepseek_v3_without_dsa_keeps_its_kv_cache_dtype(tree_unseen, tree_new):
    # 0.5.20+ default the KV cache to FP8 on SM100 only for DeepSeek DSA checkpoints (is_deepseek_dsa:
    # an index_topk in config.json); V3 has none, so SGLang leaves kv_cache_dtype at 'auto'.
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.runtime import build

    for tree in (tree_unseen, tree_new):
        view = build(CheckContext(tree, load_device("b200"), load_model("deepseek-v3")), {})
        assert view.server_args.get("kv_cache_dtype", {"value": "'auto'"})["value"] == "'auto'"


_PRIVATE_FLAG_TREE = {
    "sglang/srt/server_args.py": (
        "from typing import Optional\n"
        "class ServerArgs:\n"
        "    quantization: Optional[str] = None\n"
        "    moe_runner_backend: str = 'auto'\n"
    ),
    # read by a hook that sorts before the one setting it (the hook order is not modelled)
    "sglang/srt/arg_groups/model_hook.py": (
        "def apply(server_args, quant_method='fp8'):\n"
        "    if server_args.quantization is None and not server_args._quant_unset:\n"
        "        server_args.quantization = quant_method\n"
        "    if server_args.quantization is None:\n"
        "        server_args.moe_runner_backend = 'flashinfer_trtllm'\n"
    ),
    "sglang/srt/arg_groups/serving_hook.py": (
        "def handle(server_args):\n"
        "    if server_args.quantization == 'unquant':\n"
        "        server_args._quant_unset = True\n"
        "    else:\n"
        "        server_args._quant_unset = False\n"
    ),
}


def test_a_private_attribute_an_earlier_hook_sets_is_used(synthetic):
    # SGLang 0.5.11+: serving_hook records `_quantization_explicitly_unset`, and the per-model
    # overrides copy the checkpoint's quant_method only when it is False. Undecided, recon took the
    # test as false and reported the other branch (flashinfer_trtllm) as what runs.
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.runtime import build

    view = build(CheckContext(synthetic(_PRIVATE_FLAG_TREE), load_device("b200"), load_model("qwen3-30b-a3b")), {})
    assert view.server_args["quantization"]["value"] == "'fp8'"
    assert view.server_args["moe_runner_backend"]["value"] == "'auto'"
    assert not view.forks  # decided: no other outcome
    assert not any(k.startswith("_") for k in view.server_args)


def test_glm_fp8_on_b200_keeps_auto_once_the_explicit_unset_flag_is_read(tree_new):
    # The oracle's answer on 0.5.23 (bench/oracle): the GLM-4.5 override copies quant_method
    # 'compressed-tensors' into quantization, so its flashinfer_trtllm default does not apply.
    from pathlib import Path

    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.runtime import build

    cfg = Path(__file__).resolve().parent.parent / "bench" / "oracle" / "models" / "glm-4.5-air-fp8" / "config.json"
    view = build(CheckContext(tree_new, load_device("b200"), load_model(str(cfg))), {})
    assert view.server_args["quantization"]["value"] == "'compressed-tensors'"
    assert view.server_args["moe_runner_backend"]["value"] == "'auto'"
    assert not any("moe_runner_backend" in f["changes"] for f in view.forks)


_LATER_TREE = {
    "sglang/srt/server_args.py": (
        "from typing import Optional\n"
        "class ServerArgs:\n"
        "    device: str = 'cuda'\n"
        "    attention_backend: Optional[str] = None\n"
        "    def _handle_npu_backends(self):\n"
        "        if self.device == 'npu':\n"
        "            from sglang.srt.npu_utils import set_default_server_args\n"
        "            set_default_server_args(self)\n"
    ),
    # called only under a test that fails on a CUDA device
    "sglang/srt/npu_utils.py": "def set_default_server_args(args):\n    args.attention_backend = 'ascend'\n",
    # stores the value the field already holds
    "sglang/srt/draft_worker.py": "def init(draft_server_args):\n    draft_server_args.attention_backend = None\n",
}


def test_later_writers_that_cannot_change_the_value_leave_it_decided(synthetic):
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.runtime import build

    def later(files):
        view = build(CheckContext(synthetic(files), load_device("h200"), load_model("qwen3-30b-a3b")), {})
        return [(w["path"], w["line"]) for w in view.server_args["attention_backend"].get("later", [])]

    assert later(_LATER_TREE) == []
    # a writer that does change it on this path (nothing in the tree calls it: a registry may) stays
    runner = {"sglang/srt/model_runner.py": "def pick(server_args):\n    server_args.attention_backend = 'fa3'\n"}
    assert later({**_LATER_TREE, **runner}) == [("sglang/srt/model_runner.py", 2)]


_MODEL_CONFIG_ATTR_TREE = {
    "sglang/srt/configs/model_config.py": "class ModelConfig:\n    def __init__(self, hf_config=None):\n        self.hf_config = hf_config\n",
    "sglang/srt/server_args.py": (
        "from typing import Optional\n"
        "class ServerArgs:\n"
        "    attention_backend: Optional[str] = None\n"
        "    def _handle_attention_backend(self):\n"
        "        if self.attention_backend is None:\n"
        "            if is_fa3_arch(self.model_config.hf_config):\n"
        "                self.attention_backend = 'fa3'\n"
        "            else:\n"
        "                self.attention_backend = 'flashinfer'\n"
        "    def get_model_config(self):\n"
        "        from sglang.srt.configs.model_config import ModelConfig\n"
        "        if hasattr(self, 'model_config'):\n"
        "            return self.model_config\n"
        "        self.model_config = ModelConfig.from_server_args(self)\n"
        "        return self.model_config\n"
        "def is_fa3_arch(hf_config):\n"
        "    return hf_config.architectures[0] in {'Qwen3MoeForCausalLM'}\n"
    ),
}


def test_the_model_config_server_args_cache_is_the_models_config(synthetic):
    # 0.5.5: `is_fa3_default_architecture(self.model_config.hf_config)` reads the attribute
    # get_model_config() stores; an unknown there made fa3 the fork and flashinfer the answer.
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.runtime import build

    view = build(CheckContext(synthetic(_MODEL_CONFIG_ATTR_TREE), load_device("h200"), load_model("qwen3-30b-a3b")), {})
    assert view.server_args["attention_backend"]["value"] == "'fa3'" and not view.forks
    view = build(CheckContext(synthetic(_MODEL_CONFIG_ATTR_TREE), load_device("h200"), load_model("gpt-oss-120b")), {})
    assert view.server_args["attention_backend"]["value"] == "'flashinfer'" and not view.forks


def test_hopper_attention_default_on_0_5_5_is_fa3(tree_old):
    # 0.5.5 binds `is_hopper_with_cuda_12_3 = lambda: _check(9)` (CUDA 12.8 in the device profile)
    # and reads self.model_config; SGLang's own resolution gives fa3 for both (bench/oracle).
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.runtime import build

    for model in ("qwen3-30b-a3b", "deepseek-v3"):
        view = build(CheckContext(tree_old, load_device("h200"), load_model(model)), {})
        assert view.server_args["attention_backend"]["value"] == "'fa3'", model
        assert not any("attention_backend" in f["changes"] for f in view.forks), model


def test_page_size_is_resolved_with_the_attention_backend(tree_unseen):
    # page_size defaults to None; the argument hooks set 64 for TRT-LLM MLA (DeepSeek-V3 on B200)
    # and 1 where nothing else asks for a size (SGLang's own resolution, bench/oracle).
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.runtime import build

    b200 = build(CheckContext(tree_unseen, load_device("b200"), load_model("deepseek-v3")), {})
    assert b200.server_args["attention_backend"]["value"] == "'trtllm_mla'"
    assert b200.server_args["page_size"]["value"] == "64"
    h200 = build(CheckContext(tree_unseen, load_device("h200"), load_model("deepseek-v3")), {})
    assert h200.server_args["page_size"]["value"] == "1"
    assert not any("page_size" in f["changes"] for v in (b200, h200) for f in v.forks)


_REFUSAL_TREE = {
    "sglang/srt/utils.py": (
        "import torch\n"
        "def is_blackwell():\n"
        "    return torch.cuda.get_device_capability()[0] in [10, 12]\n"
        "def is_sm100_supported():\n"
        "    return torch.cuda.get_device_capability()[0] == 10\n"
    ),
    "sglang/srt/server_args.py": (
        "from typing import Optional\n"
        "from sglang.srt.utils import is_blackwell, is_sm100_supported\n"
        "class ServerArgs:\n"
        "    attention_backend: Optional[str] = None\n"
        "    tp_size: int = 1\n"
        "    def __post_init__(self):\n"
        "        self._handle_backend()\n"
        "        self._check()\n"
        "    def _handle_backend(self):\n"
        "        if self.attention_backend is None:\n"
        "            if is_blackwell():\n"
        "                self.attention_backend = 'trtllm_mha'\n"
        "            else:\n"
        "                self.attention_backend = 'flashinfer'\n"
        "    def _check(self):\n"
        "        assert self.tp_size < 1, 'an assert is not read as a refusal'\n"
        "        if self.attention_backend == 'trtllm_mha':\n"
        "            if not is_sm100_supported():\n"
        "                raise ValueError('trtllm_mha needs SM100')\n"
        "        try:\n"
        "            raise RuntimeError('caught below')\n"
        "        except RuntimeError:\n"
        "            pass\n"
        "        for _ in []:\n"
        "            raise RuntimeError('a loop that may not run')\n"
        "    def url(self):\n"
        "        raise NotImplementedError('not part of the resolution')\n"
    ),
}


def test_a_raise_the_resolved_arguments_reach_is_a_refusal(synthetic):
    # SGLang 0.5.6.x: the default MHA backend on any Blackwell (SM100 and SM120) is trtllm_mha, and
    # the compatibility check then raises unless SM100: the server refuses to start on SM120 with
    # its own default. A raise in a helper the resolution does not call, in a try body or in a loop
    # body, or behind a test that does not hold, is no refusal.
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.runtime import build

    tree = synthetic(_REFUSAL_TREE)
    sm120 = build(CheckContext(tree, load_device("rtx-pro-6000-server"), load_model("qwen3-30b-a3b")), {})
    assert sm120.server_args["attention_backend"]["value"] == "'trtllm_mha'"
    assert [(r["path"], r["line"], r["message"]) for r in sm120.refusals] == [("sglang/srt/server_args.py", 19, "trtllm_mha needs SM100")]
    assert any("SGLang refuses" in d for d in sm120.diagnostics) and "refusals" in sm120.to_dict()
    for device in ("b200", "h200"):
        view = build(CheckContext(tree, load_device(device), load_model("qwen3-30b-a3b")), {})
        assert view.refusals == [] and "refusals" not in view.to_dict(), device
    # the user's own backend on SM120 passes the check
    ok = build(CheckContext(tree, load_device("rtx-pro-6000-server"), load_model("qwen3-30b-a3b")), {"attention_backend": "triton"})
    assert ok.refusals == []


@pytest.mark.network
def test_sglang_0_5_6_post2_refuses_its_own_default_on_sm120():
    # The oracle's answer (bench/oracle, 0.5.6.post2 on the RTX PRO 6000): ValueError from
    # _handle_attention_backend_compatibility for MHA models; 0.5.7 picks another backend there.
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.runtime import build
    from recon.target import from_version
    from recon.tree import load

    for version, refuses in (("0.5.6.post2", True), ("0.5.7", False)):
        tree = load(from_version(version))
        for model, mha in (("qwen3-30b-a3b", True), ("deepseek-v3", False)):
            view = build(CheckContext(tree, load_device("rtx-pro-6000-server"), load_model(model)), {})
            got = [r["message"] for r in view.refusals]
            if refuses and mha:
                assert len(got) == 1 and "only supported on Blackwell GPUs (SM100)" in got[0], (version, model, got)
            else:
                assert got == [], (version, model, got)
        triton = build(CheckContext(tree, load_device("rtx-pro-6000-server"), load_model("qwen3-30b-a3b")), {"attention_backend": "triton"})
        assert triton.refusals == []


# --- choices built in the parser function (issue 30: bad flags exit 2 on every release) ---------
_LOCAL_CHOICES = {
    "sglang/srt/arg_groups/choices.py": (
        "BUILT_IN = frozenset({'flashinfer', 'pytorch'})\n"
        "SAMPLING_CHOICES = set(BUILT_IN)\n"
    ),
    "sglang/srt/server_args.py": (
        "import os\n"
        "from sglang.srt.arg_groups.choices import SAMPLING_CHOICES\n"
        "class ServerArgs:\n"
        "    model_path: str = ''\n"
        "    sampling_backend: str = None\n"
        "    @staticmethod\n"
        "    def add_cli_args(parser):\n"
        "        choices = set(SAMPLING_CHOICES)\n"
        "        if os.environ.get('EXTRA'):\n"
        "            choices.add('oracle')\n"
        "        parser.add_argument('--sampling-backend', type=str, choices=choices)\n"
    ),
}


def test_choices_a_local_of_the_parser_function_are_checked(synthetic):
    # `choices=local`, the local a set of a module-level name bound to `set(frozenset({...}))`,
    # and a value added under a test (accepted: the parser takes it on some runs)
    tree = synthetic(_LOCAL_CHOICES)
    assert parse_server_args(tree, "--sampling-backend pytorch") == {"sampling_backend": "pytorch"}
    assert parse_server_args(tree, "--sampling-backend oracle") == {"sampling_backend": "oracle"}
    with pytest.raises(ReconError, match="not one of SGLang's choices") as e:
        parse_server_args(tree, "--sampling-backend nonsense")
    assert e.value.exit_code == 2


_DISPATCH_FLAGS = ["--moe-runner-backend", "--attention-backend", "--decode-attention-backend",
                   "--prefill-attention-backend", "--kv-cache-dtype", "--quantization", "--moe-a2a-backend",
                   "--fp8-gemm-backend", "--sampling-backend"]


@pytest.mark.network
@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_bad_dispatch_flags_exit_2_on_real_releases(version):
    # 0.5.9 declares its flags with add_argument in server_args.py, 0.5.23 in arg_groups/ (its
    # --sampling-backend choices a local set built from arg_groups/choices.py)
    from recon.target import from_version
    from recon.tree import load

    tree = load(from_version(version))
    for flag in _DISPATCH_FLAGS:
        with pytest.raises(ReconError, match="not one of SGLang's choices") as e:
            parse_server_args(tree, f"{flag} nonsense")
        assert e.value.exit_code == 2, flag
    assert parse_server_args(tree, "--sampling-backend pytorch") == {"sampling_backend": "pytorch"}


# --- a stand-in object's derived attributes (the attention factory's MHA/MLA choice) -------------
_RUNNER_TREE = {
    "sglang/srt/model_executor/model_runner.py": (
        "from sglang.srt.configs.model_config import AttentionArch\n"
        "class ModelRunner:\n"
        "    def __init__(self, model_config, server_args):\n"
        "        self.model_config = model_config\n"
        "        self.use_mla_backend = self.model_config.attention_arch == AttentionArch.MLA\n"
        "        self.other = server_args.x\n"
    ),
    "sglang/srt/configs/model_config.py": (
        "import enum\n"
        "class AttentionArch(enum.Enum):\n"
        "    MLA = enum.auto()\n"
        "    MHA = enum.auto()\n"
    ),
}


def test_a_stand_in_answers_what_its_constructor_derives_from_what_it_holds(synthetic):
    from recon.engine.interp import UNKNOWN
    from recon.engine.values import EnumVal, Instance
    from recon.engine.world import World
    from recon.runtime import _Blank
    from recon.engine.evaluator import Evaluator
    from recon.engine.gatemodel import gate_model
    from recon.engine.interp import Dev
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model

    tree = synthetic(_RUNNER_TREE)
    ctx = CheckContext(tree, load_device("b200"), load_model("qwen3-30b-a3b"))
    world = World(tree, _Blank())
    ev = Evaluator(world, Dev.of(ctx.device), gate_model(ctx))
    cls = "sglang.srt.model_executor.model_runner.ModelRunner"
    arch = "sglang.srt.configs.model_config.AttentionArch"
    for member, value, want in (("MHA", 2, False), ("MLA", 1, True)):
        mc = Instance("sglang.srt.configs.model_config.ModelConfig",
                      {"attention_arch": EnumVal(arch, member, value), "__only__": True})
        runner = Instance(cls, {"model_config": mc, "__only__": True})
        assert world.instance_attr(runner, "use_mla_backend", ev, 0) == want
        # a write that reads a constructor parameter stays unknown
        assert world.instance_attr(runner, "other", ev, 0) is UNKNOWN


# --- get_quant_method that hands the choice to another function (compressed-tensors, 0.5.5-0.5.8) --
_DELEGATING_QUANT = {
    "sglang/srt/layers/moe/fused_moe_triton/layer.py": "class FusedMoE:\n    pass\n",
    "sglang/srt/layers/quantization/__init__.py": (
        "from sglang.srt.layers.quantization.ct import CTConfig\n"
        "QUANTIZATION_METHODS = {'compressed-tensors': CTConfig}\n"
    ),
    "sglang/srt/layers/quantization/ct_moe.py": (
        "import os\n"
        "class CTMoEMethod:\n"
        "    @staticmethod\n"
        "    def get_moe_method(quant_config, layer, prefix):\n"
        "        if quant_config.use_int4 or os.cpu_count() > 1000:\n"
        "            return CTInt4MoEMethod(quant_config)\n"
        "        return CTFp8MoEMethod(quant_config)\n"
        "class CTInt4MoEMethod(CTMoEMethod):\n"
        "    def __init__(self, quant_config):\n"
        "        self.quant_config = quant_config\n"
        "    def apply(self, layer, x):\n"
        "        return x\n"
        "class CTFp8MoEMethod(CTMoEMethod):\n"
        "    def __init__(self, quant_config):\n"
        "        self.quant_config = quant_config\n"
        "    def apply(self, layer, x):\n"
        "        return x\n"
    ),
    "sglang/srt/layers/quantization/ct.py": (
        "from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE\n"
        "from sglang.srt.layers.quantization.ct_moe import CTMoEMethod\n"
        "class CTConfig:\n"
        "    def __init__(self, use_int4):\n"
        "        self.use_int4 = use_int4\n"
        "    @classmethod\n"
        "    def from_config(cls, config):\n"
        "        return cls(config.get('use_int4', False))\n"
        "    def get_quant_method(self, layer, prefix):\n"
        "        if isinstance(layer, FusedMoE):\n"
        "            return CTMoEMethod.get_moe_method(self, layer, prefix)\n"
        "        return None\n"
    ),
}


def test_get_quant_method_that_returns_another_functions_choice_is_followed(synthetic, tmp_path):
    # the classes the delegate constructs are the MoE layer's candidate methods, each with its test
    import json

    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.engine.engine import Engine
    from recon.runtime.moe import quant_methods

    tree = synthetic(_DELEGATING_QUANT)
    cfg = json.loads((Path(__file__).resolve().parent.parent / "bench" / "oracle" / "models" / "qwen3-30b-a3b" /
                      "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "compressed-tensors"}
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    eng = Engine(CheckContext(tree, load_device("h200"), load_model(str(tmp_path / "m"))), {}, {})
    got = quant_methods(eng.world, eng.ev)
    methods = [o["method"].rsplit(".", 1)[-1] for o in got["outcomes"] if o["method"]]
    # use_int4 is False from config.json; the other test is open: both classes, the open test named
    assert methods == ["CTFp8MoEMethod", "CTInt4MoEMethod"], got["outcomes"]
    assert all(any("cpu_count" in a["test"] for a in o["assumptions"]) for o in got["outcomes"] if o["method"])
