"""``recon kernels`` reads what the model's own code and the runtime view decide, on real wheels:
the attention backend built with the model runner (its ModelConfig), a table of callables followed
to the library op, the backend name and its decision from the resolved server arguments, the
kernels the model's attention module launches itself, collective sites read from the model's
module at tp 2, and optional work (``if grammars: all_reduce``) kept conditional."""

import pytest

from recon.checks import CheckContext
from recon.kernels.kmap import build_map
from recon.render.kernels import render_text
from recon.profiles import load_device, load_model
from tests import scenarios


def _layer(m, kind):
    return next(lay for lay in m["layers"] if lay["kind"] == kind)


@pytest.fixture(scope="module")
def gptoss_h200_tp2(tree_new):
    return build_map(CheckContext(tree_new, load_device("h200"), load_model("gpt-oss-120b"), server_flags={"tp_size": 2}))


def test_fa3_decode_reaches_the_sgl_kernel_op_on_the_non_mla_path(gptoss_h200_tp2):
    att = _layer(gptoss_h200_tp2, "attention")
    assert att["backend_name"]["value"] == "fa3"
    # the backend was built with the model runner: use_mla read from the checkpoint's ModelConfig
    assert any(s["attr"] == "use_mla" and str(s["value"]) == "False" for s in att["switches"])
    names = {o["name"] for o in att["ops"]}
    assert names == {"sgl_kernel.flash_attn.flash_attn_with_kvcache"}
    # the handler's retry (after a TypeError) is not a second launch
    assert att["per_step"]["launches"] == 36
    retry = [lf for lf in att["leaves"] if any(w.startswith("raised(TypeError") for w in lf["when"])]
    assert retry and not any(lf["primary"] for lf in retry)


def test_backend_name_is_the_runtime_views_decision(gptoss_h200_tp2):
    b = _layer(gptoss_h200_tp2, "attention")["backend_name"]
    assert b["field"] == "attention_backend" and b["path"].endswith("model_overrides/gpt_oss.py")
    assert isinstance(b["line"], int) and "is_sm90" in b["test"]


def test_collectives_are_read_from_the_model_code_at_tp2(gptoss_h200_tp2):
    comm = _layer(gptoss_h200_tp2, "communication")
    assert comm["tp_size"] == 2
    # 0.5.23's gpt_oss.py places no collective itself (its o_proj is built with reduce_results=False
    # and the MoE reduce moved out of the model's module): no site, and no assumed launch count
    assert not any(s["what"].startswith("RowParallelLinear") for s in comm["sites"])
    assert comm["sites"] == [] and comm["per_step"]["launches"] is None
    assert "calls no tensor-parallel collective" in comm["note"]


def test_token_id_sync_all_reduce_is_conditional(gptoss_h200_tp2):
    samp = _layer(gptoss_h200_tp2, "sampling")
    assert not any(o["name"] == "torch.distributed.all_reduce" for o in samp["ops"])
    ar = [lf for lf in samp["leaves"] if lf["name"] == "torch.distributed.all_reduce"]
    assert ar and all(lf["extra_if"] for lf in ar)
    assert "only if SYNC_TOKEN_IDS_ACROSS_TP or sampling_info.grammars" in render_text(gptoss_h200_tp2)


def test_dsv4_attention_module_launches_its_own_rope_kernels(tree_new):
    m = scenarios.kernel_map(tree_new, "h200", "dsv4")  # also test_kernels_map's: built once
    mod = _layer(m, "attention_module")
    assert mod["class"].endswith(".MQALayer")
    jit = [o for o in mod["ops"] if o["kind"] == "jit_kernel"]
    assert any("rope" in o["name"] for o in jit)
    assert all(o["path"].endswith(".py") and o["line"] for o in mod["ops"])
    assert mod["per_step"]["launches"] and mod["per_step"]["launches"] % load_model("dsv4").num_layers == 0
    # the embedding gather is the layer's op (not "no op")
    assert _layer(m, "embedding")["ops"]
