"""Docs that cannot drift: the README's example outputs and the spec samples in docs/ are what
`docs/regen.py` writes from real runs on the 0.5.13.post1 wheel today. When this fails, run
`python docs/regen.py` and review the diff."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _regen():
    spec = importlib.util.spec_from_file_location("docs_regen", ROOT / "docs" / "regen.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_readme_region_is_one_regen_knows():
    regen = _regen()
    text = (ROOT / "README.md").read_text()
    names = re.findall(r"<!-- regen:([\w-]+) -->", text)
    assert names and set(names) == set(regen.REGIONS) | set(regen.FROM_SPEC) and len(names) == len(set(names))
    assert all(f"<!-- /regen:{n} -->" in text for n in names)


def test_committed_samples_are_todays_output(sglang_0513):
    regen = _regen()
    for path, want in regen.expected().items():
        have = path.read_text()
        assert have == want, f"{path.relative_to(ROOT)} differs from today's output: run python docs/regen.py"
        # deterministic: no absolute local path, no timing
        assert str(ROOT) not in have and "/tmp/" not in have
