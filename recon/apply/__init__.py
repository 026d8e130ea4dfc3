"""``recon apply``: the grouped MXFP4 MoE kernel wired into an SGLang checkout, reversibly.

One job per module: :mod:`.swap` finds the swap-in point from the graph, :mod:`.codemod` rewrites
the dispatch call (LibCST), :mod:`.bundle` builds the kernel package, :mod:`.vcs` makes the branch
and commit (GitPython). This module puts them in order and owns the refusals: everything that can
be checked is checked before the first byte is written.
"""

from __future__ import annotations

import difflib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import NothingToDo, ReconError
from ..links import inside, real_root
from . import bundle, codemod, vcs
from .swap import PREPACK, WRAPPER, NoSwapPoint, SwapPoint, applied_sites, find_swap_point, grouped_params

__all__ = ["Plan", "Outcome", "plan", "run", "NoSwapPoint", "SwapPoint"]

def _why() -> list[tuple[str, str]]:
    """(rule id, why the swap helps) for each rule whose ``spec.apply`` says so, by root-cause rank."""
    from ..rules import load_rules

    rules = [r for r in load_rules() if r.spec.apply]
    return [(r.id, r.spec.apply) for r in sorted(rules, key=lambda r: (r.spec.rank if r.spec.rank is not None else 1 << 30, r.id))]


@dataclass
class Plan:
    swap: SwapPoint
    root: Path  # the target's root: the tree's relative paths start here
    files: dict[str, bytes]  # target-relative path -> new bytes (the dispatch file and the bundle)
    originals: dict[str, Optional[bytes]]  # the same paths as they are now (None: new file)
    prepack_skipped: Optional[str] = None  # why the load-time prepack call was not added (None: added)

    def diff(self) -> str:
        out = []
        for rel, new in self.files.items():
            old = self.originals.get(rel)
            a = old.decode("utf-8", "replace").splitlines(True) if old is not None else []
            b = new.decode("utf-8", "replace").splitlines(True)
            if rel.endswith(".json"):
                b = [l if l.endswith("\n") else l + "\n" for l in b]
            out += difflib.unified_diff(a, b, f"a/{rel}" if old is not None else "/dev/null", f"b/{rel}")
        return "".join(l if l.endswith("\n") else l + "\n\\ No newline at end of file\n" for l in out)

    @property
    def touched(self) -> list[str]:
        """What the change owns: the dispatch file and the bundle folder (target-relative)."""
        return [self.swap.path, self.swap.bundle_dir]


@dataclass
class Outcome:
    status: str  # applied | already-applied | dry-run | reverted
    lines: list[str] = field(default_factory=list)
    diff: str = ""
    plan: Optional[Plan] = None
    commit: Optional[str] = None


def _load(path: Path):
    from ..target import from_path
    from ..tree import load

    return load(from_path(path))


def plan(tree, device, model=None, server_flags=None, env=None) -> Plan:
    """The change for ``tree`` on ``device``, computed and compiled, nothing written."""
    src_dir = bundle.source_dir()
    sp = find_swap_point(tree, device, model, grouped_params((src_dir / bundle.HOST_MODULE).read_text(encoding="utf-8")),
                         server_flags, env)
    root = Path(tree.target.source.root)
    old = tree.read_text(sp.path)
    if (root / sp.path).read_bytes() != old.encode("utf-8"):
        raise ReconError(f"{sp.path} is not UTF-8 text: refusing to rewrite it")
    new = codemod.patch(old, sp.method_scope, sp.call_line, sp.host_name, sp.bundle_module)
    new, prepack_skipped = codemod.add_prepack(new, sp.method_scope, sp.host_name, sp.bundle_module)
    files = {sp.path: new.encode("utf-8")}
    files.update(bundle.build(sp.bundle_dir, sp.host_name, sp.host.rsplit(".", 1)[0]))
    bound = real_root(root)
    outside = [p for p in files if not inside(root / p, bound)]
    if outside:  # a planted link (the file, or a folder above it) would take the write elsewhere
        raise ReconError(f"{outside[0]} is reached through a symbolic link that leaves {root}: recon apply will not write through it")
    existing = [p for p in files if p != sp.path and (root / p).exists()]
    if existing:
        raise ReconError(f"{sp.bundle_dir}/ already holds files ({', '.join(existing[:3])}): recon apply will not overwrite them")
    for rel, data in files.items():
        if rel.endswith(".py"):
            try:
                compile(data, rel, "exec", dont_inherit=True)
            except SyntaxError as e:  # a bug of recon's, caught before anything is written
                raise ReconError(f"the patched {rel} does not compile ({e}); nothing was written") from None
    originals = {rel: ((root / rel).read_bytes() if (root / rel).exists() else None) for rel in files}
    return Plan(sp, root, files, originals, prepack_skipped)


