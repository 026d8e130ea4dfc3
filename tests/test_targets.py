"""Targets: folders, git revisions and released versions, and the errors for each kind of bad input."""

from __future__ import annotations

import git
import pytest

from recon.errors import ReconError
from recon.target import from_path, from_version, resolve
from recon.tree import load
from tests.conftest import make_tree


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RECON_CACHE_DIR", str(tmp_path / "cache"))


def test_missing_and_empty_paths(tmp_path):
    with pytest.raises(ReconError, match="does not exist"):
        from_path(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReconError, match="no SGLang found"):
        from_path(tmp_path / "empty")


def test_layouts_are_detected(tmp_path):
    make_tree(tmp_path / "wheel", {"sglang/srt/a.py": "x = 1\n"})
    t = from_path(tmp_path / "wheel")
    assert t.package_prefix == "" and t.source.subdirs == ("sglang",)
    pkg = from_path(tmp_path / "wheel" / "sglang")  # the package folder itself
    assert pkg.package_prefix == ""
    make_tree(tmp_path / "repo" / "python", {"sglang/srt/a.py": "x = 1\n", "sglang/version.py": '__version__ = "9.9.9"\n'})
    (tmp_path / "repo" / "benchmark").mkdir()
    (tmp_path / "repo" / "benchmark" / "tune.py").write_text("def main():\n    pass\n")
    r = from_path(tmp_path / "repo")
    assert r.package_prefix == "python" and r.version == "9.9.9"
    tree = load(r)
    assert "python/sglang/srt/a.py" in tree.index.files
    assert "benchmark/tune.py" in tree.index.files


def test_git_revision_is_read_from_objects(tmp_path):
    root = make_tree(tmp_path / "repo" / "python", {"sglang/srt/a.py": "def old():\n    pass\n"}).parent
    repo = git.Repo.init(root)
    repo.git.add(A=True)
    repo.index.commit("first", author=git.Actor("t", "t@example.com"), committer=git.Actor("t", "t@example.com"))
    first = repo.head.commit.hexsha
    (root / "python/sglang/srt/a.py").write_text("def new():\n    pass\n")
    tree = load(from_path(root, rev=first))
    assert "sglang.srt.a.old" in tree.graph and "sglang.srt.a.new" not in tree.graph
    assert (root / "python/sglang/srt/a.py").read_text().startswith("def new")  # work tree untouched
    with pytest.raises(ReconError, match="unknown git revision"):
        from_path(root, rev="no-such-rev")
    make_tree(tmp_path / "plain", {"sglang/srt/a.py": "x = 1\n"})
    with pytest.raises(ReconError, match="not a git repository"):
        from_path(tmp_path / "plain", rev="HEAD")


def test_default_target_prefers_current_folder(tmp_path, monkeypatch):
    make_tree(tmp_path / "here", {"sglang/srt/a.py": "x = 1\n"})
    monkeypatch.chdir(tmp_path / "here")
    t = resolve()
    assert "current folder" in t.reason and t.package_prefix == ""


@pytest.mark.network
def test_unknown_version_cannot_be_fetched():
    with pytest.raises(ReconError, match="could not fetch sglang==0.0.0.999"):
        from_version("0.0.0.999")


def test_bad_versions():
    with pytest.raises(ReconError, match="not a version number"):
        from_version("latest; rm -rf /")
    with pytest.raises(ReconError, match="either --sglang or --path"):
        resolve(path=".", sglang="0.5.13.post1")
