"""Will it run: op-arch-support and family-gate on real SGLang wheels, the op data they read, and the
mark `recon kernels` puts on a layer whose op has no kernels for the device.

DeepSeek-V4-Flash on SGLang 0.5.13.post1 calls DeepGEMM's fp8_einsum for the attention output (wo_a)
under `_FP8_WO_A_GEMM` (SGLANG_OPT_FP8_WO_A_GEMM, declared default on), with no arch guard, and the
release pins sgl-deep-gemm 0.1.2, whose wheel ships sm90/sm100 kernels only: on an RTX PRO 6000 it
stops at the first forward ("Unsupported architecture", sglang #25877). On the H200 the same op is
built; on 0.5.20 (sgl-deep-gemm 0.2.0, with sm120 kernels) it is built for sm_120 too.
"""

from __future__ import annotations

import json

import pytest

from recon.checks import CheckContext
from recon.profiles import load_device, load_model
from recon.rules import load_rules
from recon.scan import run_rules

RULES = [r for r in load_rules() if r.id in ("op-arch-support", "family-gate")]


def _findings(tree, device, model="dsv4"):
    res = run_rules(tree, load_device(device), load_model(model), RULES)
    assert not res.errors, res.errors
    return res.findings


def test_op_data_rows_carry_evidence_and_known_archs():
    from recon.engine.opreqs import _rows
    archs = {d.sm for d in __import__("recon.profiles", fromlist=["x"]).list_devices()}
    for _, d in _rows():
        assert str(d.get("evidence", "")).strip(), d["match"]
        rows = [d["archs"]] if "archs" in d else [r["archs"] for r in d["builds"]]
        for a in rows:
            assert a == "any" or set(a) <= archs, (d["match"], a)


def test_support_follows_the_pinned_version(tree_0513):
    from recon.engine.opreqs import support
    s = support(tree_0513, "deep_gemm.fp8_einsum", "sm_120")
    assert (s.runs, s.version, s.first_with) == (False, "0.1.2", ">=0.1.5")
    assert support(tree_0513, "deep_gemm.fp8_einsum", "sm_90").runs is True
    assert support(tree_0513, "deep_gemm.get_num_sms", "sm_120").runs is True  # a host query, no kernel
    # an op no row matches is not known, never assumed to run
    unknown = support(tree_0513, "some_lib.mystery_kernel", "sm_120")
    assert unknown.runs is None and not unknown.known


def test_dsv4_on_sm120_reaches_deepgemm_without_sm120_kernels(tree_0513):
    errs = [f for f in _findings(tree_0513, "rtx-pro-6000") if f.rule_id == "op-arch-support" and f.severity == "error"]
    hit = [f for f in errs if f.data["op"] == "deep_gemm.fp8_einsum"]
    assert hit, [f.message for f in errs]
    f = hit[0]
    assert f.primary.path == "sglang/srt/models/deepseek_v4.py"
    assert f.data["on_path"] and f.data["arch"] == "sm_120" and f.data["version"] == "0.1.2"
    assert "sm_120" not in f.data["built_for"] and "sm_100" in f.data["built_for"]
    # the route (the environment default that turns the FP8 wo_a GEMM on) and what avoids it
    assert any(r.get("env") == "SGLANG_OPT_FP8_WO_A_GEMM" for r in f.data["routed_by"])
    assert any("SGLANG_OPT_FP8_WO_A_GEMM=0" in a for a in f.data["avoid"])
    assert any(">=0.1.5" in a for a in f.data["avoid"])


def test_same_path_on_h200_gives_no_error(tree_0513):
    errs = [f for f in _findings(tree_0513, "h200") if f.rule_id == "op-arch-support" and f.severity == "error"]
    assert not errs, [f.message for f in errs]


def test_a_release_pinning_sm120_kernels_gives_no_error():
    from recon.target import from_version
    from recon.tree import load
    tree = load(from_version("0.5.20"))
    errs = [f for f in _findings(tree, "rtx-pro-6000") if f.rule_id == "op-arch-support" and f.severity == "error"]
    assert not errs, [f.message for f in errs]


def test_kernels_marks_the_layer(tree_0513):
    from recon.kernels.kmap import map_for
    from recon.render.kernels import render_text
    ctx = CheckContext(tree_0513, load_device("rtx-pro-6000"), load_model("dsv4"))
    m = map_for(ctx)
    lay = next(x for x in m["layers"] if x["kind"] == "attention_module")
    assert [w["op"] for w in lay["will_run"] if w["runs"] is False] == ["deep_gemm.fp8_einsum"]
    text = render_text(m)
    assert "!! WILL NOT RUN on sm_120: fp8_einsum" in text
    h200 = map_for(CheckContext(tree_0513, load_device("h200"), load_model("dsv4")))
    assert not any(w["runs"] is False for x in h200["layers"] for w in x.get("will_run", []))


