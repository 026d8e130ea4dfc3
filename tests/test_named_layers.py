"""A quant config that chooses per named layer, on a released wheel (0.5.20, ``tree_unseen``):
the layer's name is read from the model's construction code (``recon.runtime.prefixes``) and
``get_quant_method(layer, prefix)`` is evaluated for it, so ``is_layer_skipped(prefix,
ignored_layers)`` is decided per layer -- never guessed for a layer kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recon.checks import CheckContext
from recon.engine.engine import Engine
from recon.profiles import load_device, load_model
from recon.runtime.moe import quant_methods
from recon.runtime.prefixes import LINEAR_PATH, MOE_PATH, layer_prefix

DEEPSEEK_V3 = Path(__file__).resolve().parent.parent / "bench" / "oracle" / "models" / "deepseek-v3"


def _engine(tree, model_dir: Path) -> Engine:
    return Engine(CheckContext(tree, load_device("h200"), load_model(str(model_dir))))


def _methods(eng, prefix):
    got = quant_methods(eng.world, eng.ev, prefix=prefix)
    return [(o["method"].rsplit(".", 1)[-1], [(a["test"], a["holds"]) for a in o["assumptions"]])
            for o in got["outcomes"] if not o["raises"]]


@pytest.fixture(scope="module")
def ignoring_layer_3(tmp_path_factory):
    """DeepSeek-V3's config.json with layer 3's experts left unquantized (``modules_to_not_convert``,
    which SGLang's Fp8Config reads as its ignored layers, with and without the ``model.`` prefix)."""
    d = tmp_path_factory.mktemp("ds3-ignored")
    cfg = json.loads((DEEPSEEK_V3 / "config.json").read_text())
    cfg["quantization_config"]["modules_to_not_convert"] = ["layers.3.mlp.experts"]
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_layer_names_come_from_the_models_construction_code(tree_unseen):
    eng = _engine(tree_unseen, DEEPSEEK_V3)
    assert layer_prefix(eng.world, eng.ev, MOE_PATH, 3) == "model.layers.3.mlp.experts"
    assert layer_prefix(eng.world, eng.ev, LINEAR_PATH, 7) == "model.layers.7.self_attn.o_proj"
    assert layer_prefix(eng.world, eng.ev, ("mlp", "no_such_module"), 3) is None


def test_a_named_layer_decides_is_layer_skipped(tree_unseen):
    eng = _engine(tree_unseen, DEEPSEEK_V3)
    # any MoE layer: the skip test is open, both methods named with it
    anyl = _methods(eng, None)
    assert {m for m, _ in anyl} == {"Fp8MoEMethod", "UnquantizedFusedMoEMethod"}
    assert all(a and "is_layer_skipped" in a[0][0] for _, a in anyl)
    # layer 3 by name, no ignored layers in the checkpoint: decided
    assert _methods(eng, "model.layers.3.mlp.experts") == [("Fp8MoEMethod", [])]


def test_the_fused_mapping_is_what_the_models_constructor_hands_the_config(tree_unseen):
    """``self.packed_modules_mapping = mapping`` in ``update_packed_modules_mapping`` writes only
    where it is called: DeepSeek-V3's constructor calls it with its class table, to which it adds
    the fused q/kv-a projection under ``q_lora_rank``; nothing calls it for Qwen3-MoE, whose
    config keeps what ``from_config`` gave it."""
    from recon.runtime.moe import from_config, registry

    eng = _engine(tree_unseen, DEEPSEEK_V3)
    inst = from_config(eng.world, eng.ev, registry(eng.world)["fp8"][0])
    assert eng.world.instance_attr(inst, "packed_modules_mapping", eng.ev, 0) == \
        {"fused_qkv_a_proj_with_mqa": ["q_a_proj", "kv_a_proj_with_mqa"]}
    qwen = _engine(tree_unseen, DEEPSEEK_V3.parent / "qwen3-30b-a3b-fp8-per-tensor")
    inst = from_config(qwen.world, qwen.ev, registry(qwen.world)["fp8"][0])
    assert qwen.world.instance_attr(inst, "packed_modules_mapping", qwen.ev, 0) == {}


def test_ignored_layers_stay_open_where_the_loader_may_rename_them(tree_unseen, ignoring_layer_3):
    """With ignored layers the loader's name mapper may rewrite the list
    (``apply_weight_name_mapper``, called by the loader for a model class that has one): recon
    keeps both methods under ``is_layer_skipped`` instead of guessing either."""
    eng = _engine(tree_unseen, ignoring_layer_3)
    got = _methods(eng, "model.layers.3.mlp.experts")
    assert {m for m, _ in got} == {"Fp8MoEMethod", "UnquantizedFusedMoEMethod"}
    assert all(a and "is_layer_skipped" in a[0][0] for _, a in got)
