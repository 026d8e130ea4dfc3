"""The command line on real trees: outputs, formats, and the exit codes scripts rely on."""

from __future__ import annotations

import json

import networkx as nx
import pytest
from typer.testing import CliRunner

from recon.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def root(sglang_0513):
    return str(sglang_0513.source.root)


def run(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_query_where_json(root):
    r = run("query", "where", "is_sm120_supported", "--path", root, "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["at"] == "sglang/srt/utils/common.py:277" and data["defined_by"] == "assignment"


def test_query_path_text(root):
    r = run("query", "path", "Mxfp4MarlinMoEMethod.apply", "_mxfp4_slot_gemv_kernel", "--path", root)
    assert r.exit_code == 0, r.output
    assert "mxfp4_marlin_moe.py:194" in r.stdout and "mxfp4_moe_sm120_triton.py:385" in r.stdout


def test_query_exit_codes(root, tmp_path):
    amb = run("query", "where", "apply", "--path", root, "--format", "json")
    assert amb.exit_code == 1 and "Mxfp4MarlinMoEMethod" in amb.stdout
    unknown = run("query", "callers", "no_such_symbol_anywhere", "--path", root)
    assert unknown.exit_code == 1 and "no symbol" in unknown.stderr
    missing = run("query", "where", "x", "--path", str(tmp_path / "missing"))
    assert missing.exit_code == 2
    assert missing.stderr.strip().count("\n") == 0 and "does not exist" in missing.stderr


@pytest.mark.parametrize("fmt", ["graphml", "json", "dot", "mermaid"])
def test_graph_export_formats(root, tmp_path, fmt):
    out = tmp_path / f"g.{fmt}"
    r = run("graph", "export", "--format", fmt, "--root", "Mxfp4MarlinMoEMethod.apply", "--depth", "2", "-o", str(out), "--path", root)
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "_mxfp4_slot_gemv_kernel" in text
    if fmt == "graphml":
        G = nx.read_graphml(out)
        assert any(n.endswith("mxfp4_moe_forward_triton") for n in G)
    elif fmt == "json":
        data = json.loads(text)
        assert {e["kind"] for e in data["edges"]} >= {"calls", "launches"}
    elif fmt == "dot":
        assert text.startswith("digraph")
    else:
        assert text.startswith("flowchart LR")


def test_scan_sarif_and_json(root, tmp_path):
    sarif = tmp_path / "r.sarif"
    r = run("scan", "--path", root, "--format", "sarif", "-o", str(sarif))
    assert r.exit_code == 0, r.output
    log = json.loads(sarif.read_text())
    assert log["version"] == "2.1.0"
    results = log["runs"][0]["results"]
    ids = {x["ruleId"] for x in results}
    assert {"triton-cuda-core-reduction", "backend-selection", "missing-device-config"} <= ids
    loc = results[0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"].startswith("sglang/") and loc["region"]["startLine"] >= 1
    again = run("scan", "--path", root, "--format", "json", "--rule", "triton-cuda-core-reduction")
    data = json.loads(again.stdout)
    assert data["findings"] and {f["rule_id"] for f in data["findings"]} == {"triton-cuda-core-reduction"}


def test_scan_bad_input(root, tmp_path):
    r = run("scan", "--path", root, "--device", "no-such-gpu")
    assert r.exit_code == 2 and "no-such-gpu" in r.stderr and "h200" in r.stderr.lower()
    bad = tmp_path / "rules"
    bad.mkdir()
    (bad / "broken.yaml").write_text("id: x\ntitle: t\nseverity: loud\ncategory: c\nfinds: f\nwhy: w\nfix: f\ncheck: arch_gate\n")
    r = run("rules", "list", "--rules", str(bad))
    assert r.exit_code == 2 and "broken.yaml" in r.stderr and "severity" in r.stderr


def test_rules_list_and_show():
    r = run("rules", "list", "--format", "json")
    ids = {x["id"] for x in json.loads(r.stdout)}
    assert {"arch-gate", "backend-selection", "triton-cuda-core-reduction", "missing-device-config", "cuda-graph-host-sync"} <= ids
    s = run("rules", "show", "triton-cuda-core-reduction")
    assert "Why it costs" in s.stdout and "positive example" in s.stdout


def test_scan_reports_sparse_decode_grid_with_model_heads(root):
    r = run("scan", "--path", root, "--format", "json", "--rule", "low-occupancy-launch")
    data = json.loads(r.stdout)
    hits = [f for f in data["findings"] if "_tiled_sparse_decode_kernel" in f["message"]]
    assert hits and "64 programs at batch 1" in hits[0]["message"]


def test_square_brackets_from_rules_survive_text_output():
    r = run("rules", "show", "low-occupancy-launch")
    assert r.exit_code == 0 and "`kernel[grid](...)`" in r.stdout


def test_every_scan_message_reads_in_text_as_in_json(root):
    """Rich markup must not eat `[grid]`, `[chunk_mask]` or any bracket that code puts in a message."""
    data = json.loads(run("scan", "--path", root, "--format", "json").stdout)
    text = run("scan", "--path", root).stdout
    bracketed = [f["message"] for f in data["findings"] if "[" in f["message"]]
    assert bracketed, "no finding message with brackets to check"
    for f in data["findings"]:
        assert f["message"] in text, f["message"]
        for ev in f["evidence"][1:6]:
            assert (ev.get("note") or "") in text
