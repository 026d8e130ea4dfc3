"""recon spec: the optimization spec on real SGLang trees (0.5.13.post1 and the newest), and its roofline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recon import roofline, spec
from recon.profiles import load_device, load_model

REPO = Path(__file__).resolve().parent.parent
KERNEL = "sglang/srt/layers/moe/fused_moe_triton/mxfp4_moe_sm120_triton.py"


def _line_of(tree, path: str, needle: str) -> int:
    """The 1-based line of ``path`` holding ``needle``, read from the tree (so tests follow the code)."""
    for i, line in enumerate(tree.lines(path), 1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


def _flat(md: str) -> str:
    """The Markdown with its folded lines joined (prose folds at 100 columns, recon.columns)."""
    return " ".join(md.split())


def _build(tree, device, model="DeepSeek-V4-Flash"):
    return spec.spec_for(tree, load_device(device), load_model(model))


@pytest.fixture(scope="module")
def seed(tree_0513):
    ctx = _build(tree_0513, "rtx-pro-6000")
    return ctx, spec.render(ctx, "md")


@pytest.fixture(scope="module")
def h200(tree_0513):
    ctx = _build(tree_0513, "h200")
    return ctx, spec.render(ctx, "md")


@pytest.fixture(scope="module")
def newest(tree_new):
    ctx = _build(tree_new, "rtx-pro-6000")
    return ctx, spec.render(ctx, "md")


# --- roofline -----------------------------------------------------------------------------------


def test_expert_bytes_match_the_measured_benchmark():
    m = load_model("DeepSeek-V4-Flash")
    eb = roofline.model_expert_bytes(m)
    assert (eb.w13, eb.w13_scale, eb.w2, eb.w2_scale) == (2 * 2048 * 4096 // 2, 2 * 2048 * 128, 4096 * 2048 // 2, 4096 * 64)
    bench = json.loads((REPO / "recon/data/anchors" / spec.REFERENCE_RESULTS).read_text())
    row = next(r for r in bench["rows"] if r["model"] == "DeepSeek-V4-Flash" and r["M"] == 1)
    assert row["uniq"] * eb.total == row["bytes"]  # the bytes the kernel benchmark counted


def test_unique_experts_formula():
    assert roofline.unique_experts(1, 8, 256) == pytest.approx(8.0)
    assert roofline.unique_experts(16, 8, 256) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 16))
    assert 255 < roofline.unique_experts(1024, 8, 256) <= 256


def test_the_benchmark_table_is_made_from_the_one_results_file():
    """bench/reference_impl/results.md is report.py's table of the results recon reads (one copy)."""
    assert not (REPO / "bench/reference_impl/results.json").exists()
    bundled = json.loads((REPO / "recon/data/anchors" / spec.REFERENCE_RESULTS).read_text())
    md = (REPO / "bench/reference_impl/results.md").read_text()
    for r in bundled["rows"]:
        if r.get("ms") is not None:
            assert f"{r['ms']:.4f}" in md, r


def test_slot_gap_is_an_estimate_off_the_measured_device():
    m = load_model("DeepSeek-V4-Flash")
    on_h200 = roofline.slot_gap(m, load_device("h200"))
    on_pro = roofline.slot_gap(m, load_device("rtx-pro-6000"))
    assert on_h200["estimate"] is False and on_pro["estimate"] is True
    r1 = next(r for r in on_pro["rows"] if r["M"] == 1)
    assert r1["slot_layer_ms"] > next(r for r in on_h200["rows"] if r["M"] == 1)["slot_layer_ms"]
    assert r1["fraction_of_roofline"] < 0.05  # the slot path is a few % of roofline


# --- the seed scenario on 0.5.13.post1 ----------------------------------------------------------


def test_sections_in_order(seed):
    _, md = seed
    pos = [md.index(f"## {i}. {title}") for i, title in enumerate(spec.SECTIONS, 1)]
    assert pos == sorted(pos)


