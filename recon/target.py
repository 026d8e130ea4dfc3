"""Resolving what to read: a folder, a git revision of a checkout, or a released wheel from PyPI.

Every analysis command takes the target the same way (``--path``, ``--rev``, ``--sglang``) and
reports which target it used and why. Paths in findings are relative to the target root: the repo
root of a checkout (``python/sglang/...``) or the folder holding the package (``sglang/...``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from . import safepath, wheelcache
from .cache import atomic_dir, cache_dir
from .errors import ReconError
from .links import inside, real_root
from .sources import DirSource, GitSource

DEFAULT_VERSION = "0.5.13.post1"
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*([.\-]?(post|dev|rc|a|b)[0-9]*)*$")

@dataclass
class Target:
    source: object  # DirSource | GitSource
    kind: str  # "dir" | "git" | "wheel"
    label: str  # what the user sees: path, path@rev, or sglang==VERSION
    reason: str  # why this target was chosen
    package_prefix: str  # relative path of the folder holding the sglang package ("python" or "")
    version: Optional[str] = None
    revision: Optional[str] = None
    repo_root: Optional[Path] = None  # a git checkout's root, when there is one
    extras: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        """A stable name for this target's cache."""
        if self.kind == "wheel":
            return f"wheel-{self.version}"
        if self.kind == "git":
            return f"git-{self.revision}"
        raw = os.path.realpath(self.source.root)
        return "dir-" + re.sub(r"[^A-Za-z0-9]+", "_", raw).strip("_")[-120:]

    def pkg_path(self, rel_in_package: str) -> str:
        """``sglang/srt/x.py`` -> the path as this target names it."""
        return f"{self.package_prefix}/{rel_in_package}" if self.package_prefix else rel_in_package

def _layout(root: Path) -> Optional[tuple[str, tuple[str, ...]]]:
    """(package prefix, subdirs to read) when ``root`` holds SGLang, else None."""
    if (root / "python" / "sglang" / "__init__.py").is_file():
        subs = ["python/sglang"]
        for extra in ("benchmark", "sgl-kernel/python", "sgl-kernel/csrc", "sgl-kernel/include"):
            if (root / extra).is_dir():
                subs.append(extra)
        return "python", tuple(subs)
    if (root / "sglang" / "__init__.py").is_file():
        return "", ("sglang",)
    if root.name == "sglang" and (root / "__init__.py").is_file() and (root / "srt").is_dir():
        return None  # handled by the caller: the package folder itself
    return None

def _git_layout(commit) -> Optional[tuple[str, tuple[str, ...]]]:
    tree = commit.tree
    def has(p: str) -> bool:
        try:
            tree / p
            return True
        except KeyError:
            return False
    if has("python/sglang/__init__.py"):
        subs = ["python/sglang"] + [e for e in ("benchmark", "sgl-kernel/python", "sgl-kernel/csrc", "sgl-kernel/include") if has(e)]
        return "python", tuple(subs)
    if has("sglang/__init__.py"):
        return "", ("sglang",)
    return None

