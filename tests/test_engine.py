"""One engine per scenario: `recon kernels` resolves the server arguments once (the runtime view's
MoE walk and every layer of the map walk with the same World and evaluator), and everything recon
derives is keyed by one scheme that covers recon's data files as well as its code."""

import json
import shutil

import pytest
from typer.testing import CliRunner

from recon import derived
from recon.checks import CheckContext
from recon.cli import app
from recon.profiles import load_device, load_model

runner = CliRunner()


@pytest.fixture
def count_resolutions(monkeypatch):
    import recon.runtime.engine as engine

    calls = []
    real = engine.resolve

    def counting(*a, **k):
        calls.append(a[2] if len(a) > 2 else k.get("flags"))
        return real(*a, **k)

    monkeypatch.setattr(engine, "resolve", counting)
    return calls


def test_recon_kernels_resolves_the_server_arguments_once(sglang_new, count_resolutions, monkeypatch):
    import recon.runtime.cached as cached

    # nothing from the disk cache: the view and the map are both built in this run
    monkeypatch.setattr(cached, "load_or_build", lambda area, key, build: build())
    res = runner.invoke(app, ["kernels", "--sglang", "0.5.23", "--device", "h200", "--model", "gpt-oss-120b", "--format", "json"])
    assert res.exit_code == 0, res.output
    kmap = json.loads(res.stdout)
    assert len(count_resolutions) == 1
    # the MoE layer (the view's walk) and the other layers come from that one resolution
    kinds = {lay["kind"] for lay in kmap["layers"]}
    assert {"moe", "attention", "dense_gemm"} <= kinds


def test_view_and_map_share_the_engine(tree_new, count_resolutions, monkeypatch):
    from recon.kernels.kmap import build_map
    from recon.runtime import cached, runtime_view

    monkeypatch.setattr(cached, "load_or_build", lambda area, key, build: build())  # a cold view: its engine is built here

    ctx = CheckContext(tree_new, load_device("h200"), load_model("gpt-oss-120b"))
    view = runtime_view(ctx)
    eng = ctx.engine
    assert eng is not None and view.moe.get("method")
    build_map(ctx)
    assert ctx.engine is eng and len(count_resolutions) == 1


def test_a_data_edit_changes_every_derived_key(tmp_path, monkeypatch, tree_new):
    from recon.rules import load_rules
    from recon.scan import _cache_key

    data = tmp_path / "data"
    shutil.copytree(derived.DATA_DIR, data)
    monkeypatch.setattr(derived, "DATA_DIR", data)
    ctx = CheckContext(tree_new, load_device("h200"), load_model("gpt-oss-120b"))
    rules = load_rules()
    from recon.runtime.cached import derived_key

    before = (_cache_key(tree_new, ctx.device, ctx.model, rules, ctx.flags_key), derived_key(ctx))
    (data / "external_ops.yaml").write_text((data / "external_ops.yaml").read_text() + "\n# edited\n")
    monkeypatch.setattr(derived, "_DIGEST", {})  # a new process hashes the edited file
    after = (_cache_key(tree_new, ctx.device, ctx.model, rules, ctx.flags_key), derived_key(ctx))
    assert before[0] != after[0] and before[1] != after[1]


def test_warm_spec_reflects_an_edit_of_external_ops(tmp_path, monkeypatch, tree_new):
    """The spec reads the view kept with the findings: an edit of the op table must reach it."""
    import recon.runtime as runtime
    from recon.rules import load_rules
    from recon.spec.context import _view_of, scan

    data = tmp_path / "data"
    shutil.copytree(derived.DATA_DIR, data)
    monkeypatch.setattr(derived, "DATA_DIR", data)
    monkeypatch.setattr(derived, "_DIGEST", {})
    rules = [r for r in load_rules() if r.id == "cuda-graph-host-sync"]
    dev, mdl = load_device("h200"), load_model("gpt-oss-120b")

    def leaf_what():
        res = scan(tree_new, dev, mdl, rules, {}, {})
        view = _view_of(res)
        return {lf["name"]: lf["what"] for lf in view.moe["leaves"]}

    first = leaf_what()
    assert first.get("sgl_kernel.moe_sum_reduce") == ""  # the table has no entry for it
    ops = data / "external_ops.yaml"
    ops.write_text(ops.read_text() + "- match: 'sgl_kernel\\.moe_sum_reduce$'\n  what: top-k sum over experts (test entry)\n"
                   "  grouped_tensor_core: false\n")
    monkeypatch.setattr(derived, "_DIGEST", {})  # as a new process would
    monkeypatch.setattr(runtime, "_OPS", {})
    assert leaf_what()["sgl_kernel.moe_sum_reduce"] == "top-k sum over experts (test entry)"
