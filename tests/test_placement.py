"""Findings placed against the mapped step (recon.placement) on real SGLang wheels: a finding whose
site the map entered on its decided path is on-step, one in code the step never enters (diffusion,
speculative decoding) is elsewhere and binds no model sizes; SARIF and the spec follow."""

from __future__ import annotations

import re

import pytest

from recon.placement import DEVICE_FACTS, ELSEWHERE, ON_STEP, PLACEMENTS, UNDECIDED, place, step_sites

# the rules whose findings the issue found off the path (kernels, gates, host syncs), run on their own
RULES = ("triton-cuda-core-reduction", "low-occupancy-launch", "arch-gate", "cuda-graph-host-sync")


def _scan(tree, device, model):
    from recon.profiles import load_device, load_model
    from recon.rules import load_rules
    from recon.scan import run_rules

    rules = [r for r in load_rules() if r.id in RULES]
    return run_rules(tree, load_device(device), load_model(model), rules), rules


@pytest.fixture(scope="module")
def dsv4_h200(tree_new):
    return _scan(tree_new, "h200", "dsv4")


def _sizes(model) -> list[str]:
    """Model numbers a message could bind (hidden, intermediate, experts, heads)."""
    vals = {model.hidden_size, model.moe_intermediate_size, model.num_experts}
    return sorted(str(v) for v in vals if isinstance(v, int) and v > 64)


def test_every_finding_is_placed_and_off_path_kernels_are_elsewhere(dsv4_h200):
    from recon.profiles import load_model

    res, _ = dsv4_h200
    assert not res.errors
    assert res.findings and all(f.data.get("placement") in PLACEMENTS for f in res.findings)
    off = [f for f in res.findings if re.search(r"/(speculative|diffusion|lora|mamba)/", "/" + f.primary.path)]
    assert off, "0.5.23 has speculative/diffusion kernels the rules flag"
    assert all(f.data["placement"] == ELSEWHERE for f in off)
    model = load_model("dsv4")
    for f in (f for f in res.findings if f.data["placement"] == ELSEWHERE):
        assert model.name not in f.message
        assert "elsewhere in the tree" in f.message or (f.rule_id in DEVICE_FACTS and f.message.endswith("(elsewhere)"))
        assert not any(re.search(rf"\b{s}\b", f.message) for s in _sizes(model)), f.message
        # nor does its evidence bind them (the low-occupancy launches' `binds H = ...` notes)
        assert not any(re.search(rf"= {s}\b", e.note) for e in f.evidence for s in _sizes(model)), f.evidence


def test_a_site_the_step_reaches_is_on_step(dsv4_h200):
    res, _ = dsv4_h200
    s = step_sites(res.context)
    m = res.context.cache[("kernel_map", 8192)]
    att = next(lay for lay in m["layers"] if lay["kind"] == "attention")
    # the call that launches an op the map decided (every test on its way decided, or each outcome
    # of one it could not decide reaches it) is on the step
    # (0.5.23, DeepSeek-V4 on H200: the MoE's `cutlass_fused_moe` among them, once the step's
    # premise decides its `x.shape[0] == 0`); the functions the walkers entered with every test
    # decided are on it
    prim = [o for lay in m["layers"] for o in lay.get("ops", []) if o.get("decided")]
    assert prim
    for op in prim:
        assert place(s, op["via"][-1]["path"], op["via"][-1]["line"])["placement"] == ON_STEP
    G = res.context.tree.graph
    entered = [w["node"] for lay in m["layers"] for w in lay.get("walked", []) if [] in w["when"] and w["node"] in G]
    assert entered
    for n in entered:
        assert place(s, G.nodes[n]["path"], G.nodes[n]["line"])["placement"] == ON_STEP
    # an op the map lists only under tests it could not decide, in either sense (the first outcome
    # listed included), is undecided: the tests named with the file:line each is read at
    und = [o for lay in m["layers"] for o in lay.get("leaves", []) if not o.get("decided")]
    assert any(o.get("primary") for o in und), "0.5.23 DeepSeek-V4 on H200 has first outcomes that take a test as false"
    for op in und:
        got = place(s, op["via"][-1]["path"], op["via"][-1]["line"])
        if got["placement"] == ON_STEP:  # the same call is reached on a decided way too
            continue
        assert got["placement"] == UNDECIDED
        assert all(re.search(r" \[[^\]]+\.py:\d+\]$", t) for t in got["tests"] if not t.startswith("the "))
    # the chosen backend's constructor runs, but the map does not walk its branches: undecided,
    # the branch named; a backend class the map did not choose is elsewhere
    G = res.context.tree.graph
    init = f"{att['backend_class']}.__init__"
    got = place(s, G.nodes[init]["path"], G.nodes[init]["line"] + 1)
    assert got["placement"] == UNDECIDED and "branch" in got["tests"][0]
    fi = "sglang.srt.layers.attention.flashinfer_backend.FlashInferAttnBackend.__init__"
    assert place(s, G.nodes[fi]["path"], G.nodes[fi]["line"] + 1)["placement"] == ELSEWHERE
    # the findings on the step are the view's MoE path in the capture, or sit in walked functions
    for f in res.findings:
        if f.data["placement"] == ON_STEP and "quant_method" not in f.data:
            if f.rule_id == "arch-gate" and f.primary.note.endswith("defined here"):
                # a gate's definition is placed where it is read: that line is cited
                read = [e for e in f.evidence if e.note.startswith("read ")]
                assert read, f.message
                if read[0].note.startswith("read here"):
                    assert place(s, read[0].path, read[0].line)["placement"] == ON_STEP
                continue
            assert place(s, f.primary.path, f.primary.line)["placement"] == ON_STEP