def test_summary_numbers(seed):
    ctx, md = seed
    s = ctx["summary"]
    assert s["batch1"]["experts"] == 8.0 and s["batch1"]["layer_mb"] == 106.95
    assert s["batch1"]["step_mb"] == pytest.approx(106.95 * 43, rel=1e-3)
    assert s["batch1"]["floor_ms"] == pytest.approx(106954752 * 43 / 1.79e12 * 1e3, rel=1e-3)
    assert s["gap"] and "an estimate" in s["gap"]["kind"]
    assert "0.5.13.post1" in md and "NVIDIA RTX PRO 6000 Blackwell Server Edition" in md


def test_key_facts_with_file_line(seed, tree_0513):
    ctx, md = seed
    for needle in ("acc += tl.sum(a_even", "acc += tl.sum(a_odd"):
        assert f"{KERNEL}:{_line_of(tree_0513, KERNEL, needle)}" in md
    common = "sglang/srt/utils/common.py"
    assert f"`is_sm120_supported` = **True** (`{common}:{_line_of(tree_0513, common, 'is_sm120_supported =')}`" in _flat(md)
    quant = "sglang/srt/layers/quantization/mxfp4_marlin_moe.py"
    assert ctx["moe_path"]["backend"]["value"] == "sm120_triton"
    set_line = _line_of(tree_0513, quant, 'layer._dsv4_mxfp4_backend = "sm120_triton"')
    assert ctx["moe_path"]["backend"]["set_at"] == f"{quant}:{set_line}"
    assert ctx["integration"]["swap_in"]["symbol"] == "Mxfp4MarlinMoEMethod.apply"
    fp8 = "sglang/srt/layers/quantization/fp8_kernel.py"
    assert f"(`{fp8}:{_line_of(tree_0513, fp8, 'json_file_name = f')}`)" in _flat(md)
    assert "| `cutlass_fp4_group_mm` | NVFP4 (e2m1) | 16 | E4M3 |" in md
    assert "the model's experts are MXFP4 (group 32, E8M0 scales)" in _flat(md)
    assert ctx["integration"]["in_capture"] is True and "runs **inside** the decode CUDA graph" in _flat(md)
    assert any(h["symbol"].endswith("_mxfp4_slot_gemv_kernel") for h in ctx["moe_path"]["chain"])
    assert "```mermaid" in md and "flowchart TD" in ctx["moe_path"]["mermaid"]


def test_weights_as_created(seed, tree_0513):
    ctx, _ = seed
    w = {t["name"]: t for t in ctx["moe_path"]["weights"]["tensors"]}
    assert w["w13_weight"]["shape"] == [256, 4096, 2048] and w["w13_weight"]["dtype"] == "int8"
    assert w["w2_weight"]["shape"] == [256, 4096, 1024] and w["w2_weight"]["bytes_per_expert"] == 4096 * 1024
    path, line = w["w13_weight"]["at"].rsplit(":", 1)
    assert "torch.nn.Parameter" in tree_0513.lines(path)[int(line) - 1]


def test_root_causes_ranked(seed):
    ctx, _ = seed
    rules = [c["rule"] for c in ctx["moe_path"]["root_causes"]]
    assert rules[0] == "triton-cuda-core-reduction" and "slot-reread" in rules and "triton-inner-loop-dequant" in rules
    assert rules.index("slot-reread") < rules.index("triton-inner-loop-dequant")


