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
    # one message, one whole line (an error is never folded)
    assert len(missing.stderr.strip().splitlines()) == 1 and "does not exist" in missing.stderr


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
    # the text is folded at 100 columns (recon.columns): compared with the whitespace taken out
    flat = "".join(text.split())
    for f in data["findings"]:
        assert "".join(f["message"].split()) in flat, f["message"]
        for ev in f["evidence"][1:6]:
            assert "".join((ev.get("note") or "").split()) in flat


def test_query_launches_text_reads_at_100_columns(root):
    r = run("query", "launches", "Mxfp4MarlinMoEMethod.apply", "--path", root)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(len(l) for l in lines) <= 100, max(lines, key=len)
    data = json.loads(run("query", "launches", "Mxfp4MarlinMoEMethod.apply", "--path", root, "--format", "json").stdout)
    assert len(lines) < 6 * len(data)  # a compact tree, not a table of folded cells
    # a route's shared prefix is printed once; each kernel says its kind, and its place is on its own line
    assert sum(1 for l in lines if l.strip() == "└─ mxfp4_moe_forward_triton") == 1
    slot = next(i for i, l in enumerate(lines) if "└─ _mxfp4_slot_gemv_kernel  [triton_kernel]" in l)
    assert lines[slot + 1].strip() == "at sglang/srt/layers/moe/fused_moe_triton/mxfp4_moe_sm120_triton.py:385"
    for row in data:
        assert any(row["symbol"].rsplit(".", 1)[1] in l for l in lines)


def test_query_callers_text_groups_call_sites(root):
    r = run("query", "callers", "is_sm120_supported", "--path", root)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(len(l) for l in lines) <= 100
    data = json.loads(run("query", "callers", "is_sm120_supported", "--path", root, "--format", "json").stdout)
    symbols = {d["symbol"] for d in data}
    assert len(symbols) < len(data)  # some caller calls it more than once: grouped
    assert sum(1 for l in lines if l in symbols) == len(symbols)  # each caller named once
    for d in data:
        path, line = d["call_at"].rsplit(":", 1)
        assert any(l.strip().startswith(f"at {path}:") and line in l for l in lines)


def test_ambiguous_name_lists_candidates_one_per_line_best_first(root):
    r = run("query", "where", "apply", "--path", root)
    assert r.exit_code == 1
    lines = [l for l in r.stderr.splitlines() if not l.startswith("target:")]
    assert "names" in lines[0] and "best first" in lines[0] and all(len(l) <= 100 for l in lines)
    # a name longer than a line is folded at a dot, its rest indented under it: join it back
    joined: list[str] = []
    for l in lines[1:]:
        if l.startswith("    ") and joined:
            joined[-1] += l.strip()
        else:
            joined.append(l)
    lines = lines[:1] + joined
    shown = [l.strip() for l in lines[1:] if l.startswith("  ") and not l.strip().startswith("…")]
    assert len(shown) == 10 and all(" " not in s for s in shown)
    assert lines[-1].strip().startswith("… and ") and "more" in lines[-1]
    data = json.loads(run("query", "where", "apply", "--path", root, "--format", "json").stdout)
    assert shown == data["candidates"][:10] and len(data["candidates"]) > 10


def test_dot_labels_break_lines_and_mermaid_labels_are_unique(root):
    dot = run("graph", "export", "--format", "dot", "--root", "Mxfp4MarlinMoEMethod.apply", "--depth", "3", "--path", root).stdout
    labels = [l.split('label="', 1)[1].split('"', 1)[0] for l in dot.splitlines() if " [label=" in l and "->" not in l]
    assert labels and all("\\n" in x and "\\\\n" not in x for x in labels)
    mm = run("graph", "export", "--format", "mermaid", "--root", "Mxfp4MarlinMoEMethod.apply", "--depth", "3", "--path", root).stdout
    names = [l.split('["', 1)[1].split("<br/>", 1)[0].lstrip('["') for l in mm.splitlines() if '["' in l]
    assert len(names) == len(set(names)) and "MoeRunner.run" in names and "run" not in names
    edges = [l for l in mm.splitlines() if "--" in l]
    assert len(edges) == len(set(edges))


def test_query_checks_the_device_before_loading_the_tree(tmp_path):
    """A question asked for a scenario checks its options as every command does: a bad device is
    the error said (exit 2), before the target is resolved or indexed."""
    r = run("query", "launches", "apply", "--path", str(tmp_path / "missing"), "--device", "no-such-gpu")
    assert r.exit_code == 2 and "no-such-gpu" in r.stderr and "does not exist" not in r.stderr
