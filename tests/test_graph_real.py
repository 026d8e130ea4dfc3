"""The dispatch graph on real SGLang releases: the facts the seed story needed, found from code."""

from __future__ import annotations

import pytest

from recon import query

pytestmark = pytest.mark.network

SLOT = "_mxfp4_slot_gemv_kernel"


def _line(tree, path: str, line: int) -> str:
    return tree.lines(path)[line - 1]


def test_path_apply_to_slot_kernel_0513(tree_0513):
    hops = query.path(tree_0513.graph, "Mxfp4MarlinMoEMethod.apply", SLOT)
    names = [h.node.rsplit(".", 1)[-1] for h in hops]
    assert names == ["apply", "mxfp4_moe_forward_triton", SLOT]
    assert hops[0].at == "sglang/srt/layers/quantization/mxfp4_marlin_moe.py:168"
    # every hop's call site holds the call it claims
    call_path, call_line = hops[1].call_at.rsplit(":", 1)
    assert "mxfp4_moe_forward_triton(" in _line(tree_0513, call_path, int(call_line))
    launch_path, launch_line = hops[2].call_at.rsplit(":", 1)
    assert f"{SLOT}[" in _line(tree_0513, launch_path, int(launch_line))
    assert hops[2].via_edge == "launches" and hops[2].kind == "triton_kernel"
    for h in hops:
        p, ln = h.at.rsplit(":", 1)
        assert h.node.rsplit(".", 1)[-1] in _line(tree_0513, p, int(ln))


def test_where_gate_defined_by_assignment_0513(tree_0513):
    w = query.where(tree_0513.graph, "is_sm120_supported")
    assert w["at"] == "sglang/srt/utils/common.py:277"
    assert w["defined_by"] == "assignment"
    assert w["wraps_symbol"].endswith("._check_cuda_device_version")
    assert "device_capability_majors=[12]" in w["bound_arguments"]
    assert "cuda_version=(12, 8)" in w["bound_arguments"]
    assert _line(tree_0513, "sglang/srt/utils/common.py", 277).startswith("is_sm120_supported = lru_cache")


def test_alias_chain_both_names_resolve(tree_0513):
    a = query.where(tree_0513.graph, "is_blackwell_supported")
    b = query.where(tree_0513.graph, "sglang.srt.utils.common.is_blackwell")
    assert a["at"] == b["at"]
    assert a["wraps_symbol"] == b["wraps_symbol"]
    assert "device_capability_majors=[10, 11, 12]" in a["bound_arguments"]


def test_gate_callers_include_module_level_use(tree_0513):
    rows = query.callers(tree_0513.graph, "is_sm120_supported", dynamic=False)
    files = {r["call_at"].rsplit(":", 1)[0] for r in rows}
    assert "sglang/srt/layers/quantization/fp8_utils.py" in files
    assert "sglang/srt/layers/quantization/mxfp4_marlin_moe.py" in files


@pytest.mark.parametrize("tree_fixture", ["tree_0513", "tree_new"])
def test_capture_reaches_model_forward(request, tree_fixture):
    tree = request.getfixturevalue(tree_fixture)
    G = tree.graph
    # 0.5.13.post1: model_executor/cuda_graph_runner.py; newer: model_executor/runner/*cuda_graph*.py
    runners = sorted(
        n for n, d in G.nodes(data=True)
        if d["kind"] == "capture_site" and "model_executor/" in d["path"] and "cuda_graph" in d["path"].rsplit("/", 1)[-1]
    )
    assert runners, "no capture site found in the model executor's CUDA-graph runners"
    found = []
    for site in runners:
        try:
            found.append(query.path(G, site, "DeepseekV4ForCausalLM.forward"))
        except query.UnknownSymbol:
            pass
    assert found, "no path from a capture site to the model's forward"
    hops = found[0]
    assert hops[-1].node.endswith("deepseek_v4.DeepseekV4ForCausalLM.forward")
    # the capture site's line is a `with` statement of a graph context
    p, ln = hops[0].at.rsplit(":", 1)
    stmt = " ".join(tree.lines(p)[int(ln) - 1 : int(ln) + 3])
    assert stmt.lstrip().startswith("with") and "graph" in stmt.lower()


def test_newer_release_keeps_gate_and_drops_slot_kernel(tree_new):
    w = query.where(tree_new.graph, "is_sm120_supported")
    p, ln = w["at"].rsplit(":", 1)
    assert p == "sglang/srt/utils/common.py"
    assert _line(tree_new, p, int(ln)).startswith("is_sm120_supported =")
    with pytest.raises(query.UnknownSymbol):
        query.find(tree_new.graph, SLOT)


def test_launches_from_moe_forward(tree_0513):
    rows = query.launches(tree_0513.graph, "mxfp4_moe_forward_triton")
    names = {r["symbol"].rsplit(".", 1)[-1] for r in rows}
    assert SLOT in names
    slot = next(r for r in rows if r["symbol"].endswith(SLOT))
    assert "num_slots" in slot["grid"] or "grid" in slot["grid"]
    # the slot kernel calls the @triton.jit helper _dequant_fp4_lut in its body: inlined, not a launch
    assert "_dequant_fp4_lut" not in names
    assert any(d.get("kind") == "triton_kernel" for n, d in tree_0513.graph.nodes(data=True) if n.endswith("._dequant_fp4_lut"))


def test_ambiguous_symbol_lists_candidates(tree_0513):
    with pytest.raises(query.AmbiguousSymbol) as e:
        query.find(tree_0513.graph, "apply")
    assert any(c.endswith("Mxfp4MarlinMoEMethod.apply") for c in e.value.candidates)


def test_index_reports_version_and_no_crash(tree_0513, tree_new):
    assert tree_0513.target.version == "0.5.13.post1"
    assert tree_new.target.version and tree_new.target.version != "0.5.13.post1"
    assert tree_0513.index.stats["files"] > 2000
    # every diagnostic is one line naming the problem
    for path, msg in tree_0513.index.diagnostics:
        assert "\n" not in msg


def test_a_copy_of_a_release_finds_its_graph_by_content(sglang_0513, tmp_path):
    """Two copies of the 0.5.13.post1 tree in new folders: the second (at the latest) reads the
    graph cached for that content instead of building it, and it is the same graph."""
    import shutil
    from pathlib import Path

    from recon.cache import wait_for_writers
    from recon.target import from_path
    from recon.tree import load

    trees = []
    for name in ("one", "two"):
        shutil.copytree(Path(sglang_0513.source.root) / "sglang", tmp_path / name / "sglang")
        trees.append(load(from_path(tmp_path / name)))
        wait_for_writers()
    assert trees[1].timings["graph"] == "cached" and trees[0].key == trees[1].key
    g0, g1 = trees[0].graph, trees[1].graph
    assert g1.number_of_nodes() == g0.number_of_nodes() > 10000
    assert sorted(g1.out_edges("sglang.srt.layers.quantization.mxfp4_marlin_moe.Mxfp4MarlinMoEMethod.apply", keys=True)) \
        == sorted(g0.out_edges("sglang.srt.layers.quantization.mxfp4_marlin_moe.Mxfp4MarlinMoEMethod.apply", keys=True))
    from recon.cache import cache_dir

    for name in ("one", "two"):  # these folders' own entries (the content's stays for the next copy)
        for f in (cache_dir() / "graph").glob(f"dir-*{tmp_path.name}*{name}*"):
            f.unlink(missing_ok=True)
