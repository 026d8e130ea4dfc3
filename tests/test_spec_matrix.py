"""Every bundled model on every test release, and the other device kinds on the newest: the spec
builds and renders (Markdown and JSON), no check crashes, and the runtime view resolves a MoE
quant method for every quantized MoE model. A crash here is a spec that a user would get as a
traceback instead of an answer."""

import json

import pytest

from recon.profiles import list_models, load_device
from recon.spec import render, spec_for

MODELS = sorted(m.short or m.name for m in list_models())


def _every_model_renders(tree, model):
    from recon.profiles import load_model

    m = load_model(model)
    ctx = spec_for(tree, load_device("rtx-pro-6000"), m)
    assert ctx["errors"] == [], ctx["errors"]
    md = render(ctx, "md")
    assert md.startswith("# ") and "## 7." in md
    assert json.loads(render(ctx, "json"))["model"]["name"] == m.name
    rt = ctx["runtime"]
    if m.expert_quant not in ("bf16", "fp16"):
        # SGLang's registry knows every bundled quantized model's method on every test release
        assert rt and rt["config_class"], (tree.target.version, model, rt and rt.get("note"))


# One class per release: `--dist loadscope` (the README's command) gives each class to one worker,
# so the matrix, the suite's largest file, is spread over both instead of holding one to the end.
class TestOldRelease:
    @pytest.mark.parametrize("model", MODELS)
    def test_every_model_renders(self, tree_old, model):
        _every_model_renders(tree_old, model)


class TestSeedRelease:
    @pytest.mark.parametrize("model", MODELS)
    def test_every_model_renders(self, tree_0513, model):
        _every_model_renders(tree_0513, model)


class TestNewestRelease:
    @pytest.mark.parametrize("model", MODELS)
    def test_every_model_renders(self, tree_new, model):
        _every_model_renders(tree_new, model)


class TestOtherDevices:
    @pytest.mark.parametrize("device", ["h200", "b200", "mi300x", "a100-80gb"])
    def test_other_devices_render_on_the_newest_release(self, tree_new, device):
        from recon.profiles import load_model

        ctx = spec_for(tree_new, load_device(device), load_model("dsv4"))
        assert ctx["errors"] == [], ctx["errors"]
        assert "## 7." in render(ctx, "md")