def test_plan_cites_the_measured_kernel(seed):
    ctx, md = seed
    tiers = [p["tier"] for p in ctx["plan"]]
    assert sorted(tiers) == ["best", "cheapest", "cheapest", "cheapest", "medium"]  # + conversion at load, dense tuning
    # ranked by the share of the step each takes off (the step budget); unmeasured ones last
    saves = [p["saves_us"] for p in ctx["plan"]]
    known = [s for s in saves if s is not None]
    assert known == sorted(known, reverse=True) and saves[: len(known)] == known
    shipped = [p for p in ctx["plan"] if p["ships"]]
    assert [p["tier"] for p in shipped] == ["medium"]
    # the H200 measurement at M=1, its floor at the H200's one bandwidth (the measured copy bandwidth)
    bench = json.loads((Path(__file__).resolve().parent.parent / "recon/data/anchors" / spec.REFERENCE_RESULTS).read_text())
    row = next(r for r in bench["rows"] if r["model"] == "DeepSeek-V4-Flash" and r["M"] == 1)
    frac = row["bytes"] / (load_device("h200").bandwidth_tbs * 1e12) * 1e3 / row["ms"]
    assert f"{100 * frac:.1f}% of roofline" in shipped[0]["expected"]
    assert "shipped by `recon apply`" in _flat(md)


def test_deterministic_and_json_round_trip(seed, tree_0513):
    ctx, md = seed
    again = _build(tree_0513, "rtx-pro-6000")
    assert spec.render(again, "md") == md
    assert spec.render(again, "json") == spec.render(ctx, "json")
    assert json.loads(spec.to_json(ctx)) == ctx


# --- other devices ------------------------------------------------------------------------------


def test_h200_differs(seed, h200):
    pro, _ = seed
    ctx, md = h200
    assert ctx["device"]["name"] == "NVIDIA H200"
    assert (ctx["moe_path"]["backend"] or {}).get("value") != "sm120_triton"
    sm120 = [g for g in ctx["gates"] if g["gate"] == "is_sm120_supported"]
    assert sm120 and sm120[0]["value"] is False
    # the backend choices listed are those taken inside the method the view resolved for the device:
    # the marlin method's `_dsv4_mxfp4_backend` runs on the PRO 6000, not on the H200 (Fp8MoEMethod there)
    def taken(c):
        return {b["taken_in"].split(".")[0] for b in c["moe_path"]["backends"]}

    assert ctx["runtime"]["method"].endswith(".Fp8MoEMethod") and taken(ctx) <= {"Fp8MoEMethod", "FusedMoEMethodBase"}
    assert not [b for b in ctx["moe_path"]["backends"] if b["attribute"] == "_dsv4_mxfp4_backend"]
    marlin = [b for b in pro["moe_path"]["backends"] if b["attribute"] == "_dsv4_mxfp4_backend"]
    assert marlin and marlin[0]["value"] == "sm120_triton" and taken(pro) == {"Mxfp4MarlinMoEMethod"}
    files = lambda c: {m["file"] for d in c["dense_fp8"] for m in d["missing"]}  # noqa: E731
    # the H200 runs the dense FP8 GEMMs on DeepGEMM: the Triton block-GEMM configs are not read there
    assert files(pro) and not files(ctx)
    assert ctx["summary"]["batch1"]["floor_ms"] < pro["summary"]["batch1"]["floor_ms"]  # more bandwidth
    assert "_mxfp4_slot_gemv_kernel" not in md.split("## 3.")[0].split("## 2.")[1].split("### Weight")[0]


# --- no MoE path ----------------------------------------------------------------------------------


def test_newest_release_says_what_is_gone(newest):
    ctx, md = newest
    assert ctx["moe_path"]["slot_kernel"] is None
    assert any("per-slot CUDA-core MoE kernel" in n for n in ctx["not_found"])
    assert "**Not found in this tree**" in md
    assert not any("_mxfp4_slot_gemv_kernel" in f["message"] for f in ctx["findings"])
    pos = [md.index(f"## {i}. {title}") for i, title in enumerate(spec.SECTIONS, 1)]
    assert pos == sorted(pos)


