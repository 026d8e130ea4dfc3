"""recon apply can only lose nothing: the git states a user really has, built in tmp_path around the
real SGLang 0.5.13.post1 tree (as in test_apply.py), and the whole repository state compared after
each command: branches, HEAD, the stash list (shas), the index, the files' bytes, no operation left
half done."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import git
import pytest

from recon.apply.swap import WRAPPER
from recon.apply.vcs import BRANCH, TRAILER
from tests.test_apply import BUNDLE, DISPATCH, _drop_tmp_graph_caches, base_repo, checkout, cli, snapshot  # noqa: F401

COMMON = "sglang/srt/utils/common.py"
ARGS = "sglang/srt/server_args.py"


def state(root: Path) -> dict:
    """Everything a recon command could change in a repository."""
    r = git.Repo(root)
    gd = Path(r.git_dir)
    return {
        "head": r.head.commit.hexsha,
        "on": None if r.head.is_detached else r.active_branch.name,
        "branches": {h.name: h.commit.hexsha for h in r.heads},
        "stash": r.git.stash("list", "--format=%H %gs"),
        "staged": r.git.diff("--cached", "--binary"),
        "unstaged": r.git.diff("--binary"),
        "files": snapshot(root),
        "half-done": [n for n in ("REVERT_HEAD", "CHERRY_PICK_HEAD", "MERGE_HEAD", "sequencer", "index.lock") if (gd / n).exists()],
    }


def one_line(res) -> str:
    assert res.output.strip().count("\n") == 0, res.output
    assert "Traceback" not in res.output
    return res.output


@pytest.fixture(scope="module")
def applied_base(base_repo, tmp_path_factory):
    """The fixture repository with recon's change applied once (on BRANCH, checked out)."""
    dst = tmp_path_factory.mktemp("applied") / "checkout"
    shutil.copytree(base_repo, dst, symlinks=True)
    res = cli("--path", dst)
    assert res.exit_code == 0, res.output
    return dst


@pytest.fixture
def applied(applied_base, tmp_path):
    dst = tmp_path / "applied"
    shutil.copytree(applied_base, dst, symlinks=True)
    return dst


def _commit(repo: git.Repo, rel: str, data: bytes, msg: str) -> git.Commit:
    (Path(repo.working_tree_dir) / rel).write_bytes(data)
    repo.git.add("--", rel)
    return repo.index.commit(msg)