def test_host_sync_blames_only_syncs_the_step_reaches(dsv4_h200):
    from recon.runtime import runtime_view

    res, _ = dsv4_h200
    s = step_sites(res.context)
    view = runtime_view(res.context)
    walked = {w["node"] for w in view.moe.get("walked", [])}
    for f in res.findings:
        if f.rule_id != "cuda-graph-host-sync":
            continue
        if "quant_method" in f.data:  # the MoE path: syncs in functions the view entered only
            assert all(any(n for n in walked if s.spans and h["path"] == res.context.tree.graph.nodes[n].get("path")) for h in f.data["hazards"])
            assert not any("deep_gemm" in h["path"] for h in f.data["hazards"]) or "deep_gemm" in (view.moe.get("apply") or "")
        elif "functions" in f.data and f.data.get("placement") != ELSEWHERE:
            # undecided says on what: the tests its hazards are reached under
            assert f.data["placement"] == ON_STEP or f.data.get("placement_tests"), f.message
            for fn in f.data["functions"]:
                # reached from the capture through calls the map did not decide off
                assert not any((r["path"], r["line"]) in s.dead and (r["path"], r["line"]) not in s.call_lines
                               for r in fn["reached_by"]), fn["function"]
                for h in fn["hazards"]:
                    assert place(s, h["path"], h["line"])["placement"] in (ON_STEP, UNDECIDED)


def test_sarif_marks_elsewhere_results(dsv4_h200):
    from recon.render.sarif import to_sarif

    res, rules = dsv4_h200
    log = to_sarif(res.findings, rules, "t", "sglang==0.5.23")
    results = log["runs"][0]["results"]
    levels = {r.id: r.severity for r in rules}
    away = [r for r in results if r["properties"].get("placement") == ELSEWHERE]
    assert away and all(r["level"] == "note" and r["properties"]["onMappedStep"] is False for r in away)
    on = [r for r in results if r["properties"].get("placement") == ON_STEP]
    assert all(r["properties"]["onMappedStep"] is True for r in on)
    und = [r for r in results if r["properties"].get("placement") == UNDECIDED]
    assert on or und
    assert all(r["properties"]["onMappedStep"] is False for r in und)
    for r, f in zip(results, sorted(res.findings, key=type(res.findings[0]).sort_key)):
        if f.data["placement"] in (ON_STEP, UNDECIDED):
            assert r["level"] == f.severity and f.severity in ("error", "warning", "note") and r["ruleId"] in levels


