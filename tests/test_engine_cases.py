"""The engine pinned one feature at a time: each file of tests/engine_cases is put into a synthetic
SGLang tree and each of its ``case_*`` functions evaluated with the engine of an H200 scenario; the
value must be the one its ``# expect:`` comment gives (``# todo:``: a known gap, failing strictly)."""

import ast
import re
from pathlib import Path

import pytest

from recon.checks import CheckContext
from recon.profiles import load_device, load_model
from recon.runtime.engine import Engine
from recon.runtime.interp import UNKNOWN
from recon.runtime.values import plain

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
