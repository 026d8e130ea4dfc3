"""The git side of recon apply (GitPython): one branch, one commit, and the way back.

Choice: apply checks the new branch out, so the patched tree is ready to run; the user's branch
ref is never moved (the commit is made on ``recon/grouped-mxfp4``, created from HEAD). The commit
message carries trailers naming the branch and commit the user was on, which ``--revert`` reads
to go back. A dirty work tree is refused; with ``--force`` the user's changes (staged, unstaged and
untracked) are stashed first and restored afterwards with ``git stash pop --index``; when a
restore cannot apply cleanly the stash is kept, so nothing is lost.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Iterator, Optional

import git

from ..errors import NothingToDo, ReconError

BRANCH = "recon/grouped-mxfp4"
TRAILER = "Recon-Apply: grouped-mxfp4"


class GitRefused(ReconError):
    exit_code = 2


def open_repo(path: Path) -> Optional[git.Repo]:
    try:
        return git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None


def repo_rel(repo: git.Repo, path: Path) -> str:
    return Path(path).resolve().relative_to(Path(repo.working_tree_dir).resolve()).as_posix()


def tracked(repo: git.Repo, rel: str) -> bool:
    try:
        repo.git.ls_files("--error-unmatch", "--", rel)
        return True
    except git.GitCommandError:
        return False


def has_branch(repo: git.Repo) -> bool:
    return BRANCH in [h.name for h in repo.heads]


def current_branch(repo: git.Repo) -> Optional[str]:
    return None if repo.head.is_detached else repo.active_branch.name


def dirty_paths(repo: git.Repo) -> list[str]:
    """Paths with uncommitted changes, untracked files included (``git status --porcelain``)."""
    out = repo.git.status("--porcelain", "--untracked-files=all", "-z")
    return sorted({e[3:] for e in out.split("\0") if len(e) > 3})


@contextlib.contextmanager
def stashed(repo: git.Repo, force: bool, touching: list[str]) -> Iterator[list[str]]:
    """Refuse a dirty tree, or (``force``) stash it for the duration and restore it after."""
    dirty = dirty_paths(repo)
    if not dirty:
        yield []
        return
    shown = ", ".join(dirty[:5]) + (f" (+{len(dirty) - 5} more)" if len(dirty) > 5 else "")
    if not force:
        raise GitRefused(f"the work tree has uncommitted changes ({shown}): commit or stash them, or pass --force to have recon stash them and restore them afterwards")
    clash = [p for p in dirty if any(p == t or p.startswith(t.rstrip("/") + "/") for t in touching)]
    if clash:
        raise GitRefused(f"your uncommitted changes touch {', '.join(clash)}, which recon apply rewrites: commit or stash them yourself first")
    repo.git.stash("push", "--include-untracked", "-m", "recon apply: the user's uncommitted work (restored automatically)")
    try:
        yield dirty
    finally:
        try:
            repo.git.stash("pop", "--index")
        except git.GitCommandError as e:
            raise ReconError(f"could not restore your uncommitted changes automatically ({e.stderr.strip().splitlines()[-1] if e.stderr else e}); they are safe in `git stash list` (stash@{{0}})") from None


def commit_message(summary: str, body: str, base_branch: Optional[str], base_commit: str) -> str:
    return (f"{summary}\n\n{body.rstrip()}\n\n{TRAILER}\nRecon-Base-Branch: {base_branch or '(detached)'}\nRecon-Base-Commit: {base_commit}\n")


def commit_on_branch(repo: git.Repo, write, paths: list[str], message: str) -> git.Commit:
    """Create BRANCH from HEAD, check it out, ``write()`` the files, commit ``paths`` only."""
    base = current_branch(repo) or repo.head.commit.hexsha
    repo.git.checkout("-b", BRANCH)
    try:
        write()
        repo.git.add("-A", "--", *paths)
        repo.index.commit(message)
        return repo.head.commit
    except Exception:
        # leave nothing behind: the user's branch was never touched
        repo.git.reset("--hard", "HEAD")
        repo.git.clean("-fdq", "--", *paths)
        repo.git.checkout(base)
        repo.git.branch("-D", BRANCH)
        raise


def apply_commit(repo: git.Repo) -> Optional[git.Commit]:
    """The commit recon apply made on BRANCH (found by its trailer), if any."""
    if not has_branch(repo):
        return None
    for c in repo.iter_commits(BRANCH, max_count=200):
        if TRAILER in c.message:
            return c
    return None


def trailer(commit: git.Commit, key: str) -> Optional[str]:
    m = re.search(rf"^{re.escape(key)}: (.+)$", commit.message, re.M)
    return m.group(1).strip() if m else None


def refuse_dirty(repo: git.Repo) -> None:
    """The dirty-tree refusal of :func:`stashed`, made before any analysis (which takes seconds)."""
    dirty = dirty_paths(repo)
    if dirty:
        shown = ", ".join(dirty[:5]) + (f" (+{len(dirty) - 5} more)" if len(dirty) > 5 else "")
        raise GitRefused(f"the work tree has uncommitted changes ({shown}): commit or stash them, or pass --force to have recon stash them and restore them afterwards")


def drop_bytecode(repo: git.Repo) -> list[str]:
    """Remove the bytecode Python wrote for the files recon's commit added or changed
    (``__pycache__/<stem>.*.pyc`` beside each), and ``__pycache__`` folders left empty: it is
    part of what apply brought, untracked (or ignored), and would otherwise block the revert or
    stay behind on the user's branch. The user's own bytecode is not touched. Returns what went."""
    c = apply_commit(repo)
    if c is None or not c.parents:
        return []
    root = Path(repo.working_tree_dir)
    gone = []
    for d in c.parents[0].diff(c):
        rel = d.b_path or d.a_path
        if not rel.endswith(".py"):
            continue
        src = root / rel
        cache = src.parent / "__pycache__"
        for pyc in sorted(cache.glob(f"{src.stem}.*.pyc")) if cache.is_dir() else ():
            pyc.unlink()
            gone.append(pyc.relative_to(root).as_posix())
        if cache.is_dir() and not any(cache.iterdir()):
            cache.rmdir()
    return gone


def revert(repo: git.Repo) -> str:
    """Take the change out; return to the branch the user was on. Returns what was done."""
    c = apply_commit(repo)
    if c is None:
        raise NothingToDo(f"no branch {BRANCH} made by recon apply in {repo.working_tree_dir}: nothing to revert")
    base_branch = trailer(c, "Recon-Base-Branch")
    base_commit = trailer(c, "Recon-Base-Commit") or c.parents[0].hexsha
    back_to = base_branch if base_branch and base_branch in [h.name for h in repo.heads] else base_commit
    on_branch = current_branch(repo) == BRANCH
    tip = repo.heads[BRANCH].commit
    if tip == c:  # unchanged since apply: the branch goes, and with it the change
        if on_branch:
            repo.git.checkout(back_to)
            _drop_empty_dirs(repo, c)
        repo.git.branch("-D", BRANCH)
        return f"deleted branch {BRANCH} (was {c.hexsha[:10]}); on {back_to}"
    # commits of the user's on top: keep them, undo only recon's commit
    if not on_branch:
        start = current_branch(repo) or repo.head.commit.hexsha
        repo.git.checkout(BRANCH)
    repo.git.revert("--no-edit", c.hexsha)
    _drop_empty_dirs(repo, c)
    rc = repo.head.commit.hexsha[:10]
    repo.git.checkout(back_to if on_branch else start)
    return f"{BRANCH} has commits after recon's: added revert commit {rc} on it and kept it; on {back_to if on_branch else start}"


def _drop_empty_dirs(repo: git.Repo, c: git.Commit) -> None:
    """Folders recon's commit created that are empty once its files are gone (git leaves a folder
    that still held ignored bytecode; that bytecode is gone by now)."""
    root = Path(repo.working_tree_dir)
    dirs = {(root / (d.b_path or d.a_path)).parent for d in c.parents[0].diff(c) if d.new_file}
    for folder in sorted(dirs, key=lambda p: -len(p.parts)):
        while folder != root and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
