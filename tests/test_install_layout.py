"""A regular (non-editable) install carries everything recon reads at run time: the
rules and templates (as <prefix>/share/recon/), device/model profiles and anchors
(package data) and the kernel's tuned configs; and recon finds them there."""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("recon", "reference_impl", "rules", "templates"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {proc.stderr.strip().splitlines()[-1:]}")
    return next(out.glob("recon-*.whl"))


def test_wheel_carries_rules_templates_profiles_and_configs(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    share = [n.split("/share/recon/", 1)[1] for n in names if "/share/recon/" in n]
    assert sorted(p.name for p in (REPO / "rules").glob("*.yaml")) == sorted(
        n.split("/", 1)[1] for n in share if n.startswith("rules/"))
    assert "templates/spec.md.j2" in share
    assert any(n.startswith("recon/data/devices/") and n.endswith(".yaml") for n in names)
    assert any(n.startswith("recon/data/anchors/") and n.endswith(".json") for n in names)
    assert sum(n.startswith("reference_impl/configs/") and n.endswith(".json") for n in names) >= 2


def test_installed_layout_is_found(wheel, tmp_path, monkeypatch):
    """Unpack the wheel as an install would (package + <prefix>/share/recon) and point
    recon at it with no source tree beside the package."""
    prefix = tmp_path / "prefix"
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            if "/data/share/recon/" in n:
                dest = prefix / "share" / "recon" / n.split("/share/recon/", 1)[1]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(z.read(n))
    from recon import resources
    monkeypatch.setattr(resources, "_SOURCE_ROOT", tmp_path / "no-source-tree")
    monkeypatch.setattr(sys, "prefix", str(prefix))
    assert resources.resource_dir("rules") == prefix / "share" / "recon" / "rules"
    assert resources.resource_dir("templates") == prefix / "share" / "recon" / "templates"
    from recon import rules
    monkeypatch.setattr(rules, "RULES_DIR", resources.resource_dir("rules"))
    loaded = rules.load_rules()
    assert len(loaded) == len(list((REPO / "rules").glob("*.yaml")))
    assert all(str(prefix) in r.source for r in loaded)
