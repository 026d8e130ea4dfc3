"""recon never reads outside the target root: links that leave it are diagnostics, never content.

On disk and in git objects, a link whose resolved path leaves the root is listed as not analyzed
("symbolic link leaves the target root"); a link to a file inside the root is followed; a link to a
folder is never descended, so links pointing back up cannot loop.
"""

from __future__ import annotations

import json
import os
import shutil

import git
import pytest
from typer.testing import CliRunner

from recon.cli import app
from recon.links import BROKEN, LEAVES_ROOT, git_link_target
from recon.target import from_path
from recon.tree import load
from tests.conftest import make_tree

MARK = "planted_outside_kernel"
# A Triton kernel that reduces on CUDA cores inside a loop: if recon read it, `scan` would report it.
OUTSIDE = f'''import triton
import triton.language as tl

@triton.jit
def {MARK}(a, b, N, K, BLOCK_K: tl.constexpr):
    acc = tl.zeros([16], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(a + k0)
        w = tl.load(b + k0)
        acc += tl.sum(x[None, :] * w, axis=1)
'''


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RECON_CACHE_DIR", str(tmp_path / "cache"))


def _outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.py").write_text(OUTSIDE)
    (d / "nested").mkdir()
    (d / "nested" / "more.py").write_text(f"def {MARK}_too():\n    return 1\n")
    return d


def test_links_on_disk(tmp_path):
    out = _outside(tmp_path)
    root = make_tree(tmp_path / "t", {"sglang/srt/ok.py": "def ok():\n    return 1\n"})
    srt = root / "sglang" / "srt"
    os.symlink(out / "secret.py", srt / "evil.py")  # absolute, to a file outside
    os.symlink("../../../outside", srt / "evildir")  # relative, to a folder outside
    os.symlink("../..", srt / "up")  # back up to the root: inside, a folder, never descended
    os.symlink("..", srt / "loop")  # a cycle through the package
    os.symlink("ok.py", srt / "alias.py")  # a file inside: followed
    os.symlink("missing.py", srt / "gone.py")
    os.symlink("self.py", srt / "self.py")  # a link to itself
    tree = load(from_path(root))
    diags = dict(tree.index.diagnostics)
    assert diags == {
        "sglang/srt/evil.py": LEAVES_ROOT,
        "sglang/srt/evildir": LEAVES_ROOT,
        "sglang/srt/gone.py": BROKEN,
        "sglang/srt/self.py": BROKEN,
    }
    names = set(tree.graph)
    assert not any(MARK in n for n in names)
    assert "sglang.srt.alias.ok" in names and "sglang.srt.ok.ok" in names
    # nothing was descended twice through the links that point back up
    assert not any("/up/" in p or "/loop/" in p for p in tree.index.files)
    # and the source refuses a direct read too (what snippets and checks go through)
    with pytest.raises(OSError, match=LEAVES_ROOT):
        tree.target.source.read("sglang/srt/evil.py")
    with pytest.raises(OSError, match=LEAVES_ROOT):
        tree.target.source.read("sglang/srt/evildir/secret.py")
    assert not tree.target.source.exists("sglang/srt/evil.py")
    # a warm run (manifest cached) still reports them and still does not read them
    again = load(from_path(root))
    assert dict(again.index.diagnostics) == diags
    assert again.index.facts("sglang/srt/evil.py").error == LEAVES_ROOT


def test_package_folder_is_the_root(tmp_path):
    """Given the sglang package folder itself, a link to its parent's files leaves the root."""
    root = make_tree(tmp_path / "site", {"sglang/srt/ok.py": "x = 1\n", "other/lib.py": f"def {MARK}():\n    pass\n"})
    os.symlink("../../other/lib.py", root / "sglang" / "srt" / "lib.py")
    whole = load(from_path(root))  # the parent as the target: the link stays inside, followed
    assert "sglang.srt.lib." + MARK in whole.graph
    pkg = load(from_path(root / "sglang"))
    assert dict(pkg.index.diagnostics) == {"sglang/srt/lib.py": LEAVES_ROOT}
    assert not any(MARK in n for n in pkg.graph)


