"""The git side of recon apply (GitPython): one branch, one commit, and the way back.

Choice: apply checks the new branch out, so the patched tree is ready to run; the user's branch
ref is never moved (the commit is made on ``recon/grouped-mxfp4``, created from HEAD). The commit
message carries trailers naming the branch and commit the user was on, which ``--revert`` reads
to go back. A dirty work tree is refused; with ``--force`` the user's changes (staged, unstaged and
untracked) are stashed first, in a stash recon knows by its sha, and that commit alone is applied
back (``git stash apply --index``) and dropped; when a restore cannot apply cleanly the stash is
kept, so nothing is lost. Every refusal of ``--revert`` (a conflict with the user's later commits
included, predicted in memory) is made before anything is touched.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import uuid
from dataclasses import dataclass, field
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
        repo = git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    if repo.bare or repo.working_tree_dir is None:
        raise GitRefused(f"{path} is a bare git repository (no work tree to change): run recon apply in a checkout of it")
    return repo


# what git leaves in the (per-worktree) git directory while an operation waits for the user
_IN_PROGRESS = {"rebase-merge": "a rebase", "rebase-apply": "a rebase or `git am`", "MERGE_HEAD": "a merge",
                "CHERRY_PICK_HEAD": "a cherry-pick", "REVERT_HEAD": "a revert", "sequencer": "a cherry-pick or revert",
                "BISECT_LOG": "a bisect"}


def refuse_in_progress(repo: git.Repo) -> None:
    """A branch made, or a branch left, in the middle of the user's own rebase, merge or bisect
    would be mixed into it: refused, whatever the work tree looks like."""
    gd = Path(repo.git_dir)
    what = next((w for name, w in _IN_PROGRESS.items() if (gd / name).exists()), None)
    if what:
        raise GitRefused(f"{what} is in progress in {repo.working_tree_dir}: finish or abort it first (`git status` says how); nothing was changed")


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
    """Paths with uncommitted changes, untracked files included (``git status --porcelain -z``; a
    rename or copy is two fields, the new path and the path it came from: both are listed)."""
    fields = repo.git.status("--porcelain", "--untracked-files=all", "-z").split("\0")
    paths, i = set(), 0
    while i < len(fields):
        e = fields[i]
        if len(e) > 3:
            paths.add(e[3:])
            if e[0] in "RC" and i + 1 < len(fields):  # the source path follows as its own field
                i += 1
                paths.add(fields[i])
        i += 1
    return sorted(p for p in paths if p)


@dataclass
class Saved:
    """What :func:`stashed` did with the user's uncommitted work."""

    paths: list[str] = field(default_factory=list)  # everything that was dirty
    stash: Optional[str] = None  # the sha of the stash recon made (None: git had nothing it could stash)
    left: list[str] = field(default_factory=list)  # dirty paths git does not stash (a submodule's own work), left in place

    @property
    def stashed(self) -> int:
        return len(self.paths) - len(self.left) if self.stash else 0


def _last_line(e: git.GitCommandError) -> str:
    lines = (e.stderr or "").strip().splitlines()
    return lines[-1].strip() if lines else str(e)


def stash_entries(repo: git.Repo) -> list[tuple[str, str]]:
    """(sha, subject) of every stash entry, stash@{0} first."""
    out = repo.git.stash("list", "--format=%H %s")
    return [tuple(l.split(" ", 1)) if " " in l else (l, "") for l in out.splitlines() if l.strip()]


def _drop_stash(repo: git.Repo, sha: str) -> None:
    """Drop the one entry whose commit is ``sha`` (by its position now, found again: never stash@{0} blindly)."""
    shas = [s for s, _ in stash_entries(repo)]
    if sha in shas:
        repo.git.stash("drop", "-q", f"stash@{{{shas.index(sha)}}}")


def dirty_clash(dirty: list[str], touching: list[str]) -> list[str]:
    return [p for p in dirty if any(p == t or p.startswith(t.rstrip("/") + "/") or t.startswith(p.rstrip("/") + "/") for t in touching)]


