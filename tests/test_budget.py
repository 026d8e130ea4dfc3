"""The step budget (recon.kernels.budget): one set of numbers, the same in `recon kernels` and the spec.

The agreement test builds the spec (JSON) and the kernel map for the same real scenario
(SGLang 0.5.13.post1, DeepSeek-V4-Flash, on the H200 and the RTX PRO 6000) and checks that every
number both carry is equal: the budget, the bandwidth, the slot-kernel baseline, the MoE floor,
and the answer to which of recon's kernel paths runs on the architecture.
"""

from __future__ import annotations

import json

import pytest

from recon import roofline
from recon.profiles import load_device, load_model


def test_one_bandwidth_per_device_measured_where_recon_measured_it():
    h200, pro = load_device("h200"), load_device("rtx-pro-6000")
    slot = roofline.anchor_bandwidth_tbs("h200_slot_gemv_e8m0_scales.json")
    assert h200.bandwidth_tbs == pytest.approx(slot, abs=0.01) and h200.bandwidth_tbs < h200.mem_bandwidth_tbs
    assert "measured" in h200.bandwidth_basis and "datasheet" in pro.bandwidth_basis
    assert pro.bandwidth_tbs == pro.mem_bandwidth_tbs
    # every floor divides by it
    m = load_model("dsv4")
    r1 = roofline.moe_roofline(m, h200, [1])["rows"][0]
    assert r1["step_floor_ms"] == pytest.approx(r1["step_bytes"] / (h200.bandwidth_tbs * 1e12) * 1e3, rel=1e-3)


def test_prefill_floor_counts_compute():
    from recon.kernels.budget import dense_floor_inputs, floor_point

    m, d = load_model("dsv4"), load_device("rtx-pro-6000")
    b, f = dense_floor_inputs(m, 4096)
    p = floor_point(4096, b, f, d, "fp8")
    assert p["bound"] == "compute" and p["floor_us"] == pytest.approx(f / (2 * d.bf16_tflops * 1e12) * 1e6, rel=1e-3)
    assert p["floor_us"] > p["memory_us"]
    one = floor_point(1, *dense_floor_inputs(m, 1), d, "fp8")
    assert one["bound"] == "memory"


def _scenario(tree, device):
    from recon.scan import run_rules
    from recon.scenario import kernel_map_of
    from recon.rules import load_rules
    from recon.spec import spec_for

    dev, model = load_device(device), load_model("dsv4")
    spec = json.loads(json.dumps(spec_for(tree, dev, model)))
    res = run_rules(tree, dev, model, load_rules())
    kmap = json.loads(json.dumps(kernel_map_of(res.context)))
    return dev, model, spec, kmap