def test_spec_says_it_will_not_run_before_the_moe_path(tree_0513):
    from recon import spec
    ctx = spec.spec_for(tree_0513, load_device("rtx-pro-6000"), load_model("DeepSeek-V4-Flash"))
    rows = ctx["will_it_run"]
    assert rows and rows[0]["severity"] == "error"
    # both DeepGEMM ops the step reaches without sm_120 kernels: the wo_a einsum and the decoder
    # layer's hyper-connection pre-norm
    assert {"deep_gemm.fp8_einsum", "deep_gemm.tf32_hc_prenorm_gemm"} <= {r["op"] for r in rows if r["severity"] == "error"}
    md = spec.render(ctx, "md")
    assert "### Will it run" in md and "This deployment will fail" in md
    assert md.index("### Will it run") < md.index(f"## 2. {spec.SECTIONS[1]}")


def test_sarif_levels(tree_0513):
    from recon.render.sarif import to_sarif
    found = _findings(tree_0513, "rtx-pro-6000")
    doc = to_sarif(found, RULES, "test", "sglang==0.5.13.post1")
    doc = json.loads(doc) if isinstance(doc, str) else doc
    levels = {(r["ruleId"], r["level"]) for run in doc["runs"] for r in run["results"]}
    assert ("op-arch-support", "error") in levels


def _family(tree, device="gb10", model="dsv4"):
    rules = [r for r in load_rules() if r.id == "family-gate"]
    res = run_rules(tree, load_device(device), load_model(model), rules)
    assert not res.errors, res.errors
    return res.findings


def test_family_gate_follows_the_configurer_flag_in_front_of_deepgemm(tree_unseen):
    # 0.5.20: DeepSeek-V4's wo_a fp8_einsum takes its scale recipe from
    # `if deep_gemm_wrapper.DEEPGEMM_SCALE_UE8M0`, a flag of deep_gemm_wrapper/configurer.py, whose
    # `if sm_version == 120:` probe leaves GB10 (sm_121) out of its family (sglang #36551, PR #39482)
    hits = [f for f in _family(tree_unseen) if f.primary.path == "sglang/srt/layers/deep_gemm_wrapper/configurer.py"]
    assert hits, "no family-gate finding in the DeepGEMM configurer"
    f = hits[0]
    assert f.data["kind"] == "split" and "sm_120" in f.data["other_value_on"] and "deep_gemm.fp8_einsum" in f.data["ops"]
    assert "== 120" in f.data["test"]


def test_family_gate_quiet_once_the_configurer_names_sm121(tree_new):
    # 0.5.23 tests `sm_version in (120, 121)`: nothing splits the family there
    assert not [f for f in _family(tree_new) if "deep_gemm_wrapper" in f.primary.path]


# --- the ops the map reaches through the backend the runner publishes and the decoder layer ----------

def test_hc_prenorm_reached_from_the_decoder_layer(tree_0513):
    # DeepSeek-V4's decoder layer runs its hyper-connection pre-norm itself (hc_pre -> mhc_pre ->
    # the DeepGEMM wrapper's tf32_hc_prenorm_gemm under SGLANG_OPT_DEEPGEMM_HC_PRENORM, declared
    # default on): sglang #25877, DeepGEMM #317 (Unsupported architecture at hyperconnection.hpp:56)
    errs = [f for f in _findings(tree_0513, "rtx-pro-6000") if f.rule_id == "op-arch-support" and f.severity == "error"]
    hit = [f for f in errs if f.data["op"] == "deep_gemm.tf32_hc_prenorm_gemm"]
    assert hit, [f.message for f in errs]
    f = hit[0]
    assert f.data["layer"] == "decoder_layer" and f.data["on_path"] and f.data["version"] == "0.1.2"
    assert f.primary.path == "sglang/srt/layers/deep_gemm_wrapper/entrypoint.py"
    # the environment test around the wrapper's caller routes here, and its other value avoids it;
    # the outer TileLang switch is a route but not an avoid (its other branch reaches the same op)
    envs = {r["env"]: r for r in f.data["routed_by"] if r.get("env")}
    assert envs["SGLANG_OPT_DEEPGEMM_HC_PRENORM"]["path"] == "sglang/srt/layers/mhc.py"
    assert any("SGLANG_OPT_DEEPGEMM_HC_PRENORM=0" in a for a in f.data["avoid"])
    assert not any("SGLANG_OPT_USE_TILELANG_MHC_PRE=" in a for a in f.data["avoid"])


