"""No input crashes or hangs recon: property-based tests of the per-file analyses (short, fixed
examples; ``bench/fuzz_bench.py`` is the long run), and one regression test per bug they found.

See ``tests/fuzzkit.py`` for the stages (facts, Triton summaries, the gate/shape evaluators) and
what counts as a bug.
"""

from __future__ import annotations

import ast
import io
import tokenize

import hypothesmith
import pytest
from hypothesis import given
from hypothesis import strategies as st

from recon.sources import MAX_BYTES
from tests import fuzzkit
from tests.conftest import OLD_VERSION


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RECON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RECON_SYNC_WRITES", "1")  # no write-behind child per example


def _parses(data: bytes) -> bool:
    """What Python's import accepts: the source decodes in its declared encoding (UTF-8 without a
    coding line, every byte, comments too) and parses."""
    try:
        enc, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        data.decode(enc)
        ast.parse(data)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError, LookupError):
        return False


# ── generated input ──


@fuzzkit.fuzz_settings(max_examples=40)
@given(st.binary(max_size=600), st.sampled_from(["sglang/srt/a.py", "sglang/srt/c.json", "csrc/k.cu"]))
def test_any_bytes_give_facts_or_a_diagnostic(data, relpath):
    facts = fuzzkit.run_facts(relpath, data)
    if relpath.endswith(".py") and len(data) <= MAX_BYTES and b"\0" not in data[:8192]:
        # a diagnostic exactly when the file does not parse: nothing parsable is dropped silently
        assert (facts[5] is None) == _parses(data), facts[5]


@fuzzkit.fuzz_settings(max_examples=25)
@given(hypothesmith.from_grammar())
def test_generated_python(src):
    data = src.encode("utf-8", "surrogatepass")
    facts = fuzzkit.run_facts("sglang/srt/layers/fuzz_gen.py", data)
    fuzzkit.run_triton(src)
    if facts[5] is None:
        fuzzkit.run_evaluators("sglang/srt/layers/fuzz_gen.py", data)


@fuzzkit.fuzz_settings(max_examples=30)
@given(st.lists(fuzzkit.expressions(), min_size=fuzzkit.HOLES, max_size=fuzzkit.HOLES))
def test_gate_kernel_and_launcher_templates(exprs):
    """Gates, a kernel and its launcher whose expressions are generated: what the evaluators read."""
    src = fuzzkit.templated(exprs)
    facts = fuzzkit.run_facts("sglang/srt/layers/fuzz_tpl.py", src.encode())
    summary = fuzzkit.run_triton(src)
    assert facts[5] is None and summary["error"] is None  # the template always parses
    assert "fuzz_kernel" in summary["kernels"] and "fuzz_launch" in summary["functions"]
    fuzzkit.run_evaluators("sglang/srt/layers/fuzz_tpl.py", src.encode())


# ── mutated real SGLang files ──


@pytest.fixture(scope="module")
def real_files(sglang_0513, sglang_new):
    from recon.target import fetch_wheel

    roots = [fetch_wheel(OLD_VERSION), sglang_0513.source.root, sglang_new.source.root]
    files = fuzzkit.real_files(roots, limit=30)
    assert len(files) == 30 and {f[0] for f in files} == {r.name for r in roots}
    return files


@pytest.mark.network
def test_mutated_real_files(real_files):
    @fuzzkit.fuzz_settings(max_examples=30)
    @given(st.integers(0, len(real_files) - 1), st.integers(0, len(real_files) - 1), fuzzkit.mutations())
    def run(i, j, edits):
        _, path, data = real_files[i]
        fuzzkit.run_all(path, fuzzkit.mutate(data, edits, real_files[j][2]))

    run()


@pytest.mark.network
def test_real_files_unmutated(real_files):
    """The sample itself: every file parses, and every stage gives no diagnostic."""
    for _, path, data in real_files:
        assert fuzzkit.run_facts(path, data)[5] is None, path
        assert fuzzkit.run_triton(data.decode())["error"] is None, path
