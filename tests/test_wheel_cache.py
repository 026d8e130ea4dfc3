"""The unpacked-wheel cache is checked against the wheel's RECORD, on the real 0.5.13.post1 wheel.

Each test works on its own cache (a copy of the downloaded wheel), so damaging it never touches
the cache the rest of the suite reads.
"""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import SEED_VERSION
from recon import target
from recon.errors import ReconError

COMMON = "sglang/srt/utils/common.py"


@pytest.fixture
def seed_wheel(sglang_0513, cache_root) -> Path:
    return sorted((cache_root / "downloads").glob(f"sglang-{SEED_VERSION}-*.whl"))[-1]


@pytest.fixture
def own_cache(tmp_path, monkeypatch, seed_wheel) -> Path:
    cache = tmp_path / "cache"
    (cache / "downloads").mkdir(parents=True)
    shutil.copy(seed_wheel, cache / "downloads" / seed_wheel.name)
    monkeypatch.setenv("RECON_CACHE_DIR", str(cache))
    return cache


def _member(wheel: Path, name: str) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        return z.read(name)


def test_a_damaged_or_foreign_file_is_unpacked_again_and_said(own_cache, seed_wheel, capsys):
    root = target.fetch_wheel(SEED_VERSION)
    capsys.readouterr()
    (root / COMMON).write_bytes(b"")  # truncate -s 0
    (root / "sglang/srt/planted.py").write_text("x = 1\n")
    assert target.fetch_wheel(SEED_VERSION) == root
    err = capsys.readouterr().err
    assert "2 file(s) of the cached sglang==0.5.13.post1 differ" in err and COMMON in err and "planted.py" in err
    assert (root / COMMON).read_bytes() == _member(seed_wheel, COMMON)
    assert not (root / "sglang/srt/planted.py").exists()
    target.fetch_wheel(SEED_VERSION)
    assert capsys.readouterr().err == ""  # repaired: the next run is quiet


def test_a_touched_file_is_hashed_and_kept(own_cache, capsys):
    root = target.fetch_wheel(SEED_VERSION)
    p = root / COMMON
    os.utime(p, (1_000_000_000, 1_000_000_000))
    res = target.verify_unpacked(SEED_VERSION)
    assert (res.hashed, res.bad) == (1, [])
    assert capsys.readouterr().err == ""
    assert target.verify_unpacked(SEED_VERSION).hashed == 0  # the new time is remembered


def test_a_cut_short_download_is_fetched_again_once(own_cache, seed_wheel, monkeypatch, capsys):
    w = own_cache / "downloads" / seed_wheel.name
    w.write_bytes(seed_wheel.read_bytes()[: seed_wheel.stat().st_size // 2])
    calls = []

    def download(version, wheel_dir):
        calls.append(version)
        shutil.copy(seed_wheel, wheel_dir / seed_wheel.name)
        return wheel_dir / seed_wheel.name

    monkeypatch.setattr(target, "_download", download)
    root = target.fetch_wheel(SEED_VERSION)
    assert calls == [SEED_VERSION]
    assert "fetching sglang==0.5.13.post1 again" in capsys.readouterr().err
    assert (root / COMMON).read_bytes() == _member(seed_wheel, COMMON)


def test_a_download_cut_short_twice_is_an_error(own_cache, seed_wheel, monkeypatch):
    short = seed_wheel.read_bytes()[:1000]
    (own_cache / "downloads" / seed_wheel.name).write_bytes(short)
    calls = []

    def download(version, wheel_dir):
        calls.append(version)
        (wheel_dir / seed_wheel.name).write_bytes(short)
        return wheel_dir / seed_wheel.name

    monkeypatch.setattr(target, "_download", download)
    with pytest.raises(ReconError, match="damaged even after fetching it again"):
        target.fetch_wheel(SEED_VERSION)
    assert len(calls) == 1
    assert not (own_cache / "wheels" / SEED_VERSION).exists()


def _recon(cache: Path, *args):
    env = dict(os.environ, RECON_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-m", "recon", *args], capture_output=True, text=True, env=env)


def test_cache_verify_hashes_everything_and_repairs(own_cache, seed_wheel):
    root = target.fetch_wheel(SEED_VERSION)
    p = root / COMMON
    st = p.stat()
    data = bytearray(p.read_bytes())
    data[100] ^= 1  # same size, same mtime: only a full hash sees it
    p.write_bytes(bytes(data))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.verify_unpacked(SEED_VERSION).bad == []  # the cheap check trusts the stamp
    r = _recon(own_cache, "cache", "verify")
    assert r.returncode == 0, r.stderr
    assert "1 file(s) differed and were unpacked again" in r.stdout and COMMON in r.stderr
    assert p.read_bytes() == _member(seed_wheel, COMMON)
    r = _recon(own_cache, "cache", "verify", "--sglang", "9.9.9")
    assert r.returncode == 2 and "not in the cache" in r.stderr


def test_cache_verify_with_nothing_cached_has_nothing_to_do(tmp_path):
    r = _recon(tmp_path, "cache", "verify")
    assert r.returncode == 1 and "nothing to verify" in r.stderr


def test_prune_help_says_how_to_remove_the_wheels(tmp_path):
    r = _recon(tmp_path, "cache", "prune", "--help")
    assert r.returncode == 0 and "--all --wheels" in " ".join(r.stdout.split())