def test_indexer_reached_through_the_published_backend(tree_0513):
    # MQALayer.forward takes the backend from get_attn_backend() (the forward context the model
    # runner publishes) and its C4 indexer calls attn_backend.forward_c4_indexer, which imports
    # DeepGEMM's paged MQA logits (sglang #23657); the indexer exists on compress-ratio-4 layers only,
    # so it is reached under `self.indexer is not None` (a warning, not an error of every layer)
    from recon.kernels.kmap import map_for
    ctx = CheckContext(tree_0513, load_device("rtx-pro-6000"), load_model("dsv4"))
    m = map_for(ctx, 8192)
    mod = next(x for x in m["layers"] if x["kind"] == "attention_module")
    lf = next(x for x in mod["leaves"] if x["name"] == "deep_gemm.fp8_paged_mqa_logits")
    assert lf["path"] == "sglang/srt/layers/attention/dsv4/indexer.py" and "self.indexer is not None" in lf["when"]
    # the backend's own forward is the attention layer's: handed on, not walked twice
    assert any(h["method"].endswith("DeepseekV4AttnBackend.forward") for h in mod.get("handed_on", []))
    assert not any(x["name"].endswith("_tiled_sparse_decode_kernel") for x in mod["leaves"])
    found = [f for f in _findings(tree_0513, "rtx-pro-6000") if f.rule_id == "op-arch-support"
             and f.data["op"] == "deep_gemm.fp8_paged_mqa_logits"]
    assert found and found[0].severity == "warning" and not found[0].data["on_path"]


def test_metadata_import_follows_the_environment(tree_0513):
    # PagedIndexerMetadata.__post_init__ (built by init_forward_metadata) imports
    # get_paged_mqa_logits_metadata from SGLang's JIT kernels or from DeepGEMM by
    # SGLANG_OPT_USE_JIT_INDEXER_METADATA (declared default on): the default takes the JIT one
    from recon.kernels.kmap import map_for
    names = {}
    for env in ({}, {"SGLANG_OPT_USE_JIT_INDEXER_METADATA": "0"}):
        ctx = CheckContext(tree_0513, load_device("rtx-pro-6000"), load_model("dsv4"), env=env)
        pre = map_for(ctx, 8192)["prefill"]["attention"]
        names[bool(env)] = {x["name"] for x in pre["ops"]}
    assert "deep_gemm.get_paged_mqa_logits_metadata" not in names[False]
    assert any("paged_mqa_metadata" in n for n in names[False])  # the JIT kernel (load_jit)
    assert "deep_gemm.get_paged_mqa_logits_metadata" in names[True]


def test_fixed_release_runs_the_same_ops_on_sm120(tree_unseen):
    # 0.5.20 pins sgl-deep-gemm 0.2.0 (sm120_* kernels): the same ops, reached the same way, run
    found = _findings(tree_unseen, "rtx-pro-6000")
    bad = [f for f in found if f.rule_id == "op-arch-support" and f.severity in ("error", "warning")
           and ("hc_prenorm" in f.data["op"] or "mqa_logits" in f.data["op"])]
    assert not bad, [f.message for f in bad]


def test_a_prefill_map_built_on_the_decode_map_equals_one_walk_of_both(tree_0513):
    # map_for builds a map with a prefill step from the scenario's decode map and a walk of the
    # prefill attention only; that must be what one walk of every layer and the prefill gives
    from recon.kernels.kmap import _with_prefill, build_map
    one_walk = build_map(CheckContext(tree_0513, load_device("rtx-pro-6000"), load_model("dsv4")), 8192)
    ctx = CheckContext(tree_0513, load_device("rtx-pro-6000"), load_model("dsv4"))
    composed = _with_prefill(ctx, build_map(ctx), 8192)
    assert composed["prefill"]["attention"]["ops"]  # the prefill attention launches something
    assert json.dumps(composed, sort_keys=True, default=str) == json.dumps(one_walk, sort_keys=True, default=str)


def test_an_undecided_first_outcome_is_not_said_to_be_routed(tree_unseen):
    """gpt-oss on H200 (0.5.20): the backend is triton_kernel and the MXFP4 method builds its runner
    from it (`self.runner = MoeRunner(backend, config)` in `create_moe_runner`), so `MoeRunner.run`'s
    runner core is the triton_kernels one and the Triton core's `moe_sum_reduce` is not on the path
    (it was once reported as an undecided first outcome). An op reached only under tests recon could
    not decide is said to be undecided, with its tests, and the layer's backend decision is not
    called its route. Values keep their own quotes once (`'triton_kernel'`, not `"'triton_kernel'"`)."""
    fs = [f for f in _findings(tree_unseen, "h200", "gpt-oss-120b") if f.rule_id == "op-arch-support"]
    assert fs, "the attention op recon has no entry for is reported"
    assert not [f.message for f in fs if f.data["on_path"] and "moe_sum_reduce" in f.message]
    und = [f for f in fs if f.data["on_path"] and f.data.get("placement") == "undecided"]
    for f in und:
        assert "undecided)" in f.message and ", routed by " not in f.message, f.message
        assert not any(e.note.startswith("routes here") for e in f.evidence)
    assert not any("\"'" in f.message for f in fs)