def test_spec_root_causes_come_from_on_step_findings_only(dsv4_h200):
    from recon.profiles import load_device, load_model
    from recon.spec.context import build_context

    res, rules = dsv4_h200
    ctx = build_context(res.context.tree, load_device("h200"), load_model("dsv4"), res.findings, res.errors, rules=rules,
                        view=res.context.view)
    placed = {f.message: f.data["placement"] for f in res.findings}
    causes = ctx["moe_path"]["root_causes"] if "moe_path" in ctx and "root_causes" in ctx["moe_path"] else ctx.get("root_causes", [])
    assert all(placed.get(c["message"], ON_STEP) == ON_STEP for c in causes)
    counts = ctx["placement_counts"]
    assert counts[ELSEWHERE] == sum(1 for f in res.findings if f.data["placement"] == ELSEWHERE) > 0
    assert len(ctx["findings"]) == len(res.findings)  # the appendix keeps every finding


def test_unseen_release_places_findings():
    """A release outside the fixtures (0.5.16): the seed's MoE kernel path for gpt-oss on H200 is
    placed on the step, the diffusion and speculative-decoding kernels elsewhere."""
    from recon.target import from_version
    from recon.tree import load

    tree = load(from_version("0.5.16"))
    res, _ = _scan(tree, "h200", "gpt-oss-120b")
    assert not res.errors
    by = {p: [f for f in res.findings if f.data["placement"] == p] for p in PLACEMENTS}
    assert by[UNDECIDED] and by[ELSEWHERE]
    spec = [f for f in res.findings if re.search(r"/(speculative|diffusion)/", f.primary.path)]
    assert spec and all(f.data["placement"] == ELSEWHERE for f in spec)
    # undecided is not false: the tests on the MoE path recon cannot decide (`has_bias` in
    # moe_runner/triton_kernels.py where triton_kernels is installed, `is_mxfp4_marlin`, LoRA's
    # `self.lora_enabled`, ...) pick no outcome: the view lists each with its file:line and the ops
    # of both outcomes; no op under one is decided; a site reached only under one is undecided,
    # naming it; the MoE-path finding whose chain ends in such ops depends on them
    from recon.runtime import runtime_view
    view = runtime_view(res.context)
    fk = view.moe["forks"]
    assert fk and all(f["path"] and f["line"] and (f["if_true"] or f["if_false"]) for f in fk)
    forked = {f["test"] for f in fk}
    under = [lf for lf in view.moe["leaves"] if any(t["test"] in forked for t in lf["tests"])]
    und = [lf for lf in under if not lf["decided"]]
    assert und
    s = step_sites(res.context)
    for lf in und:
        got = place(s, lf["path"], lf["line"])
        assert got["placement"] == UNDECIDED and all(re.search(r" \[[^\]]+\.py:\d+\]$", t) for t in got["tests"] if not t.startswith("the "))
    # an op reached under both senses of a test (Triton's fused_moe_kernel, by the in-place and the
    # out-of-place functions) runs whichever way it goes: decided, on the step
    for lf in (lf for lf in under if lf["decided"]):
        assert place(s, lf["path"], lf["line"])["placement"] == ON_STEP
    moe = [f for f in res.findings if f.rule_id == "cuda-graph-host-sync" and "quant_method" in f.data]
    assert moe and moe[0].data["resolved_by"] == "runtime view"
    if any(not lf["decided"] for lf in view.primary_leaves()):
        assert moe[0].data["placement"] == UNDECIDED and moe[0].data["placement_tests"]
    # the spec's plan, written for that chain, says which outcome it assumes
    from recon.profiles import load_device, load_model
    from recon.spec.context import build_context
    ctx = build_context(res.context.tree, load_device("h200"), load_model("gpt-oss-120b"), res.findings, res.errors, view=view)
    if ctx["moe_path"].get("assumes"):
        assert all(re.search(r"\[[^\]]+:\d+\]$", t) for t in ctx["moe_path"]["assumes"])
        assert any(p.get("assumes") == ctx["moe_path"]["assumes"] for p in ctx["plan"])


