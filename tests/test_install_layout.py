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


def _fake_dist(site: Path, name: str, version: str) -> None:
    """An installed distribution as pip sees one: only its metadata (pip never imports it)."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")


@pytest.mark.parametrize("torch_version", ["2.10.0", "2.11.0", "2.12.0"])
def test_kernel_extra_keeps_a_users_torch(wheel, tmp_path, torch_version):
    """`pip install 'recon[kernel]'` into an environment that has another torch in the tested range
    (a user's CUDA build) plans to install recon only: torch and Triton stay as they are. pip's own
    resolver decides (`--dry-run --report`), offline: recon's other requirements are this
    environment's, seen through a .pth; the installed torch and Triton are metadata only."""
    import json
    import os
    import site
    import sysconfig
    import venv

    env_dir = tmp_path / "user-env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    target_site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                      capture_output=True, text=True, check=True).stdout.strip())
    _fake_dist(target_site, "torch", torch_version)
    _fake_dist(target_site, "triton", "3.6.0")
    # recon's other requirements: this environment's packages, linked into a folder the target
    # reads through a .pth, without its own recon, torch and Triton (so only the fakes answer)
    deps = tmp_path / "deps"
    deps.mkdir()
    own = ("recon-", "__editable__", "torch", "triton")
    for sp in {sysconfig.get_paths()["purelib"], *site.getsitepackages()}:
        for entry in Path(sp).iterdir():
            if not entry.name.lower().startswith(own) and not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
    (target_site / "zz_recon_deps.pth").write_text(f"{deps}\n")
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # this machine's find-links (a local torch) would hide a wrong pin
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--dry-run", "--no-index",
                           "--find-links", str(wheel.parent), "--report", str(report), "-q", "recon[kernel]"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr.strip().splitlines()[-3:]
    planned = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in json.loads(report.read_text())["install"]}
    assert planned == {"recon": "0.1.0"}, planned
