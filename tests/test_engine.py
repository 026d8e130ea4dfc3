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
    import recon.engine.engine as engine

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
    """The scenario's view and its kernel map read one resolution: the same engine object, and the
    values each shows (the view's server arguments; the map's attention backend, MoE runner backend,
    tp_size and CUDA-graph setting) are that engine's state."""
    from recon.runtime import cached
    from recon.engine.values import plain
    from recon.scenario import open_scenario

    monkeypatch.setattr(cached, "load_or_build", lambda area, key, build: build())  # a cold view: its engine is built here

    sc, _ = open_scenario(tree_new, "h200", "gpt-oss-120b")
    view = sc.view
    eng = sc.ctx.engine
    assert eng is not None and view.moe.get("method")
    kmap = sc.kernel_map()
    assert sc.ctx.engine is eng and sc.engine is eng and len(count_resolutions) == 1
    st = eng.state
    assert view.server_args and all(d["value"] == plain(st.get(k)) for k, d in view.server_args.items())
    layers = {lay["kind"]: lay for lay in kmap["layers"]}
    att = layers["attention"]["backend_name"]
    assert att["value"] == st.get(att["field"])
    if att["field"] in view.server_args:
        assert plain(att["value"]) == view.server_args[att["field"]]["value"]  # the view shows values as plain() text
    assert layers["moe"]["backend"] == view.server_args["moe_runner_backend"]
    assert kmap["tp_size"] == (st.get("tp_size") if isinstance(st.get("tp_size"), int) else 1)
    assert kmap["cuda_graph"]["captured"] == (st.get("disable_cuda_graph") is False)


def test_scan_and_spec_read_the_scenario(tree_new):
    """`recon scan` and `recon spec` run their checks on the scenario's own context: the findings
    carry it, and the view the spec reads is the scenario's view object (no second view, none
    fished out of a cache entry of the findings)."""
    from recon.rules import load_rules
    from recon.scan import run_scenario
    from recon.scenario import open_scenario
    from recon.spec.context import _view_of

    sc, _ = open_scenario(tree_new, "h200", "gpt-oss-120b")
    res = run_scenario(sc.ctx, [r for r in load_rules() if r.id == "cuda-graph-host-sync"])
    assert not res.errors and res.context is sc.ctx
    assert _view_of(res) is sc.view and sc.view.moe_decided


def test_no_guess_by_name_where_the_view_decided(tree_new, tmp_path):
    """A checkpoint whose quantization this release does not register: the view decides that no MoE
    method can be followed (and says why); the CUDA-graph check then names no MoE kernel path, where
    it once picked the quant-method class named for the expert format (MXFP4) by its name."""
    import yaml

    from recon.rules import load_rules
    from recon.scan import run_scenario
    from recon.scenario import open_scenario

    prof = yaml.safe_load((derived.DATA_DIR / "models" / "gpt-oss-120b.yaml").read_text())
    prof["hf_config"]["quantization_config"]["quant_method"] = "recon_unregistered"
    prof["name"] = prof["short"] = "gpt-oss-unregistered"
    prof["aliases"] = []
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(prof))
    sc, _ = open_scenario(tree_new, "h200", str(path))
    res = run_scenario(sc.ctx, [r for r in load_rules() if r.id == "cuda-graph-host-sync"], use_cache=False)
    assert not res.errors
    view = sc.view
    assert view.moe_decided and not view.moe_method
    assert any("recon_unregistered" in d and "registry" in d for d in view.diagnostics)
    assert not [f for f in res.findings if "quant_method" in f.data]
    assert not any("guess by name" in f.message for f in res.findings)


def test_a_data_edit_changes_every_derived_key(tmp_path, monkeypatch, tree_new):
    from recon.rules import load_rules
    from recon.scan import cache_key

    data = tmp_path / "data"
    shutil.copytree(derived.DATA_DIR, data)
    monkeypatch.setattr(derived, "DATA_DIR", data)
    ctx = CheckContext(tree_new, load_device("h200"), load_model("gpt-oss-120b"))
    rules = load_rules()
    from recon.derived import scenario_key

    before = (cache_key(ctx, rules), scenario_key(ctx))
    (data / "external_ops.yaml").write_text((data / "external_ops.yaml").read_text() + "\n# edited\n")
    monkeypatch.setattr(derived, "_DIGEST", {})  # a new process hashes the edited file
    after = (cache_key(ctx, rules), scenario_key(ctx))
    assert before[0] != after[0] and before[1] != after[1]


def test_warm_spec_reflects_an_edit_of_external_ops(tmp_path, monkeypatch, tree_new):
    """The spec reads the view kept with the findings: an edit of the op table must reach it."""
    import recon.engine.opreqs as opreqs
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
    monkeypatch.setattr(opreqs, "_OPS", {})
    assert leaf_what()["sgl_kernel.moe_sum_reduce"] == "top-k sum over experts (test entry)"