def _write(p: Plan) -> None:
    for rel, data in p.files.items():
        dst = p.root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)


def commit_text(p: Plan, device) -> tuple[str, str]:
    sp = p.swap
    n_new = sum(1 for v in p.originals.values() if v is None)
    summary = f"recon apply: grouped MXFP4 MoE kernel in {sp.method_scope} ({device.short})"
    body = [
        "What changed:",
        f"- {sp.path}: {sp.method_scope} calls {WRAPPER}({sp.host_name}, ...) instead of {sp.host_name}(...)"
        + (f" on the path taken when {sp.selection}" if sp.selection else "") + ".",
        (f"- {sp.path}: {codemod.LOAD_METHOD} calls {PREPACK}(...) once per layer in that branch: the experts prepacked"
         " at load (one copy: weights aliased, scales as e8m0 views), found by the forward from w13's address."
         if p.prepack_skipped is None else f"- no load-time prepack ({p.prepack_skipped}): the kernel takes the raw tensors each call."),
        f"- added {sp.bundle_dir}/ ({n_new} files): the grouped MXFP4 MoE kernel from recon's reference_impl,"
        " self-contained (relative imports), replacing the launch of " + sp.kernel.rsplit(".", 1)[1] + ".",
        "",
        "Why (recon spec findings):",
        *[f"- {k}: {v}." for k, v in _why()],
        "",
        "How to switch back:",
        f"- at run time: {codemod.ENV_VAR}=0 runs {sp.host_name} again (read on every call; set it before the",
        "  server starts, a captured CUDA graph keeps the path it was captured with);",
        f"- for good: `recon apply --revert --path <checkout>` (returns to the branch you were on and deletes {vcs.BRANCH}).",
    ]
    return summary, "\n".join(body)


def _unapply_files(tree) -> list[str]:
    """--no-git revert: unpatch every dispatch file and delete the generated bundle files."""
    G = tree.graph
    root = Path(tree.target.source.root)
    done = []
    sites = applied_sites(tree)
    if not sites:
        raise NothingToDo(f"recon apply's change is not in {root}: nothing to revert")
    for caller, path, _ in sites:
        wrapper = next(v for _, v, d in G.out_edges(caller, data=True) if v.endswith("." + WRAPPER))
        module = wrapper.rsplit(".", 1)[0]
        text, n = codemod.unpatch(tree.read_text(path), module)
        if n:
            (root / path).write_bytes(text.encode("utf-8"))
            done.append(path)
        pkg = root / G.nodes[wrapper]["path"].rsplit("/", 1)[0]
        if pkg.is_dir():
            ours = {f.relative_to(bundle.source_dir()).as_posix() for f in bundle.source_dir().rglob("*.json")}
            for f in sorted(pkg.rglob("*"), reverse=True):
                rel = f.relative_to(pkg).as_posix()
                if f.is_file() and (bundle.is_generated(f.read_bytes()) or rel in ours):
                    f.unlink()
                    done.append(str(f.relative_to(root)))
                elif f.is_dir() and (f.name == "__pycache__"):
                    shutil.rmtree(f)
                elif f.is_dir() and not any(f.iterdir()):
                    f.rmdir()
            if not any(pkg.iterdir()):
                pkg.rmdir()
    return done


def _saved_lines(saved: vcs.Saved) -> list[str]:
    """What happened to the user's uncommitted work, said only for what did happen."""
    out = []
    if saved.stash:
        out.append(f"your uncommitted changes were stashed and restored ({saved.stashed} paths)")
    if saved.left:
        out.append(f"left in place, untouched ({', '.join(saved.left[:5])}{' …' if len(saved.left) > 5 else ''}): "
                   "git does not stash a submodule's own changes, and recon's change does not go there")
    return out


