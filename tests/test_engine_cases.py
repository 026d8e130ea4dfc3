"""The engine pinned one feature at a time: each file of tests/engine_cases is put into a synthetic
SGLang tree and each of its ``case_*`` functions evaluated with the engine of an H200 scenario; the
value must be the one its ``# expect:`` comment gives (``# todo:``: a known gap, failing strictly)."""

import ast
import re
from pathlib import Path

import pytest

from recon.checks import CheckContext
from recon.profiles import load_device, load_model
from recon.engine.engine import Engine
from recon.engine.interp import UNKNOWN
from recon.engine.values import plain

CASES = Path(__file__).parent / "engine_cases"


def _cases():
    out = []
    for f in sorted(CASES.glob("*.py")):
        lines = f.read_text().splitlines()
        for fn in ast.parse(f.read_text()).body:
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("case_"):
                m = re.match(r"#\s*(expect|todo):\s*(.+?)(\s+\(.*\))?$", lines[fn.lineno - 2].strip())
                assert m, f"{f.name}:{fn.lineno}: a case needs an '# expect:' or '# todo:' comment on the line above it"
                marks = [pytest.mark.xfail(strict=True, reason="a known gap of the engine")] if m.group(1) == "todo" else []
                out.append(pytest.param(f, fn.name, ast.literal_eval(m.group(2)), id=f"{f.stem}::{fn.name}", marks=marks))
    return out


def test_every_file_has_cases():
    assert len(_cases()) >= 12 and {c.values[0] for c in _cases()} == set(CASES.glob("*.py"))


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    from recon import shipped
    from recon.target import from_path
    from recon.tree import load

    from tests.conftest import make_tree

    def engine(case: Path):
        root = tmp_path_factory.mktemp(case.stem)
        files = {"sglang/srt/case.py": case.read_text()}
        # '# beside: <relpath>: <Python, lines joined by \n>' puts a module the case imports at that
        # path (a loader in the tree's JIT package, a ServerArgs)
        for rel, code in re.findall(r"^# beside: (\S+): (.+)$", case.read_text(), re.M):
            files[rel] = code.replace("\\n", "\n") + "\n"  # '\n' in the line: a new line
        # '# requires: <requirement>' lines become the tree's declared requirements, and
        # '# ships: dist==version: modules' what that pinned wheel's RECORD lists (no download)
        reqs = re.findall(r"^# requires: (.+)$", case.read_text(), re.M)
        if reqs:
            files["pyproject.toml"] = "[project]\nname = 'sglang'\nversion = '0.0.0'\ndependencies = [%s]\n" % ", ".join(map(repr, reqs))
        for dist, version, mods in re.findall(r"^# ships: ([\w.-]+)==([\w.+-]+): (.+)$", case.read_text(), re.M):
            monkey.setitem(shipped._MEMO, (shipped.norm(dist), version), (frozenset(mods.split()), ""))
        make_tree(root, files)
        tree = load(from_path(root))
        return Engine(CheckContext(tree, load_device("h200"), load_model("gpt-oss-120b")))

    made = {}
    with pytest.MonkeyPatch.context() as monkey:
        yield lambda case: made[case] if case in made else made.setdefault(case, engine(case))


@pytest.mark.parametrize("case,fn,want", _cases())
def test_engine_case(engines, case, fn, want):
    eng = engines(case)
    got = eng.ev.call_function(f"sglang.srt.case.{fn}", [], {}, 0)
    if got is UNKNOWN:  # written 'unknown' in a case: what the engine cannot decide
        got = "unknown"
    assert got == want, f"{case.name}::{fn}: the engine gives {plain(got)!r}, the code gives {want!r}"


def test_undecided_branch_keeps_both_outcomes(engines):
    """The walker on ``undecided_branch.py``: each side of the branch the engine cannot decide is
    reached only under the test (in its sense, with file:line), neither side is decided; what runs
    before it, what both sides call and the side of a decided branch are decided; the placement of
    a site on one side is undecided, naming the test and its line; the decided one's is on-step."""
    from recon.placement import ON_STEP, UNDECIDED, _spans, place, sites_from_map
    from recon.runtime import _leaf_dict
    from recon.runtime.moe import PathWalker, calls_list, forks, walked_list
    from recon.engine.values import Instance

    case = CASES / "undecided_branch.py"
    eng = engines(case)
    w = PathWalker(eng.world, eng.ev, Instance("sglang.srt.case.Method"))
    w.walk("sglang.srt.case.Method.apply", w.inst, [], (), 0)
    leaves = {lf.name.rsplit(".", 1)[-1]: _leaf_dict(lf, w.test_sites) for lf in w.leaves}
    assert "op_never" not in leaves  # the engine decided that branch
    assert all(leaves[n]["decided"] for n in ("op_first", "op_decided", "op_shared"))
    line = next(i for i, t in enumerate(case.read_text().splitlines(), 1) if "if _on_disk():" in t)
    for name, holds in (("op_if_held", True), ("op_if_not", False)):
        lf = leaves[name]
        assert not lf["decided"]
        assert lf["tests"] == [{"test": "_on_disk()", "holds": holds, "path": "sglang/srt/case.py", "line": line}]
    fk = forks(list(leaves.values()))
    assert [(f["test"], f["line"], f["if_true"], f["if_false"]) for f in fk] == \
        [("_on_disk()", line, ["flashinfer.op_if_held"], ["flashinfer.op_if_not"])]
    # placement against a map made of this walk: one side undecided (the test and its line), the
    # helper both sides call on-step, as the decided calls are
    s = sites_from_map({"layers": [{"kind": "moe", "leaves": list(leaves.values()), "walked": walked_list(w.walked),
                                    "calls": calls_list(w), "test_sites": {t: list(a) for t, a in w.test_sites.items()}}]})
    s.spans = _spans(eng.world.G)
    got = place(s, "sglang/srt/case.py", line + 1)
    assert got["placement"] == UNDECIDED and got["tests"] == [f"_on_disk() [sglang/srt/case.py:{line}]"]
    assert place(s, "sglang/srt/case.py", line + 4)["placement"] == UNDECIDED
    shared_line = next(i for i, t in enumerate(case.read_text().splitlines(), 1) if "op_shared()" in t)
    decided_line = next(i for i, t in enumerate(case.read_text().splitlines(), 1) if "op_decided(x)" in t)
    assert place(s, "sglang/srt/case.py", shared_line)["placement"] == ON_STEP
    assert place(s, "sglang/srt/case.py", decided_line)["placement"] == ON_STEP