def test_links_in_git_objects(tmp_path):
    out = _outside(tmp_path)
    repo_root = tmp_path / "repo"
    make_tree(repo_root / "python", {"sglang/srt/ok.py": "def ok():\n    return 1\n"})
    (repo_root / "tools.py").write_text("def tool():\n    return 2\n")
    srt = repo_root / "python" / "sglang" / "srt"
    os.symlink(out / "secret.py", srt / "evil.py")
    os.symlink("../../../../outside/secret.py", srt / "climb.py")
    os.symlink("../../../../outside", srt / "evildir")
    os.symlink("../..", srt / "up")
    os.symlink("ok.py", srt / "alias.py")
    os.symlink("../../../tools.py", srt / "tools.py")  # inside the repository, outside the package
    os.symlink("hop.py", srt / "chain.py")
    os.symlink("evil.py", srt / "hop.py")  # inside, but the chain ends outside
    os.symlink("cyc_b.py", srt / "cyc_a.py")
    os.symlink("cyc_a.py", srt / "cyc_b.py")
    repo = git.Repo.init(repo_root)
    repo.git.add(A=True)
    who = git.Actor("t", "t@example.com")
    repo.index.commit("links", author=who, committer=who)
    # the outside file changes after the commit: a follow through the disk would see this
    (out / "secret.py").write_text(f"def {MARK}_disk():\n    pass\n")
    tree = load(from_path(repo_root, rev="HEAD"))
    diags = dict(tree.index.diagnostics)
    base = "python/sglang/srt/"
    assert diags == {
        base + "evil.py": LEAVES_ROOT,
        base + "climb.py": LEAVES_ROOT,
        base + "evildir": LEAVES_ROOT,
        base + "chain.py": LEAVES_ROOT,
        base + "hop.py": LEAVES_ROOT,
        base + "cyc_a.py": BROKEN,
        base + "cyc_b.py": BROKEN,
    }
    assert not any(MARK in n for n in tree.graph)
    assert "sglang.srt.alias.ok" in tree.graph and "sglang.srt.tools.tool" in tree.graph
    assert not any("/up/" in p for p in tree.index.files)
    with pytest.raises(OSError, match=LEAVES_ROOT):
        tree.target.source.read(base + "evil.py")
    assert tree.target.source.read(base + "alias.py").startswith(b"def ok")


@pytest.mark.parametrize(
    "link, text, want",
    [
        ("a/b/x.py", "y.py", "a/b/y.py"),
        ("a/b/x.py", "../c.py", "a/c.py"),
        ("a/b/x.py", "../../c.py", "c.py"),
        ("a/b/x.py", "../../../c.py", None),
        ("a/b/x.py", "/etc/passwd", None),
        ("a/b/x.py", "./../../..", None),
        ("a/b/x.py", "", None),
        ("x.py", "..", None),
    ],
)
def test_git_link_targets(link, text, want):
    assert git_link_target(link, text) == want


@pytest.mark.network
def test_planted_link_in_a_real_tree_reaches_no_output(tmp_path, sglang_0513):
    """SGLang 0.5.13.post1 with one planted link: the outside kernel is in no output of scan or
    spec; the same file copied inside the tree is (so the check above could fail)."""
    out = _outside(tmp_path)
    root = tmp_path / "wheel"
    src = sglang_0513.source.root / "sglang"
    try:
        shutil.copytree(src, root / "sglang", copy_function=os.link)  # hard links: fast, no copy
    except OSError:
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(src, root / "sglang")
    planted = root / "sglang" / "srt" / "layers" / "moe" / "planted.py"
    os.symlink(out / "secret.py", planted)
    runner = CliRunner()
    for cmd in (["scan", "--format", "text"], ["scan", "--format", "json"], ["scan", "--format", "sarif"], ["spec"], ["spec", "--format", "json"]):
        res = runner.invoke(app, [*cmd, "--path", str(root)])
        assert res.exit_code == 0, (cmd, res.stderr)
        assert MARK not in res.stdout and MARK not in res.stderr
        assert str(out) not in res.stdout
    idx = runner.invoke(app, ["index", "--path", str(root), "--format", "json"])
    assert {"path": "sglang/srt/layers/moe/planted.py", "message": LEAVES_ROOT} in json.loads(idx.stdout)["diagnostics"]
    # control: the same file as a regular file inside the tree is found by the scan
    planted.unlink()
    shutil.copy(out / "secret.py", planted)
    res = runner.invoke(app, ["scan", "--format", "json", "--rule", "triton-cuda-core-reduction", "--path", str(root)])
    assert res.exit_code == 0 and MARK in res.stdout