def _add_submodule(checkout: Path, tmp_path: Path) -> git.Repo:
    src = tmp_path / "subsrc"
    sub = git.Repo.init(src, initial_branch="main")
    (src / "notes.txt").write_bytes(b"the submodule's file\n")
    sub.git.add("-A")
    sub.git.commit("-m", "sub", author="t <t@example.invalid>", env={"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"})
    subprocess.run(["git", "-C", str(checkout), "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(src), "vendor/sub"],
                   check=True, capture_output=True)
    repo = git.Repo(checkout)
    repo.index.commit("vendor a submodule")
    assert not repo.is_dirty(untracked_files=True)
    return repo


# --- item 6: a stash recon did not make is never applied or dropped ---------------------------------


def test_force_with_only_a_dirty_submodule_leaves_the_users_stash_alone(checkout, tmp_path):
    """git stashes nothing for a submodule's own changes; recon used to pop the user's older stash."""
    repo = _add_submodule(checkout, tmp_path)
    common = checkout / COMMON
    committed = common.read_bytes()
    common.write_bytes(committed + b"# the user's stashed idea\n")
    repo.git.stash("push", "-m", "the user's own stash")
    theirs = repo.git.stash("list", "--format=%H %gs")
    assert common.read_bytes() == committed and theirs
    inside = checkout / "vendor/sub/notes.txt"
    inside.write_bytes(b"edited inside the submodule \xff\n")
    res = cli("--path", checkout, "--force")
    assert res.exit_code == 0, res.output
    assert "stashed and restored" not in res.output and "left in place" in res.output and "vendor/sub" in res.output
    assert repo.active_branch.name == BRANCH
    assert repo.git.stash("list", "--format=%H %gs") == theirs  # neither applied nor dropped
    assert common.read_bytes() == committed
    assert inside.read_bytes() == b"edited inside the submodule \xff\n"
    res = cli("--path", checkout, "--revert", "--force")
    assert res.exit_code == 0, res.output
    assert "stashed and restored" not in res.output
    assert repo.active_branch.name == "main" and [h.name for h in repo.heads] == ["main"]
    assert repo.git.stash("list", "--format=%H %gs") == theirs and common.read_bytes() == committed
    assert inside.read_bytes() == b"edited inside the submodule \xff\n"


def test_force_keeps_staged_unstaged_untracked_and_an_older_stash_byte_for_byte(checkout):
    repo = git.Repo(checkout)
    common = checkout / COMMON
    common.write_bytes(common.read_bytes() + b"# stashed earlier by the user\n")
    repo.git.stash("push", "-m", "the user's own stash")
    args = checkout / ARGS
    args.write_bytes(args.read_bytes() + b"# staged\n")
    repo.git.add("--", ARGS)
    args.write_bytes(args.read_bytes() + b"# and unstaged on top\n")  # one file, partly staged
    (checkout / "notes").mkdir()
    (checkout / "notes/new.txt").write_bytes(b"a new file, staged\n")
    repo.git.add("--", "notes/new.txt")
    (checkout / "scratch.bin").write_bytes(b"untracked \x00\xff\xfe bytes\r\n")
    before = state(checkout)
    assert before["stash"] and before["staged"] and before["unstaged"]

    res = cli("--path", checkout, "--force")
    assert res.exit_code == 0, res.output
    assert "stashed and restored (3 paths)" in res.output
    after = state(checkout)
    assert after["on"] == BRANCH and after["branches"]["main"] == before["head"]
    for k in ("stash", "staged", "unstaged", "half-done"):
        assert after[k] == before[k], k
    ours = lambda rel: rel == DISPATCH or rel.startswith(BUNDLE + "/")
    assert {k: v for k, v in after["files"].items() if not ours(k)} == {k: v for k, v in before["files"].items() if not ours(k)}

    res = cli("--path", checkout, "--revert", "--force")
    assert res.exit_code == 0, res.output
    assert state(checkout) == before


# --- item 7: --revert refuses a conflict before touching anything ------------------------------------


def _conflicting_commit(root: Path) -> git.Commit:
    """The user edits the very line recon's codemod wrote, on recon's branch, and commits."""
    repo = git.Repo(root)
    text = (root / DISPATCH).read_bytes().decode()
    line = next(l for l in text.splitlines(True) if f"{WRAPPER}(" in l and "import" not in l)
    return _commit(repo, DISPATCH, text.replace(line, line.rstrip("\n") + "  # tuned by hand\n", 1).encode(), "my tuning")


def test_revert_with_a_conflicting_user_commit_is_refused_and_changes_nothing(applied):
    repo = git.Repo(applied)
    mine = _conflicting_commit(applied)
    for where in (BRANCH, "main"):  # run from the recon branch, and from the user's branch
        repo.git.checkout(where)
        before = state(applied)
        res = cli("--path", applied, "--revert")
        assert res.exit_code == 2, res.output
        out = one_line(res)
        assert "nothing was changed" in out and f"git revert {repo.heads[BRANCH].commit.parents[0].hexsha[:10]}" in out
        assert DISPATCH in out
        assert state(applied) == before
        assert repo.heads[BRANCH].commit == mine


def test_revert_with_a_user_commit_elsewhere_in_the_same_file_merges(applied, base_repo):
    """A later commit to the patched file away from recon's lines: predicted clean, reverted, kept."""
    repo = git.Repo(applied)
    text = (applied / DISPATCH).read_bytes()
    _commit(repo, DISPATCH, text + b"# the user's note at the end\n", "my note")
    res = cli("--path", applied, "--revert")
    assert res.exit_code == 0, res.output
    assert "revert commit" in res.output and repo.active_branch.name == "main"
    assert state(applied)["files"] == snapshot(base_repo) and not repo.is_dirty(untracked_files=True)
    kept = repo.heads[BRANCH].commit
    assert (kept.tree / DISPATCH).data_stream.read() == (base_repo / DISPATCH).read_bytes() + b"# the user's note at the end\n"


def test_revert_force_refuses_uncommitted_edits_to_what_it_rewrites(applied):
    """On the recon branch, an uncommitted edit of the patched file could not be put back after
    the revert: refused before anything (the bytecode apply brought included) is touched."""
    repo = git.Repo(applied)
    _commit(repo, "NOTES.txt", b"mine\n", "a commit of mine on top")
    (applied / DISPATCH).write_bytes((applied / DISPATCH).read_bytes() + b"# uncommitted\n")
    pyc = applied / BUNDLE / "__pycache__" / "moe.cpython-311.pyc"
    pyc.parent.mkdir()
    pyc.write_bytes(b"bytecode apply's package got")
    before = state(applied)
    res = cli("--path", applied, "--revert", "--force")
    assert res.exit_code == 2, res.output
    assert DISPATCH in one_line(res) and "yourself" in res.output
    assert state(applied) == before and pyc.read_bytes() == b"bytecode apply's package got"


# --- the untried shapes: a foreign branch, a detached HEAD, a linked worktree ------------------------


def test_a_branch_recon_did_not_make_is_refused_and_left_alone(checkout):
    repo = git.Repo(checkout)
    repo.git.checkout("-b", BRANCH)
    _commit(repo, "NOTES.txt", b"my own work on a branch of this name\n", "mine")
    repo.git.checkout("main")
    before = state(checkout)
    for args in ([], ["--force"], ["--dry-run"], ["--revert"], ["--revert", "--force"]):
        res = cli("--path", checkout, *args)
        assert res.exit_code == 2, (args, res.output)
        assert "did not make" in one_line(res) and "git branch -m" in res.output
        assert state(checkout) == before, args


def test_a_forged_base_commit_trailer_is_not_passed_to_git(applied, base_repo):
    """--revert reads the commit message; a base that is not a commit id falls back to the parent."""
    repo = git.Repo(applied)
    c = repo.head.commit
    forged = c.message.replace(f"Recon-Base-Commit: {c.parents[0].hexsha}", "Recon-Base-Commit: --orphan=evil")
    forged = forged.replace("Recon-Base-Branch: main", "Recon-Base-Branch: (detached)")
    assert "--orphan=evil" in forged and TRAILER in forged
    repo.git.commit("--amend", "-m", forged)
    res = cli("--path", applied, "--revert")
    assert res.exit_code == 0, res.output
    assert repo.head.is_detached and repo.head.commit.hexsha == c.parents[0].hexsha
    assert "evil" not in [h.name for h in repo.heads] and BRANCH not in [h.name for h in repo.heads]
    assert snapshot(applied) == snapshot(base_repo)


def test_detached_head_round_trip(checkout):
    repo = git.Repo(checkout)
    repo.git.checkout("--detach")
    before = state(checkout)
    res = cli("--path", checkout)
    assert res.exit_code == 0, res.output
    assert "from detached HEAD" in res.output
    assert repo.active_branch.name == BRANCH and repo.head.commit.parents[0].hexsha == before["head"]
    assert "Recon-Base-Branch: (detached)" in repo.head.commit.message
    res = cli("--path", checkout, "--revert")
    assert res.exit_code == 0, res.output
    assert state(checkout) == before  # detached again, at the same commit, no branch left


def test_linked_worktree_whose_git_is_a_file(checkout, tmp_path):
    """A `git worktree add` checkout: `.git` is a file, and the stash list is shared with the main
    worktree, where the user's stash lives."""
    repo = git.Repo(checkout)
    linked = tmp_path / "linked"
    repo.git.worktree("add", "-q", "-b", "feature", str(linked))
    assert (linked / ".git").is_file()
    common = checkout / COMMON
    common.write_bytes(common.read_bytes() + b"# stashed in the main worktree\n")
    repo.git.stash("push", "-m", "the user's stash, main worktree")
    (linked / "scratch.txt").write_bytes(b"untracked in the linked worktree\n")
    main_before, linked_before = state(checkout), state(linked)

    res = cli("--path", linked, "--force")
    assert res.exit_code == 0, res.output
    wt = git.Repo(linked)
    assert wt.active_branch.name == BRANCH and wt.head.commit.parents[0].hexsha == linked_before["head"]
    assert (linked / "scratch.txt").read_bytes() == b"untracked in the linked worktree\n"
    main_after = state(checkout)
    assert main_after["stash"] == main_before["stash"]
    assert {k: v for k, v in main_after.items() if k != "branches"} == {k: v for k, v in main_before.items() if k != "branches"}

    # the branch is checked out in the linked worktree: a revert from the main one is refused
    res = cli("--path", checkout, "--revert")
    assert res.exit_code == 2, res.output
    assert "checked out in the worktree" in one_line(res) and str(linked) in res.output
    assert state(checkout) == main_after

    res = cli("--path", linked, "--revert", "--force")
    assert res.exit_code == 0, res.output
    assert state(linked) == linked_before and state(checkout) == main_before


def test_a_bare_repository_is_refused_in_one_line(tmp_path):
    src = git.Repo.init(tmp_path / "src", initial_branch="main")
    (tmp_path / "src/README").write_bytes(b"x\n")
    src.git.add("-A")
    src.index.commit("base")
    bare = tmp_path / "bare.git"
    git.Repo.clone_from(tmp_path / "src", bare, bare=True)
    refs = sorted(p.relative_to(bare).as_posix() for p in bare.rglob("*"))
    for args in ([], ["--force"], ["--revert"]):
        res = cli("--path", bare, *args)
        assert res.exit_code == 2, res.output
        assert "bare git repository" in one_line(res)
    assert sorted(p.relative_to(bare).as_posix() for p in bare.rglob("*")) == refs


def test_a_rebase_stopped_half_way_is_refused_and_left_as_it_is(checkout):
    """`git rebase -x false` stops with a clean work tree: apply would make its branch mid-rebase."""
    repo = git.Repo(checkout)
    _commit(repo, "NOTES.txt", b"one\n", "one")
    _commit(repo, "NOTES.txt", b"two\n", "two")
    with pytest.raises(git.GitCommandError):
        repo.git.rebase("-x", "false", "HEAD~1")
    assert (Path(repo.git_dir) / "rebase-merge").is_dir() and not repo.is_dirty(untracked_files=True)
    before = state(checkout)
    todo = sorted(p.name for p in (Path(repo.git_dir) / "rebase-merge").iterdir())
    for args in ([], ["--force"], ["--revert"]):
        res = cli("--path", checkout, *args)
        assert res.exit_code == 2, (args, res.output)
        assert "a rebase is in progress" in one_line(res)
        assert state(checkout) == before and [h.name for h in repo.heads] == ["main"]
    assert sorted(p.name for p in (Path(repo.git_dir) / "rebase-merge").iterdir()) == todo