def test_memoized_builders_are_not_walked(engines):
    """The walker on ``memoized_builder.py``: the three memoizing mechanisms are recognized from the
    code (not names), their build internals (``msgspec``) are not in the chain, and the op each
    returns is where the step calls it; a decorator that only wraps is walked into."""
    from recon.runtime.moe import PathWalker
    from recon.engine.values import Instance

    case = CASES / "memoized_builder.py"
    eng = engines(case)
    world = eng.world
    q = "sglang.srt.case."
    for fn in ("act_module", "gemm_fn", "pick_step", "is_hip_runtime"):
        assert world.memoized(q + fn, eng.ev.model), fn
    assert "keeps results in results" in world.memoized(q + "act_module")["how"]
    assert world.memoized(q + "gemm_fn")["how"] == "functools.lru_cache"
    assert "functools.cache" in world.memoized(q + "pick_step")["how"]
    for fn in ("plain_wrapped", "triton_step", "once_per_key", "Method.apply"):
        assert not world.memoized(q + fn, eng.ev.model), fn
    w = PathWalker(world, eng.ev, Instance(q + "Method"))
    w.walk(q + "Method.apply", w.inst, [], (), 0)
    names = {lf.name for lf in w.leaves}
    assert not any(n.startswith("msgspec") for n in names), names
    lines = case.read_text().splitlines()
    at = {lf.name: lf.line for lf in w.leaves}
    # the JIT module the builder compiles, named by the loader's first argument for these
    # arguments (fast=True by default), at the line the step calls it
    assert at["activation (act.cuh)"] == next(i for i, t in enumerate(lines, 1) if "module.run_activation(x)" in t)
    assert at["flashinfer.gemm_op"] == next(i for i, t in enumerate(lines, 1) if "gemm_fn()(x)" in t)
    assert "flashinfer.reduce_op" in names  # the in-tree function pick_step returns, walked
    assert "flashinfer.wrapped_op" in names  # not memoized: walked
    assert set(w.built) == {q + "act_module", q + "gemm_fn", q + "pick_step"}


def test_a_dispatch_resolved_on_first_call_is_followed(engines):
    """The MoE walker on ``lazy_dispatch.py``: ``self.forward(...)`` runs the method the object's
    resolver returns on this device (``forward_cuda``), decided, and says so as a switch."""
    from recon.runtime.moe import PathWalker
    from recon.engine.values import Instance

    eng = engines(CASES / "lazy_dispatch.py")
    q = "sglang.srt.case."
    w = PathWalker(eng.world, eng.ev, Instance(q + "Method"))
    w.walk(q + "Method.apply", w.inst, [], (), 0)
    leaves = {lf.name: lf for lf in w.leaves}
    assert "flashinfer.op_cuda" in leaves and leaves["flashinfer.op_cuda"].decided
    assert "flashinfer.op_native" not in leaves
    assert any(s["attr"] == "_forward_method" and "forward_cuda" in str(s["value"]) for s in w.switches)


def test_a_precondition_written_as_an_elif_chain_is_met(engines):
    """The walker on ``elif_raises.py``: the op under the one branch that does not raise is
    decided; a chain with two branches that run something stays undecided, both outcomes kept."""
    from recon.runtime.moe import PathWalker
    from recon.engine.values import Instance

    eng = engines(CASES / "elif_raises.py")
    q = "sglang.srt.case."
    w = PathWalker(eng.world, eng.ev, Instance(q + "Method"))
    w.walk(q + "Method.apply", w.inst, [], (), 0)
    leaves = {lf.name: lf for lf in w.leaves}
    assert leaves["flashinfer.op_standard"].decided
    assert not leaves["flashinfer.op_if_bypassed"].decided and not leaves["flashinfer.op_otherwise"].decided
    assert any("precondition" in n and "_standard(x)" in n for n in eng.world.notes.values())


def test_code_after_an_elif_chain_that_returns_needs_every_test_failed(engines):
    from recon.runtime import _leaf_dict
    from recon.runtime.moe import PathWalker
    from recon.engine.values import Instance

    eng = engines(CASES / "elif_chain_returns.py")
    q = "sglang.srt.case."
    w = PathWalker(eng.world, eng.ev, Instance(q + "Method"))
    w.walk(q + "Method.apply", w.inst, [], (), 0)
    leaves = {lf.name: _leaf_dict(lf, w.test_sites) for lf in w.leaves}
    assert "flashinfer.op_amx" not in leaves
    assert [(t["test"], t["holds"]) for t in leaves["flashinfer.op_fallback"]["tests"]] == [("_optimized(x)", False)]
    assert [(t["test"], t["holds"]) for t in leaves["flashinfer.op_optimized"]["tests"]] == [("_optimized(x)", True)]
    assert not leaves["flashinfer.op_fallback"]["decided"]
