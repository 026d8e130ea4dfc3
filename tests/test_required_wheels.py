"""Whether a module imports is judged by what the release's required distributions ship, not by
their names: a pinned kernel wheel's RECORD lists every top-level package it installs
(``triton_kernels`` inside ``sglang-kernel``), read once and cached as a list of names."""

from __future__ import annotations

import zipfile

import pytest

from recon import shipped


def _wheel(path, record_paths):
    with zipfile.ZipFile(path, "w") as z:
        for p in record_paths:
            z.writestr(p, b"")
        z.writestr("k-1.0.dist-info/RECORD", "".join(f"{p},sha256=x,0\n" for p in record_paths) + "k-1.0.dist-info/RECORD,,\n")
    return path


def test_top_levels_are_what_the_record_installs(tmp_path):
    whl = _wheel(tmp_path / "k-1.0-cp310-abi3-manylinux2014_x86_64.whl", [
        "sgl_kernel/__init__.py", "triton_kernels/matmul.py", "k.libs/libcudart.so.12", "k-1.0.dist-info/METADATA",
        "single.py", "ext.cpython-311-x86_64-linux-gnu.so", "k-1.0.data/purelib/extra/__init__.py", "k.pth"])
    assert shipped.top_levels(whl) == {"sgl_kernel", "triton_kernels", "single", "ext", "extra"}


_REQUIRES = {"sglang/srt/probe.py": (
    "import importlib.util\n"
    "def has_tk():\n"
    "    return importlib.util.find_spec('triton_kernels') is not None\n"),
    "pyproject.toml": "[project]\nname = 'sglang'\nversion = '0.0.0'\ndependencies = ['sglang-kernel==9.9.9']\n"}


def _lookup(synthetic, module):
    from recon.engine.packages import declared

    return declared(synthetic(_REQUIRES)).lookup(module)


def test_a_wheel_that_cannot_be_read_falls_back_to_names_and_says_why(synthetic, monkeypatch):
    monkeypatch.setenv("RECON_DIST_MODULES", "on")
    monkeypatch.setattr(shipped, "_MEMO", {})
    monkeypatch.setattr(shipped, "_cached", lambda key: None)
    monkeypatch.setattr(shipped, "_fetch", lambda d, v: (None, f"pip download {d}=={v} failed: offline"))
    req, why = _lookup(synthetic, "triton_kernels")
    assert req is None and "==9.9.9 failed: offline" in why
    assert _lookup(synthetic, "sgl_kernel")[0] == "sglang-kernel==9.9.9"  # by its name, still


def test_a_read_wheel_decides_the_probe(synthetic, monkeypatch):
    monkeypatch.setattr(shipped, "_MEMO", {("sglang_kernel", "9.9.9"): (frozenset({"sgl_kernel", "triton_kernels"}), "")})
    assert _lookup(synthetic, "triton_kernels.matmul")[0] == "sglang-kernel==9.9.9 (its wheel ships triton_kernels)"
    assert _lookup(synthetic, "flash_attn") == (None, "")


@pytest.mark.network
def test_gpt_oss_on_h200_runs_the_triton_kernels_runner_its_kernel_wheel_ships(tree_unseen, monkeypatch):
    # sglang-kernel==0.4.7 (pinned by 0.5.20) ships triton_kernels; gpt-oss's override then picks
    # moe_runner_backend='triton_kernel' on Hopper, as SGLang's own resolution does (bench/oracle).
    # One kernel wheel (about 370 MB) is fetched the first time; its list of names is cached.
    from recon.checks import CheckContext
    from recon.profiles import load_device, load_model
    from recon.runtime import build

    monkeypatch.setenv("RECON_DIST_MODULES", "on")
    monkeypatch.setattr(shipped, "_MEMO", {})

    def view():
        return build(CheckContext(tree_unseen, load_device("h200"), load_model("gpt-oss-120b")), {})

    got = view()
    assert "triton_kernels" in shipped.modules("sglang-kernel", "0.4.7")[0]
    assert got.server_args["moe_runner_backend"]["value"] == "'triton_kernel'"
    assert not any("moe_runner_backend" in f["changes"] for f in got.forks)
    assert any(lf["name"].startswith("triton_kernels.") and lf.get("required_by_release") for lf in got.moe["leaves"])
    assert any("triton_kernels installed: " in n and "ships triton_kernels" in n for n in got.notes)

    # without reading the wheel: by names only, both outcomes, and the assumption says so
    monkeypatch.setenv("RECON_DIST_MODULES", "off")
    monkeypatch.setattr(shipped, "_MEMO", {})
    off = view()
    assert off.server_args["moe_runner_backend"]["value"] == "'auto'"
    assert any(f["changes"].get("moe_runner_backend") == "'triton_kernel'" for f in off.forks)
    assert any("triton_kernels installed or not: unknown" in n and "RECON_DIST_MODULES=off" in n for n in off.notes)