@contextlib.contextmanager
def stashed(repo: git.Repo, force: bool, touching: list[str]) -> Iterator[Saved]:
    """Refuse a dirty tree, or (``force``) stash it for the duration and restore it after.

    The stash is recon's own, known by its commit sha: its message carries a fresh token, and the
    entry is looked up by that token among those that were not there before. Only that commit is
    applied back and only that entry dropped, so a stash of the user's is never applied or dropped,
    even when git stashed nothing (a submodule's own changes are not stashable: they stay in place).
    """
    dirty = check_dirty(repo, force, touching)
    if not dirty:
        yield Saved()
        return
    before = {s for s, _ in stash_entries(repo)}
    token = f"recon-apply-{uuid.uuid4().hex}"
    try:
        repo.git.stash("push", "--include-untracked", "-m", f"{token}: your uncommitted work (recon apply restores it automatically)")
    except git.GitCommandError as e:
        mine = [s for s, subj in stash_entries(repo) if s not in before and token in subj]
        kept = (f"git stopped part-way: what it saved is in the stash {mine[0][:10]} (`git stash apply --index {mine[0][:10]}`)"
                if mine else "recon changed nothing")
        raise GitRefused(f"git could not stash your uncommitted changes ({_last_line(e)}); {kept}") from None
    mine = [s for s, subj in stash_entries(repo) if s not in before and token in subj]
    saved = Saved(dirty, mine[0] if mine else None, dirty_paths(repo))
    try:
        yield saved
    finally:
        if saved.stash is not None:
            try:
                repo.git.stash("apply", "--index", saved.stash)
            except git.GitCommandError as e:
                raise ReconError(f"could not restore your uncommitted changes automatically ({_last_line(e)}); they are kept in the stash "
                                 f"{saved.stash[:10]}: `git stash apply --index {saved.stash[:10]}`") from None
            _drop_stash(repo, saved.stash)


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


def check_dirty(repo: git.Repo, force: bool, touching: list[str], ignore: frozenset = frozenset()) -> list[str]:
    """The dirty paths (less ``ignore``), or the refusal: any without ``force``; with it, any that
    the change rewrites (``touching``), which a stash could not be put back over."""
    regenerable = untracked_bytecode(repo)
    dirty = [p for p in dirty_paths(repo) if p not in ignore and p not in regenerable]
    if not dirty:
        return []
    shown = ", ".join(dirty[:5]) + (f" (+{len(dirty) - 5} more)" if len(dirty) > 5 else "")
    if not force:
        raise GitRefused(f"the work tree has uncommitted changes ({shown}): commit or stash them, or pass --force to have recon stash them and restore them afterwards")
    clash = dirty_clash(dirty, touching)
    if clash:
        raise GitRefused(f"your uncommitted changes touch {', '.join(clash)}, which recon apply rewrites: commit or stash them yourself first")
    return dirty


def untracked_bytecode(repo: git.Repo) -> frozenset:
    """Untracked ``__pycache__/*.pyc`` files: Python rewrites them from the sources whenever it likes,
    so they are no uncommitted work of the user's (a tree without a ``.gitignore`` shows them as
    untracked). A checkout leaves untracked files where they are, so they need no stash either."""
    out = repo.git.ls_files("--others", "-z", "--", "*.pyc")
    return frozenset(p for p in out.split("\0") if p and "__pycache__" in p.split("/"))


def refuse_dirty(repo: git.Repo) -> None:
    """The dirty-tree refusal of :func:`stashed`, made before any analysis (which takes seconds)."""
    check_dirty(repo, False, [])


def bytecode_of(repo: git.Repo) -> list[Path]:
    """The bytecode Python wrote for the files recon's commit added or changed
    (``__pycache__/<stem>.*.pyc`` beside each): part of what apply brought, untracked (or ignored)."""
    c = apply_commit(repo)
    if c is None or not c.parents:
        return []
    root = Path(repo.working_tree_dir)
    found = []
    for d in c.parents[0].diff(c):
        rel = d.b_path or d.a_path
        if not rel.endswith(".py"):
            continue
        src = root / rel
        cache = src.parent / "__pycache__"
        found += sorted(cache.glob(f"{src.stem}.*.pyc")) if cache.is_dir() else []
    return found