def test_synthetic_tree_without_moe(synthetic):
    from recon.rules import load_rules
    from recon.scan import run_rules

    tree = synthetic({"sglang/srt/models/tiny.py": "class TinyForCausalLM:\n    def forward(self, x):\n        return x\n\nEntryClass = TinyForCausalLM\n"})
    dev, mdl = load_device(None), load_model(None)
    res = run_rules(tree, dev, mdl, load_rules())
    ctx = spec.build_context(tree, dev, mdl, res.findings, res.errors)
    md = spec.render(ctx, "md")
    assert ctx["moe_path"]["found"] is False and ctx["integration"]["swap_in"] is None
    assert any("DeepseekV4ForCausalLM" in n for n in ctx["not_found"])
    assert any("dispatch chain" in n for n in ctx["not_found"])
    assert "No dispatch chain" in md and "## 7. Appendix" in md


def test_a_warm_spec_is_read_from_the_cache_as_it_was_built(synthetic, tmp_path, monkeypatch):
    from recon import scan
    from recon.scenario import Scenario

    monkeypatch.setenv("RECON_CACHE_DIR", str(tmp_path / "cache"))
    tree = synthetic({"sglang/srt/models/tiny.py": "class TinyForCausalLM:\n    def forward(self, x):\n        return x\n\nEntryClass = TinyForCausalLM\n"})
    dev, mdl = load_device(None), load_model(None)
    cold = spec.spec_of(Scenario(tree, dev, mdl).ctx, target_reason="first")
    real = scan.run_scenario

    def no_scan(*a, **k):
        raise AssertionError("a warm spec ran the checks")

    monkeypatch.setattr(scan, "run_scenario", no_scan)
    warm = spec.spec_of(Scenario(tree, dev, mdl).ctx, target_reason="first")
    assert spec.render(warm, "json") == spec.render(cold, "json") and spec.render(warm, "md") == spec.render(cold, "md")
    # what the spec shows beyond the tree's content is in the key: another reason is another entry
    monkeypatch.setattr(scan, "run_scenario", real)
    other = spec.spec_of(Scenario(tree, dev, mdl).ctx, target_reason="second")
    assert other["target"]["reason"] == "second" and cold["target"]["reason"] == "first"


# --- the command ----------------------------------------------------------------------------------


def test_cli_bad_device_exits_2_and_writes_nothing(tmp_path):
    from recon.cli import app

    out = tmp_path / "spec.md"
    r = CliRunner().invoke(app, ["spec", "--device", "no-such-gpu", "-o", str(out)])
    assert r.exit_code == 2 and "rtx-pro-6000" in r.output and not out.exists()
    r = CliRunner().invoke(app, ["spec", "--model", "no-such-model", "-o", str(out)])
    assert r.exit_code == 2 and "DeepSeek-V4-Flash" in r.output and not out.exists()