def run(path: Path, device=None, model=None, dry_run: bool = False, revert: bool = False,
        force: bool = False, no_git: bool = False, server_args: Optional[str] = None, env: Optional[list] = None) -> Outcome:
    """The whole command: refusals first, then the change (or its removal)."""
    from ..profiles import load_device, load_model

    path = Path(path).expanduser()
    if not path.exists():
        raise ReconError(f"path does not exist: {path}")
    device = load_device(device)
    model = load_model(model)
    repo = None if no_git else vcs.open_repo(path)
    if repo is None and not no_git and not dry_run:
        raise vcs.GitRefused(f"{path} is not in a git repository: recon apply makes its change on a branch so it can be taken out again; "
                             "run `git init && git add -A && git commit -m base` there, or pass --no-git to write the files only (undo with --no-git --revert)")
    if repo is not None and not dry_run:
        vcs.refuse_in_progress(repo)
    if revert:
        if dry_run:
            raise ReconError("--dry-run and --revert together: a revert writes only what apply wrote; run --revert alone")
        if no_git:
            tree = _load(path)
            return Outcome("reverted", ["removed recon apply's change: " + ", ".join(_unapply_files(tree))])
        rp = vcs.plan_revert(repo)  # every refusal first: nothing is touched when one is made
        root = Path(repo.working_tree_dir)
        vcs.check_dirty(repo, force, rp.touching, frozenset(f.relative_to(root).as_posix() for f in vcs.bytecode_of(repo)))
        vcs.drop_bytecode(repo)  # apply's own bytecode is not the user's uncommitted work
        with vcs.stashed(repo, force, rp.touching) as saved:
            what = vcs.revert(repo, rp)
        return Outcome("reverted", [what] + _saved_lines(saved))

    if repo is not None and not dry_run and not force:
        vcs.refuse_dirty(repo)  # at once, not after seconds of analysis
    if repo is not None and vcs.has_branch(repo):
        c = vcs.apply_commit(repo)
        if c is None:
            raise vcs.foreign_branch(repo)
        here = "you are on it" if vcs.current_branch(repo) == vcs.BRANCH else f"`git checkout {vcs.BRANCH}` to use it"
        return Outcome("already-applied", [f"already applied: branch {vcs.BRANCH} exists (commit {c.hexsha[:10] if c else '?'}); {here}, "
                                           "or `recon apply --revert` to take it out. Nothing changed."])
    tree = _load(path)
    sites = applied_sites(tree)
    if sites:
        where = ", ".join(f"{p}:{ln}" for _, p, ln in sites)
        return Outcome("already-applied", [f"already applied in this tree ({where} calls {WRAPPER}); nothing changed"])
    from ..scenario import open_scenario
    sc, _ = open_scenario(tree, device, model, server_args, env)  # the profiles are loaded ones already
    p = plan(sc.tree, sc.device, sc.model, sc.flags, sc.env)
    if dry_run:
        return Outcome("dry-run", [], p.diff(), p)
    sp = p.swap
    head = [f"swap-in point: {sp.method_scope} ({sp.path}:{sp.call_line}) -> {sp.host_name} -> {sp.kernel.rsplit('.', 1)[1]}"
            + (f" [{sp.selection}]" if sp.selection else ""),
            f"weights prepacked once at load: {codemod.LOAD_METHOD} calls {PREPACK}" if p.prepack_skipped is None
            else f"weights not prepacked at load ({p.prepack_skipped}): raw tensors each call"]
    if no_git:
        _write(p)
        return Outcome("applied", head + [f"wrote {len(p.files)} files (no git): {sp.path} and {sp.bundle_dir}/; "
                                          f"{codemod.ENV_VAR}=0 switches back; `recon apply --no-git --revert` removes it"], plan=p)
    to_repo = lambda rel: vcs.repo_rel(repo, p.root / rel)
    touched = [to_repo(r) for r in p.touched]
    if not vcs.tracked(repo, touched[0]):  # e.g. an unpacked wheel under some other project's repo
        raise vcs.GitRefused(f"{sp.path} is not tracked by the git repository at {repo.working_tree_dir}: "
                             "commit the SGLang tree there first, or pass --no-git to write the files only")
    summary, body = commit_text(p, device)
    base = vcs.current_branch(repo)
    msg = vcs.commit_message(summary, body, base, repo.head.commit.hexsha)
    with vcs.stashed(repo, force, touched) as saved:
        c = vcs.commit_on_branch(repo, lambda: _write(p), touched, msg)
    lines = head + [f"committed {c.hexsha[:10]} on new branch {vcs.BRANCH} (from {base or 'detached HEAD'}), now checked out; "
                    f"{base or 'your branch'} is unchanged",
                    f"{codemod.ENV_VAR}=0 switches back at run time; `recon apply --revert` returns to {base or 'where you were'}"]
    lines += _saved_lines(saved)
    return Outcome("applied", lines, plan=p, commit=c.hexsha)