def drop_bytecode(repo: git.Repo) -> list[str]:
    """Remove :func:`bytecode_of` and ``__pycache__`` folders it leaves empty: it would otherwise
    block the revert or stay behind on the user's branch. The user's own bytecode is not touched.
    Returns what went."""
    root = Path(repo.working_tree_dir)
    gone = []
    for pyc in bytecode_of(repo):
        pyc.unlink()
        gone.append(pyc.relative_to(root).as_posix())
        if not any(pyc.parent.iterdir()):
            pyc.parent.rmdir()
    return gone


def foreign_branch(repo: git.Repo) -> GitRefused:
    return GitRefused(f"a branch {BRANCH} exists that recon apply did not make (no `{TRAILER}` commit on it): recon leaves it alone; "
                      f"rename it (`git branch -m {BRANCH} <new-name>`) and run again")


def worktree_of(repo: git.Repo, branch: str) -> Optional[str]:
    """The other worktree of this repository that has ``branch`` checked out, if any (git refuses
    to check a branch out twice, and moving it under that worktree would desync its files)."""
    here = Path(repo.working_tree_dir).resolve()
    path = None
    for line in repo.git.worktree("list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree "):]
        elif line == f"branch refs/heads/{branch}" and path and Path(path).resolve() != here:
            return path
    return None


def changed_paths(c: git.Commit) -> list[str]:
    """Every path recon's commit added, changed or removed (repository-relative)."""
    return sorted({p for d in c.parents[0].diff(c) for p in (d.a_path, d.b_path) if p})


def _blob(commit: git.Commit, rel: str) -> Optional[git.Blob]:
    try:
        return commit.tree / rel
    except KeyError:
        return None


def revert_conflicts(repo: git.Repo, c: git.Commit, tip: git.Commit) -> list[str]:
    """The paths where undoing ``c`` on ``tip`` would conflict, found without touching the work
    tree or the index: a path the later commits left as ``c`` made it (or already undid) reverts
    cleanly; otherwise git's own three-way file merge (``git merge-file``) on the three versions,
    in a temporary folder, says whether it merges."""
    parent, bad = c.parents[0], []
    for rel in changed_paths(c):
        now, made, was = _blob(tip, rel), _blob(c, rel), _blob(parent, rel)
        key = lambda b: b.binsha if b is not None else None
        if key(now) in (key(made), key(was)):
            continue
        if None in (now, made, was) or any(b.type != "blob" for b in (now, made, was)):
            bad.append(rel)  # changed on one side, added or deleted on the other
            continue
        with tempfile.TemporaryDirectory(prefix="recon-revert-") as d:
            files = []
            for name, b in (("ours", now), ("base", made), ("theirs", was)):
                f = Path(d) / name
                f.write_bytes(b.data_stream.read())
                files.append(str(f))
            try:
                repo.git.merge_file("-p", "-q", *files)
            except git.GitCommandError:  # exit status: the number of conflicts (or an error)
                bad.append(rel)
    return bad


@dataclass
class RevertPlan:
    commit: git.Commit  # recon's commit
    tip: git.Commit  # the branch's tip now
    back_to: str  # the branch (or commit) the user was on when apply ran
    on_branch: bool  # the user is on BRANCH now

    @property
    def touching(self) -> list[str]:
        """What the revert rewrites in the work tree the user is in: only when they are on BRANCH."""
        return changed_paths(self.commit) if self.on_branch else []


