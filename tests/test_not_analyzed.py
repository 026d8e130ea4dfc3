"""Files recon could not analyze appear in every output, on a copy of the real 0.5.13.post1 tree
with bad files planted in it (binary, syntax error, Latin-1 without a coding line, 9 MB) and one
tuned H200 config JSON broken."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from recon import notanalyzed
from recon.profiles import load_device, load_model
from recon.render.sarif import to_sarif
from recon.spec import render, spec_for
from recon.target import from_path
from recon.tree import load

PLANTED = {
    "sglang/srt/planted_binary.py": b"\x00\x01\x02" * 100,
    "sglang/srt/planted_syntax.py": b"def f(:\n",
    "sglang/srt/planted_latin.py": "# caf\xe9\ndef g():\n    return 1\n".encode("latin-1"),
    "sglang/srt/planted_huge.py": b"x = 1\n" * (9 * 1024 * 1024 // 6),
}
CONFIGS = "sglang/srt/layers/quantization/configs"


@pytest.fixture(scope="module")
def damaged(tree_0513, tmp_path_factory):
    """(root, broken config path, its shape): the seed tree with the planted files."""
    root = tmp_path_factory.mktemp("damaged") / "sglang-0513"
    shutil.copytree(tree_0513.target.source.root / "sglang", root / "sglang")
    for rel, data in PLANTED.items():
        (root / rel).write_bytes(data)
    model = load_model("deepseek-v3")
    for n, k in model.dense_gemm_shapes:
        rel = f"{CONFIGS}/N={n},K={k},device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
        if (root / rel).is_file():
            (root / rel).write_text('{"1": {"BLOCK_SIZE_M": 16,')  # cut short
            return root, rel, (n, k)
    pytest.fail("no tuned H200 config at DeepSeek-V3's dense shapes in 0.5.13.post1")


@pytest.fixture(scope="module")
def damaged_spec(damaged):
    root, _, _ = damaged
    tree = load(from_path(root))
    # on the H200 the dense FP8 GEMMs run DeepGEMM and never read the Triton configs: ask for the
    # Triton GEMM so the tuned-config lookup (and the broken file) is on the path
    return tree, spec_for(tree, load_device("h200"), load_model("deepseek-v3"), server_flags={"fp8_gemm_runner_backend": "triton"})


def test_every_bad_file_is_a_diagnostic(damaged_spec, damaged):
    tree, _ = damaged_spec
    _, broken, _ = damaged
    diags = dict(tree.index.diagnostics)
    assert set(diags) == set(PLANTED) | {broken}
    assert diags["sglang/srt/planted_latin.py"].startswith("not UTF-8")
    assert diags[broken].startswith("invalid JSON")


def test_the_spec_has_a_not_analyzed_section(damaged_spec, damaged):
    tree, ctx = damaged_spec
    _, broken, _ = damaged
    assert {d["path"] for d in ctx["not_analyzed"]} == set(PLANTED) | {broken}
    md = render(ctx, "md")
    section = md.split("## 8. Not analyzed", 1)[1]
    for rel in list(PLANTED) + [broken]:
        assert f"`{rel}`" in section
    assert "5 file(s) of the target were not analyzed" in md.split("## 2.", 1)[0]  # said in the summary too
    assert json.loads(render(ctx, "json"))["not_analyzed"] == ctx["not_analyzed"]


def test_an_invalid_tuned_config_counts_as_missing(damaged_spec, damaged):
    _, ctx = damaged_spec
    _, broken, (n, k) = damaged
    name = broken.rsplit("/", 1)[1]
    dense = [d for d in ctx["dense_fp8"] if d["folder"].endswith("quantization/configs")]
    missing = {m["file"]: m for d in dense for m in d["missing"]}
    assert missing[name]["invalid"].startswith("present but invalid JSON")
    assert all(p["file"] != broken for d in dense for p in d["present"])
    assert any("present but invalid JSON" in d["message"] for d in dense)
    # the Markdown folds its list lines at 100 columns (at spaces): read it with the folds undone
    assert f"N={n}, K={k}: `{name}` — present but invalid JSON" in " ".join(render(ctx, "md").split())


def test_sarif_notifies_each_file_not_analyzed(damaged_spec, damaged):
    tree, _ = damaged_spec
    log = to_sarif([], [], "0", tree.target.label, notanalyzed.entries(tree), [("some-rule", "KeyError: x")])
    inv = log["runs"][0]["invocations"][0]
    assert inv["executionSuccessful"] is False
    notes = inv["toolExecutionNotifications"]
    uris = {n["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for n in notes if "locations" in n}
    assert uris == set(PLANTED) | {damaged[1]}
    assert any(n["descriptor"]["id"] == "some-rule" and n["level"] == "error" for n in notes)


@pytest.mark.parametrize("args", [["spec", "--format", "json"], ["scan", "--format", "sarif"], ["scan", "--format", "json"]])
def test_machine_output_to_stdout_still_says_it_on_stderr(damaged, damaged_spec, args):
    root, broken, _ = damaged
    r = subprocess.run([sys.executable, "-m", "recon", *args, "--path", str(root), "--device", "h200", "--model", "deepseek-v3"],
                       capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stderr.splitlines() if "not analyzed" in l]
    assert len(lines) == 1 and lines[0].startswith("5 file(s) not analyzed:")
    doc = json.loads(r.stdout)
    if args[0] == "spec":
        assert len(doc["not_analyzed"]) == 5
    elif args[-1] == "sarif":
        assert len(doc["runs"][0]["invocations"][0]["toolExecutionNotifications"]) == 5
    else:
        assert {d["path"] for d in doc["not_analyzed"]} == set(PLANTED) | {broken}