def _version_from_text(text: str) -> Optional[str]:
    m = re.search(r"""__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", text)
    return m.group(1) if m else None

def detect_version(read, exists, prefix: str) -> Optional[str]:
    """The SGLang version a tree declares, read (never imported) from its files."""
    pkg = f"{prefix}/sglang" if prefix else "sglang"
    for rel in (f"{pkg}/_version.py", f"{pkg}/version.py"):
        if exists(rel):
            try:
                v = _version_from_text(read(rel).decode("utf-8", "replace"))
            except OSError:
                v = None
            if v and v != "0.0.0.dev0":
                return v
    pyproject = f"{prefix}/pyproject.toml" if prefix else "pyproject.toml"
    if exists(pyproject):
        m = re.search(r'^version\s*=\s*"([^"]+)"', read(pyproject).decode("utf-8", "replace"), re.M)
        if m:
            return m.group(1)
    return None

def _dist_info_version(root: Path) -> Optional[str]:
    bound = real_root(root)
    for d in root.glob("sglang-*.dist-info"):
        meta = d / "METADATA"
        if meta.is_file() and inside(meta, bound):  # a planted link is not followed out of the tree
            m = re.search(r"^Version:\s*(\S+)", meta.read_text("utf-8", "replace"), re.M)
            if m:
                return m.group(1)
    return None

def from_path(path: Path, rev: Optional[str] = None, reason: str = "--path") -> Target:
    path = Path(path).expanduser()
    if not path.exists():
        raise ReconError(f"path does not exist: {path}")
    if not path.is_dir():
        raise ReconError(f"not a folder: {path}")
    path = path.resolve()
    if rev is not None:
        return _from_git(path, rev, reason)
    layout = _layout(path)
    bound = path  # nothing outside the folder the user named is read (see recon.links)
    if layout is None and path.name == "sglang" and (path / "__init__.py").is_file():
        # the package folder itself: read it from its parent, limited to the package
        path = path.parent
        layout = ("", ("sglang",))
    if layout is None:
        raise ReconError(
            f"no SGLang found in {path}: expected python/sglang/ (a repo checkout), sglang/ (an unpacked wheel or site-packages) or the sglang package folder itself"
        )
    prefix, subs = layout
    src = DirSource(path, subs, bound)
    version = _dist_info_version(path) or detect_version(src.read, src.exists, prefix)
    repo_root = path if (path / ".git").exists() else None
    return Target(src, "dir", str(path), reason, prefix, version, None, repo_root)

def _commit(repo, rev: str):
    """The commit ``rev`` names, or None. GitPython's own parser answers most forms; the ones it
    cannot parse (``HEAD@{yesterday}``, ``@{-1}``) or fails on with an error of its own
    (``HEAD@{100}`` past the reflog's end raises IndexError) are asked of ``git rev-parse``, which
    reads refs only (no hook, filter or fsmonitor runs); what neither resolves is None."""
    import git

    try:
        return repo.commit(rev)
    except git.BadName:
        return None
    except Exception:  # noqa: BLE001 - a parser's failure on user input is a bad revision, not a crash
        pass
    try:
        sha = repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}").strip()
        return repo.commit(sha) if re.fullmatch(r"[0-9a-f]{40,64}", sha) else None
    except Exception:  # noqa: BLE001
        return None


def _from_git(path: Path, rev: str, reason: str) -> Target:
    import git

    try:
        repo = git.Repo(path, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise ReconError(f"not a git repository: {path} (--rev needs a git checkout)") from None
    commit = _commit(repo, rev)
    if commit is None:
        shown = rev if len(rev) <= 120 else rev[:120] + "..."
        raise ReconError(f"unknown git revision {shown!r} in {path}")
    layout = _git_layout(commit)
    if layout is None:
        raise ReconError(f"no SGLang found in {path} at {rev}: expected python/sglang/ or sglang/")
    prefix, subs = layout
    src = GitSource(path, commit.hexsha, subs)
    version = detect_version(src.read, src.exists, prefix)
    return Target(src, "git", f"{path}@{rev} ({commit.hexsha[:12]})", reason, prefix, version, commit.hexsha, path)

def _download(version: str, wheel_dir: Path) -> Path:
    """``pip download --no-deps sglang==version`` into ``wheel_dir``; the wheel's path.

    Only a wheel is ever taken (``--only-binary=:all:``): an index or find-links folder that serves
    an sdist for the version would otherwise have pip run that sdist's build backend to learn its
    metadata, which is code from the input. pip runs isolated (``-I``) from inside the cache, so a
    ``pip/`` or ``site.py`` in the folder recon was started from is never imported in its place."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-I", "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
            "-d", str(wheel_dir.resolve()), f"sglang=={version}"]
    # Released wheels are tagged for one CPython; their Python sources read the same anywhere.
    other_python = ["--python-version", "3.11", "--platform", "manylinux_2_34_x86_64"]
    for extra in ([], other_python):
        proc = subprocess.run(base + extra, capture_output=True, text=True, cwd=wheel_dir, stdin=subprocess.DEVNULL)
        wheels = sorted(wheel_dir.glob(f"sglang-{version}-*.whl"))
        if wheels:
            return wheels[-1]
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise ReconError(f"could not fetch sglang=={version} from PyPI as a wheel: {last}")

def _note(msg: str) -> None:
    sys.stderr.write(f"recon: {msg}\n")
    sys.stderr.flush()

def _fetched_area(*parts: str) -> Path:
    """A folder of the cache's fetched area (``downloads``, ``wheels/VERSION``), refused when a
    link on the way leads out of the cache: recon deletes and rewrites there, and the cache may be
    shared or restored from elsewhere, so a planted ``wheels -> ~/project`` must not make it
    delete or write outside the cache."""
    rel = "/".join(parts)
    try:
        return Path(safepath.under(cache_dir(), rel))
    except safepath.UnsafePath as e:
        raise ReconError(f"the cache's {rel} folder leads outside the cache at {cache_dir()} ({e}): "
                         "remove that link, or set RECON_CACHE_DIR to another folder") from None


def _wheel(version: str, fresh: bool = False) -> Path:
    """The downloaded wheel of ``version`` (fetched when absent, or again with ``fresh``)."""
    wheel_dir = _fetched_area("downloads")
    have = sorted(wheel_dir.glob(f"sglang-{version}-*.whl"))
    if have and not fresh:
        return have[-1]
    for w in have:
        w.unlink(missing_ok=True)
    return _download(version, wheel_dir)

def _unpack_verified(version: str, dest: Path, only: Optional[list[str]] = None) -> None:
    """Unpack the wheel (all of it, or ``only`` those files) checked against its RECORD. A wheel
    that is cut short or differs from its RECORD is fetched once more before giving up."""
    wheel = _wheel(version)
    for attempt in (1, 2):
        try:
            if only is None:
                with atomic_dir(dest) as tmp:
                    wheelcache.unpack(wheel, tmp, version)
            else:
                wheelcache.unpack(wheel, dest, version, only)
            return
        except OSError as e:  # the cache's disk is full or read-only: nowhere to put the tree
            raise ReconError(f"cannot unpack sglang=={version} into the cache at {dest.parent}: {e.strerror or e}") from None
        except wheelcache.WheelDamaged as e:
            if attempt == 2:
                raise ReconError(f"the wheel for sglang=={version} is damaged even after fetching it again: {e}") from None
            _note(f"{e}: fetching sglang=={version} again")
            wheel = _wheel(version, fresh=True)

def fetch_wheel(version: str) -> Path:
    """``sglang==version`` unpacked in the cache, fetched with ``pip download --no-deps`` the first
    time; a cached tree is checked against the wheel's RECORD (see :mod:`recon.wheelcache`) and
    what differs is unpacked again, saying so on stderr."""
    if not _VERSION_RE.match(version):
        raise ReconError(f"not a version number: {version!r}")
    dest = _fetched_area("wheels", version)
    if (dest / "sglang" / "__init__.py").is_file():
        verify_unpacked(version)
        return dest
    if dest.exists():  # half a tree (pruned or interrupted): start over
        shutil.rmtree(dest, ignore_errors=True)
    _unpack_verified(version, dest)
    return dest

def verify_unpacked(version: str, full: bool = False) -> "wheelcache.Check":
    """Check the cached tree of ``version`` against RECORD (stats, or every hash with ``full``),
    unpack again what differs and say so on stderr. Returns what the check found."""
    dest = _fetched_area("wheels", version)
    res = wheelcache.check(dest, version, full=full)
    if res is None:  # RECORD gone: nothing to check against, so unpack the whole tree again
        _note(f"the cached sglang=={version} has lost its RECORD; unpacking it again")
        shutil.rmtree(dest, ignore_errors=True)
        _unpack_verified(version, dest)
        return wheelcache.check(dest, version) or wheelcache.Check()
    if res.bad:
        shown = ", ".join(res.bad[:3]) + (f" (+{len(res.bad) - 3} more)" if len(res.bad) > 3 else "")
        _note(f"{len(res.bad)} file(s) of the cached sglang=={version} differ from its wheel's RECORD "
              f"and were unpacked again: {shown}")
        _unpack_verified(version, dest, res.bad)
    return res

def from_version(version: str, reason: str = "--sglang") -> Target:
    root = fetch_wheel(version)
    src = DirSource(root, ("sglang",))
    return Target(src, "wheel", f"sglang=={version}", reason, "", _dist_info_version(root) or version)

def _installed_sglang() -> Optional[Path]:
    """An installed sglang package, found on sys.path without importing it."""
    for entry in sys.path:
        if not entry:
            continue
        cand = Path(entry) / "sglang"
        if (cand / "__init__.py").is_file() and (cand / "srt").is_dir():
            return cand
    return None

def resolve(path: Optional[Path] = None, rev: Optional[str] = None, sglang: Optional[str] = None) -> Target:
    """The target named by the options, or the default one, with the reason it was chosen."""
    if sglang and (path or rev):
        raise ReconError("give either --sglang or --path/--rev, not both")
    if sglang:
        return from_version(sglang)
    if rev and not path:
        path = Path.cwd()
    if path:
        return from_path(path, rev)
    cwd = Path.cwd()
    if _layout(cwd) is not None:
        return from_path(cwd, reason="the current folder holds SGLang")
    installed = _installed_sglang()
    if installed is not None:
        return from_path(installed, reason=f"no --path given; using the installed package at {installed}")
    return from_version(DEFAULT_VERSION, reason=f"no --path given and no SGLang here; using the released sglang=={DEFAULT_VERSION}")

def spec_target(path=None, rev=None, sglang=None) -> tuple[Optional[str], Optional[str]]:
    """(the --sglang version to read, the reason) for ``recon spec``'s target options.

    With no options the spec is the seed scenario's: a folder holding SGLang is read as
    :func:`recon.target.resolve` would (the current folder comes first); otherwise the released
    SGLang 0.5.13.post1, named explicitly — an installed sglang package is read only when given
    with ``--path``, so a spec without options is the same on every machine.
    """

    if path or rev or sglang:
        return sglang, None
    if _layout(Path.cwd()) is not None:
        return None, "no target options; the current folder holds SGLang"
    return DEFAULT_VERSION, f"no target options and no SGLang in the current folder: the seed scenario's released sglang=={DEFAULT_VERSION}"
