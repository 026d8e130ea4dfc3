"""A slice of the differential oracle (bench/oracle) without SGLang's environments: recon's answers,
computed now, against SGLang's own answers committed in bench/oracle/AGREEMENT.json, for a few
cells of two releases the rest of the suite does not read as fixtures' answers (one of them added
to the table after the first six). A change in recon that breaks agreement on these shows here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ORACLE = Path(__file__).resolve().parent.parent / "bench" / "oracle"
sys.path.insert(0, str(ORACLE))

import recon_side  # noqa: E402
import run as oracle_run  # noqa: E402

# (release, devices, models): default flags and one flag set each
SLICE = [
    ("0.5.20", ["h200", "b200"], ["gpt-oss-120b", "deepseek-v3"]),
    ("0.5.17", ["rtx-pro-6000-server", "b200"], ["qwen3-30b-a3b-fp8-per-tensor", "glm-4.5-air-fp8"]),
    # a release the oracle's environment first ran with its own `kernels` pin, and a dense model
    ("0.5.11", ["h200", "b200"], ["llama-3.1-8b", "gpt-oss-120b"]),
]
FLAGS = ["default", "moe-triton"]


@pytest.fixture(scope="module")
def answers():
    data = oracle_run.load(ORACLE / "AGREEMENT.json")
    return {(o["release"], o["device"], o["id"]): o["answer"] for o in data["oracle"]}


@pytest.mark.network
@pytest.mark.parametrize("release,devices,models", SLICE, ids=[s[0] for s in SLICE])
def test_recon_agrees_with_sglangs_committed_answers(answers, release, devices, models, monkeypatch):
    # as the table was made: what the pinned kernel wheel ships is read (gpt-oss on H200 runs the
    # triton_kernel runner because sglang-kernel ships triton_kernels); one wheel listing per release
    monkeypatch.setenv("RECON_DIST_MODULES", "on")
    from recon.target import from_version
    from recon.tree import load

    tree = load(from_version(release))
    compared, wrong = 0, []
    for device in devices:
        for model in models:
            for fs in FLAGS:
                sg = answers[(release, device, f"{model}|{fs}")]
                assert sg.get("ok"), sg  # SGLang resolved the cell (recon's answer is compared field by field)
                probes = any(f in sg["fields"] for f in oracle_run.PROBE_FIELDS)
                rc = recon_side.answers(tree, device, str(ORACLE / "models" / model), oracle_run.FLAG_SETS[fs], {},
                                        probes=probes)
                for field, (verdict, want, got, src) in oracle_run.compare(sg, rc).items():
                    compared += 1
                    # past the arguments recon may say undecided (the layer's prefix), never name another class
                    ok = ("agree", "undecided", "probe-not-run") if field in oracle_run.PROBE_FIELDS else ("agree",)
                    if verdict not in ok:
                        wrong.append(f"{device} {model} {fs} {field}: {verdict} sglang={want!r} recon={got!r} ({src})")
    assert compared >= len(devices) * len(models) * len(FLAGS) * 10
    assert not wrong, "\n".join(wrong)
