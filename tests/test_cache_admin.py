"""recon cache info / prune on a cache laid out as recon lays it out."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from recon.cache import load_pickle, save_pickle


def _recon(cache: Path, *args):
    env = dict(os.environ, RECON_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-m", "recon", *args], capture_output=True, text=True, env=env)


def _make(cache: Path, rel: str, size: int, age_days: float) -> Path:
    p = cache / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"x" * size)
    t = time.time() - age_days * 86400
    os.utime(p, (t, t))
    return p


def test_info_counts_files_and_bytes_per_area(tmp_path):
    _make(tmp_path, "facts/ab/abcd.bin", 100, 0)
    _make(tmp_path, "facts/cd/cdef.bin", 50, 0)
    _make(tmp_path, "graph/t.graph.pkl", 1000, 0)
    _make(tmp_path, "downloads/sglang-0.0.1.whl", 7, 0)
    r = _recon(tmp_path, "cache", "info", "--format", "json")
    assert r.returncode == 0, r.stderr
    areas = {a["name"]: a for a in json.loads(r.stdout)["areas"]}
    assert (areas["facts"]["files"], areas["facts"]["bytes"]) == (2, 150)
    assert (areas["graph"]["files"], areas["graph"]["bytes"]) == (1, 1000)
    assert (areas["downloads"]["files"], areas["findings"]["files"]) == (1, 0)


def test_prune_removes_unused_derived_entries_only(tmp_path):
    old = _make(tmp_path, "findings/old.pkl", 300, 40)
    new = _make(tmp_path, "findings/new.pkl", 200, 1)
    old_facts = _make(tmp_path, "facts/ab/abcd.bin", 100, 90)
    writing = _make(tmp_path, "graph/.x.graph.pkl.123.tmp", 10, 0.001)
    wheel = _make(tmp_path, "downloads/sglang-0.0.1.whl", 7, 400)
    r = _recon(tmp_path, "cache", "prune", "--older-than", "30")
    assert r.returncode == 0, r.stderr
    assert "removed 2 files" in r.stdout
    assert not old.exists() and not old_facts.exists() and not old_facts.parent.exists()
    assert new.exists() and writing.exists() and wheel.exists()
    r = _recon(tmp_path, "cache", "prune", "--all", "--wheels")
    assert r.returncode == 0 and not new.exists() and not wheel.exists()
    assert writing.exists()  # a write may still be in progress


def test_a_cache_hit_counts_as_use(tmp_path, monkeypatch):
    monkeypatch.setenv("RECON_CACHE_DIR", str(tmp_path))
    p = tmp_path / "graph" / "t.pkl"
    save_pickle(p, {"a": 1})
    t = time.time() - 60 * 86400
    os.utime(p, (t, t))
    assert load_pickle(p) == {"a": 1}
    assert time.time() - p.stat().st_mtime < 3600
    r = _recon(tmp_path, "cache", "prune", "--older-than", "30")
    assert r.returncode == 0 and p.exists()