def test_cli_json_to_file(tmp_path, sglang_0513, seed):
    from recon.cli import app

    out = tmp_path / "spec.json"
    r = CliRunner().invoke(app, ["spec", "--sglang", "0.5.13.post1", "--format", "json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["summary"] == seed[0]["summary"] and data["target"]["version"] == "0.5.13.post1"


# --- the kernel on a device without measurements: a prediction ----------------------------------


def _arch_row(major: int) -> tuple[dict, list]:
    """reference_impl/arch.py's row for ``major`` and its COMPILED list, read here with ast too."""
    import ast

    tree = ast.parse((REPO / "reference_impl" / "arch.py").read_text())
    vals = {n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)}
    table = {ast.literal_eval(k): {kw.arg: ast.literal_eval(kw.value) for kw in v.keywords} for k, v in zip(vals["_TABLE"].keys, vals["_TABLE"].values)}
    return table[major], [tuple(c) for c in ast.literal_eval(vals["COMPILED"])]


def test_kernel_row_on_sm120_is_a_labelled_prediction(seed):
    ctx, md = seed
    od = ctx["reference_kernel"]["on_device"]
    row, compiled = _arch_row(12)
    assert od["measured"] is False and od["arch"] == "sm_120" and od["supported"]
    assert od["paths"] == ["dot"] + [p for p in ("mma", "wgmma") if row.get(p)] and "wgmma" not in od["paths"]
    assert od["compiled_in_ci"] is ((12, 0) in compiled) and od["compiled_as"] == "sm_120"
    bench = json.loads((REPO / "recon/data/anchors" / spec.REFERENCE_RESULTS).read_text())
    measured = {r["M"]: r for r in bench["rows"] if r["model"] == "DeepSeek-V4-Flash"}
    floors = {r["M"]: r for r in ctx["roofline"]["rows"]}
    bw = load_device("rtx-pro-6000").mem_bandwidth_tbs * 1e12
    predicted = [r for r in od["rows"] if r.get("prediction")]
    assert {r["M"] for r in predicted} >= {1, 16}
    for r in predicted:
        m = measured[r["M"]]
        assert r["path"] == m["config"]["path"] == "mma"
        # the H200's fraction of its floor at its one bandwidth (the measured copy bandwidth of its profile)
        frac = m["bytes"] / (load_device("h200").bandwidth_tbs * 1e12) * 1e3 / m["ms"]
        want = floors[r["M"]]["step_bytes"] / bw * 1e3 / frac
        assert abs(r["predicted_step_ms"] - want) <= 5e-5 * max(1.0, want)
        assert abs(r["predicted_layer_ms"] - floors[r["M"]]["layer_bytes"] / bw * 1e3 / frac) <= 5e-5
    one = next(r for r in predicted if r["M"] == 1)
    # labelled a prediction in both outputs: the plan's kernel row and the table of section 6
    medium = next(p for p in ctx["plan"] if p["tier"] == "medium")
    assert "PREDICTION, not measured" in medium["expected"] and f"{one['predicted_step_ms']} ms/step" in medium["expected"]
    assert "compiled for sm_120 in CI" in medium["expected"]
    assert "a prediction, not a measurement" in _flat(md)
    assert f"| 1 | `mma` | sm_120 | {one['h200_pct_roofline']}% | {one['floor_step_ms']} | {one['predicted_step_ms']} (prediction) |" in md
    assert json.loads(spec.render(ctx, "json"))["reference_kernel"]["on_device"]["rows"][0]["prediction"] is True


def test_kernel_rows_the_h200_cannot_predict_say_why():
    from recon.spec import plan

    device, model = load_device("rtx-pro-6000"), load_model("DeepSeek-V4-Flash")
    data = roofline._anchor(spec.REFERENCE_RESULTS)
    rows = [r for r in data["rows"] if r["model"] == "DeepSeek-V4-Flash"]
    od = plan.on_device(model, device, roofline.moe_roofline(model, device, [1, 1024]), data, rows)
    by_m = {r["M"]: r for r in od["rows"]}
    assert by_m[1]["prediction"] is True and by_m[1]["path"] == "mma"
    # the H200 runs wgmma at M=1024, which sm_120 cannot: no number is invented for the dot path it runs
    assert by_m[1024]["h200_path"] == "wgmma" and by_m[1024]["path"] == "dot"
    assert "prediction" not in by_m[1024] and "cannot run" in by_m[1024]["why_not"]


def test_kernel_row_on_the_h200_stays_measured(h200):
    ctx, md = h200
    od = ctx["reference_kernel"]["on_device"]
    assert od["measured"] is True and od["rows"] == [] and od["arch"] == "sm_90" and "wgmma" in od["paths"]
    assert all("est_device_ms" not in r for r in ctx["reference_kernel"]["rows"])
    assert "PREDICTION" not in json.dumps(ctx["plan"]) and "a prediction, not a measurement" not in _flat(md)
    assert "the table above is measured" in _flat(md)


def test_kernel_row_on_b200_names_sm100(tree_0513):
    ctx = _build(tree_0513, "b200")
    od = ctx["reference_kernel"]["on_device"]
    assert od["arch"] == "sm_100" and od["compiled_as"] == "sm_100" and not od["measured"]
    assert any(r.get("prediction") and r["path"] == "mma" for r in od["rows"])