def plan_revert(repo: git.Repo) -> RevertPlan:
    """Every refusal of ``--revert``, made before anything is touched."""
    c = apply_commit(repo)
    if c is None:
        if has_branch(repo):
            raise foreign_branch(repo)
        raise NothingToDo(f"no branch {BRANCH} made by recon apply in {repo.working_tree_dir}: nothing to revert")
    if not c.parents:
        raise foreign_branch(repo)
    base_branch = trailer(c, "Recon-Base-Branch")
    base_commit = trailer(c, "Recon-Base-Commit")
    if not _is_commit(repo, base_commit):
        base_commit = c.parents[0].hexsha  # a trailer that is not a commit id is not passed to git
    back_to = base_branch if base_branch and base_branch in [h.name for h in repo.heads] else base_commit
    on_branch = current_branch(repo) == BRANCH
    elsewhere = worktree_of(repo, BRANCH)
    if elsewhere:
        raise GitRefused(f"{BRANCH} is checked out in the worktree {elsewhere}: run `recon apply --revert` there; nothing was changed")
    if on_branch and back_to != base_commit and worktree_of(repo, back_to):
        raise GitRefused(f"{back_to}, the branch to return to, is checked out in the worktree {worktree_of(repo, back_to)}: "
                         f"check out another branch there (or `git checkout --detach`) and run again; nothing was changed")
    tip = repo.heads[BRANCH].commit
    if tip != c:
        bad = revert_conflicts(repo, c, tip)
        if bad:
            raise _conflict(c, bad, back_to)
    return RevertPlan(c, tip, back_to, on_branch)


def _is_commit(repo: git.Repo, sha: Optional[str]) -> bool:
    if not sha or not re.fullmatch(r"[0-9a-f]{40}", sha):
        return False
    try:
        return repo.git.cat_file("-t", sha) == "commit"
    except git.GitCommandError:
        return False


def _conflict(c: git.Commit, paths: list[str], back_to: str) -> GitRefused:
    shown = ", ".join(paths[:3]) + (f" (+{len(paths) - 3} more)" if len(paths) > 3 else "")
    return GitRefused(f"your commits on {BRANCH} after recon's {c.hexsha[:10]} change the same lines ({shown}), so it cannot be undone "
                      f"automatically; nothing was changed: run `git checkout {BRANCH} && git revert {c.hexsha[:10]}`, resolve the "
                      f"conflict and commit, then `git checkout {back_to}`")


def revert(repo: git.Repo, p: Optional[RevertPlan] = None) -> str:
    """Take the change out; return to the branch the user was on. Returns what was done."""
    p = p or plan_revert(repo)
    c, back_to, on_branch = p.commit, p.back_to, p.on_branch
    if p.tip == c:  # unchanged since apply: the branch goes, and with it the change
        if on_branch:
            repo.git.checkout(back_to)
            _drop_empty_dirs(repo, c)
        repo.git.branch("-D", BRANCH)
        return f"deleted branch {BRANCH} (was {c.hexsha[:10]}); on {back_to}"
    # commits of the user's on top: keep them, undo only recon's commit
    start = back_to if on_branch else (current_branch(repo) or repo.head.commit.hexsha)
    if not on_branch:
        repo.git.checkout(BRANCH)
    try:
        repo.git.revert("--no-edit", c.hexsha)
    except git.GitCommandError:
        # predicted clean, yet git stopped (a rename, a merge driver): undo the attempt, then refuse
        if (Path(repo.git_dir) / "REVERT_HEAD").exists() or (Path(repo.git_dir) / "sequencer").exists():
            repo.git.revert("--abort")  # back to the tip, index and files as they were (the tree was clean)
        if not on_branch:
            repo.git.checkout(start)
        raise _conflict(c, changed_paths(c), back_to) from None
    _drop_empty_dirs(repo, c)
    rc = repo.head.commit.hexsha[:10]
    repo.git.checkout(start)
    return f"{BRANCH} has commits after recon's: added revert commit {rc} on it and kept it; on {start}"


def _drop_empty_dirs(repo: git.Repo, c: git.Commit) -> None:
    """Folders recon's commit created that are empty once its files are gone (git leaves a folder
    that still held ignored bytecode; that bytecode is gone by now)."""
    root = Path(repo.working_tree_dir)
    dirs = {(root / (d.b_path or d.a_path)).parent for d in c.parents[0].diff(c) if d.new_file}
    for folder in sorted(dirs, key=lambda p: -len(p.parts)):
        while folder != root and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
