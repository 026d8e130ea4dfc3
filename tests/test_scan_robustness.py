"""A check that crashes is reported by rule id; the other rules still give their findings."""

from __future__ import annotations

from typer.testing import CliRunner

from recon.checks import check
from recon.cli import app
from recon.profiles import load_device, load_model
from recon.rules import load_rules
from recon.scan import run_rules


@check("test_crashing_check")
def _crash(ctx, rule):
    raise RuntimeError("boom on purpose")


RULE = """id: crashes
title: A rule whose check raises
severity: warning
category: test
finds: nothing
why: to test isolation
fix: none
check: test_crashing_check
"""


def test_crashing_rule_is_isolated(synthetic, tmp_path, monkeypatch):
    extra = tmp_path / "rules"
    extra.mkdir()
    (extra / "crashes.yaml").write_text(RULE)
    tree = synthetic(
        {
            "sglang/srt/k.py": (
                "import triton\nimport triton.language as tl\n@triton.jit\ndef k(a, b, N, K, BLOCK_K: tl.constexpr):\n"
                "    acc = tl.zeros([16], dtype=tl.float32)\n"
                "    for k0 in range(0, K, BLOCK_K):\n"
                "        x = tl.load(a + k0)\n        w = tl.load(b + k0)\n"
                "        acc += tl.sum(x[None, :] * w, axis=1)\n"
            )
        }
    )
    rules = load_rules([extra])
    result = run_rules(tree, load_device(None), load_model(None), rules, use_cache=False)
    assert [r for r, _ in result.errors] == ["crashes"]
    assert "boom on purpose" in result.errors[0][1]
    assert any(f.rule_id == "triton-cuda-core-reduction" for f in result.findings)
    # the command line says which rule failed and exits 3, with the other findings written
    res = CliRunner().invoke(app, ["scan", "--path", str(tree.target.source.root), "--rules", str(extra), "--format", "json"])
    assert res.exit_code == 3
    assert "rule crashes failed" in res.stderr and '"triton-cuda-core-reduction"' in res.stdout