@pytest.mark.parametrize("device", ["h200", "rtx-pro-6000"])
def test_spec_and_map_share_every_number(tree_0513, device):
    dev, model, spec, kmap = _scenario(tree_0513, device)
    b = kmap["budget"]
    assert spec["budget"] == b  # the whole budget, row by row
    # one bandwidth
    assert spec["device"]["bandwidth_tbs"] == b["bandwidth"]["tbs"] == spec["roofline"]["bandwidth_tbs"] == dev.bandwidth_tbs
    # the MoE floor: the summary, the map's roofline line and the budget row are one number
    moe = [r for r in b["rows"] if r["kind"] == "moe"]
    lay = next(lay for lay in kmap["layers"] if lay["kind"] == "moe")
    assert lay["roofline"][0]["floor_us"] == moe[0]["points"][0]["floor_us"]
    assert spec["summary"]["batch1"]["floor_ms"] == pytest.approx(moe[0]["points"][0]["floor_us"] / 1e3, abs=1e-4)
    # one slot baseline (E8M0 scales): the spec's gap, its reference table and the budget's MoE rows
    e8 = {r["M"]: r["slot_ms"] for r in roofline.anchor_rows(model, "h200_slot_gemv_e8m0_scales.json")}
    gap1 = next(g for g in spec["slot_gap"]["rows"] if g["M"] == 1)
    assert gap1["slot_layer_ms"] == pytest.approx(e8[1] * spec["slot_gap"]["scale"], abs=1e-4)
    ref1 = next(r for r in spec["reference_kernel"]["rows"] if r["M"] == 1)
    assert ref1["slot_ms"] == pytest.approx(e8[1], abs=1e-3)
    assert ref1["x_slot"] == pytest.approx(e8[1] / ref1["ms"], abs=0.05)
    # the reference table's floor on the measuring device is that device's one bandwidth
    h200 = load_device("h200")
    assert ref1["roofline_ms"] == pytest.approx(roofline.moe_roofline(model, h200, [1])["rows"][0]["layer_floor_ms"], abs=2e-4)
    slot_here = spec["moe_path"]["slot_kernel"] is not None
    assert slot_here is (device == "rtx-pro-6000")  # 0.5.13.post1 runs the slot kernel on sm_120 only
    if slot_here:
        assert spec["summary"]["gap"]["batch1"]["slot_layer_ms"] == gap1["slot_layer_ms"]
        assert len(moe) == 3  # the slot GEMVs, the per-call scale conversion, the eager epilogue
        timed = sum(r["time"]["1"]["us"] for r in moe[:2])
        assert timed / 1e3 / model.num_moe_layers == pytest.approx(gap1["slot_layer_ms"], rel=2e-3)
        assert all(t["how"] == "predicted" for r in moe for t in r["time"].values() if t)  # measured on the H200
        conv = moe[1]
        assert "w13_scale" in conv["op"] and "w2_scale" in conv["op"] and conv["launches_per_step"] == 2 * model.num_moe_layers
        item = next(p for p in spec["plan"] if "process_weights_after_loading" in p["title"])
        assert item["saves_us"] == conv["time"]["1"]["us"]
        dense = next(r for r in b["rows"] if r["kind"] == "dense_gemm")
        assert dense["config"].startswith("default")  # no tuned FP8 block config for this device in 0.5.13.post1
    else:
        # no anchor was measured for what runs here: the budget times nothing rather than borrow one
        assert all(not r["time"] for r in moe) and not any("process_weights_after_loading" in p["title"] for p in spec["plan"])
    # which of recon's kernel paths runs here: one answer
    od = spec["reference_kernel"]["on_device"]
    assert b["recon_kernel"]["paths"] == od["paths"] and b["recon_kernel"]["arch"] == od["arch"] == dev.sm
    measured = [p["saves_us"] for p in spec["plan"] if p.get("saves_us") is not None]
    assert measured == sorted(measured, reverse=True)
    assert spec["plan"][: len(measured)] == [p for p in spec["plan"] if p.get("saves_us") is not None]
    # the headline ranks by share of the step total
    shares = [h["share"] for h in spec["headline"]]
    assert shares == sorted(shares, reverse=True) and sum(shares) == pytest.approx(1.0, abs=1e-3)
    # the Markdown carries the same table, ranked, with the total
    from recon.spec import render

    md = render(spec, "md")
    table = md.split("### Where the step goes", 1)[1].split("**step total**", 1)[0]
    first = next(x for x in table.splitlines() if x.startswith("| 1 |"))
    top = spec["headline"][0]
    assert f"{round(100 * top['share'], 1)}%" in first and top["kind"] in first
    assert f"{b['total']['1']['today_us']:,.0f}" in md.split("**step total**", 1)[1].splitlines()[0]
    # the total adds up
    for k, t in b["total"].items():
        assert t["floor_us"] == pytest.approx(sum(next(p["floor_us"] or 0 for p in r["points"] if str(p["M"]) == k) for r in b["rows"]), abs=0.5)


@pytest.mark.network  # loads 0.5.13.post1 through the CLI
def test_kernels_writes_its_budget_to_a_file(tmp_path):
    from typer.testing import CliRunner

    from recon.cli import app

    out = tmp_path / "k.txt"
    r = CliRunner().invoke(app, ["kernels", "--sglang", "0.5.13.post1", "-o", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert f"wrote {out}" in r.output and "step budget" not in r.output  # to the file, not stdout
    block = text.split("step budget", 1)[1].split("\n\n", 1)[0].splitlines()
    assert block and all(len(x) <= 100 for x in block)  # the budget table fits 100 columns
    assert "step total" in text and "process_weights_after_loading" in text
    js = tmp_path / "k.json"
    assert CliRunner().invoke(app, ["kernels", "--sglang", "0.5.13.post1", "--format", "json", "-o", str(js)]).exit_code == 0
    assert json.loads(js.read_text())["budget"]["total"]["1"]["today_us"] > 0