def test_a_callee_called_only_from_a_dead_branch_is_not_reached():
    """The graph's reach one call beyond the decided path skips a call in a branch the engine
    decided does not run (0.5.21, gpt-oss on H200: `moe_forward_native`, called from
    `Mxfp4MoEMethod.apply` only under `if _is_cpu:`, counted its host sync as undecided)."""
    import networkx as nx

    from recon.placement import StepSites, _add_callees

    G = nx.MultiDiGraph()
    G.add_node("m.apply", kind="function", qualname="M.apply", path="m.py", line=1)
    G.add_node("m.native", kind="function", qualname="native", path="n.py", line=1)
    G.add_node("m.other", kind="function", qualname="other", path="o.py", line=1)
    G.add_edge("m.apply", "m.native", kind="calls", path="m.py", line=5)
    G.add_edge("m.apply", "m.other", kind="calls", path="m.py", line=7)
    s = StepSites()
    s._add(s.functions, "m.apply", ())
    s.dead.add(("m.py", 5))
    _add_callees(s, G)
    assert "m.native" not in s.callees and "m.other" in s.callees


def test_gate_definitions_are_placed_where_they_are_read(dsv4_h200):
    """A gate's definition states the device's value, a fact of the device: it keeps that message
    wherever it is placed (no rule title over a function it never decides). One read by a server
    argument the scenario resolves is on the step, the argument's line cited; one read nowhere the
    step goes says so."""
    res, _ = dsv4_h200
    defs = [f for f in res.findings if f.rule_id == "arch-gate" and f.evidence[0].note.endswith("defined here")]
    assert defs
    for f in defs:
        assert re.search(r" is (true|false|unknown) on NVIDIA H200 ", f.message), f.message
        assert not f.message.startswith("Architecture gate decides"), f.message
        if f.data["placement"] == ELSEWHERE:
            assert f.message.endswith("(elsewhere)")
        read = [e for e in f.evidence if e.note.startswith("read deciding ")]
        if read:
            assert f.data["placement"] == ON_STEP
    # the platform's properties decide DeepSeek-V4's server arguments on H200: some gate is read so
    assert any(e.note.startswith("read deciding ") for f in defs for e in f.evidence)


def test_elsewhere_evidence_binds_no_model_size():
    """An off-step finding's evidence names where a size is read, not the value the model gave it."""
    from recon.placement import unbound_note

    assert unbound_note("binds H = 64 at batch 1 (num_attention_heads)") == "H is read from the model's num_attention_heads (not applied here)"
    assert unbound_note("binds bs = 1 at batch 1 (M)") == "bs is read from the decode batch (not applied here)"
    assert unbound_note("binds BLOCK_H = 16 at batch 1 (code)") == "binds BLOCK_H = 16 at batch 1 (code)"


METHOD = '''class Method:
    def __init__(self, backend):
        self.use_fi = backend == "fi"
        self.kernel = None
        if self.use_fi:
            if is_sm100():
                self.kernel = "trtllm"
            else:
                self.kernel = "cutlass"
        if not self.use_fi:
            self.kernel = "triton"
        else:
            self.kernel = "other"
'''


def test_a_branch_the_construction_decides_off_is_elsewhere(synthetic):
    """In a constructor the map evaluated (`self.use_fi = False` there), the body of `if
    self.use_fi:` and the `else` of `if not self.use_fi:` do not run: elsewhere, saying why, not
    undecided on "the branch holding this line runs" (0.5.21, gpt-oss on H200:
    `Mxfp4MoEMethod.__init__` setting `_fi_kernel` under `if self.use_flashinfer:`)."""
    from recon.placement import StepSites, _add_dead_branches, dead_branch

    tree = synthetic({"sglang/srt/m.py": METHOD})
    path = "sglang/srt/m.py"
    s = StepSites()
    s.spans = {path: [(2, 13, "sglang.srt.m.Method.__init__")]}
    s._add(s.functions, "sglang.srt.m.Method.__init__", ("the branch of `Method.__init__` holding this line runs",))
    s.constructed = [(path, 3, "use_fi", "False")]
    _add_dead_branches(s, tree)
    for line in (6, 7, 9, 13):
        assert "`self.use_fi` is False" in dead_branch(s, path, line)
        got = place(s, path, line)
        assert got["placement"] == ELSEWHERE and got["branch_off"]
    for line in (4, 11):
        assert dead_branch(s, path, line) is None and place(s, path, line)["placement"] == UNDECIDED
