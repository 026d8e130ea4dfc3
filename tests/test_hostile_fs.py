"""Hostile files, wheels and caches (issue 35, items 1-4, 8, 9 and the cache's trust): a crafted
wheel, RECORD row, tree entry or cache entry never makes recon write, read or delete outside its
root, run code, hang or crash. Every crafted input is built here, in the test's own folders; the
real-tree cases start from the released 0.5.13.post1 wheel and tree.
"""
from __future__ import annotations

import errno
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from recon import cache, cachekey, safepath, target, wheelcache
from recon.errors import ReconError
from recon.sources import DirSource
from tests.conftest import SEED_VERSION, make_tree

VERSION = "9.9.9"  # a crafted wheel: no such release, never fetched
BAD = os.fsdecode(b"bad\xff.py")  # a name that is not UTF-8, as the OS hands it to Python
BAD_DIR = os.fsdecode(b"dir\xfe")


# -- recording every file recon opens, to show nothing outside a root is read ---------------------

_OPENED: list = []
_RECORDING = [False]


def _audit(event, args):
    if _RECORDING[0] and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


class opened:
    """Paths opened (``open`` and ``os.open``) inside the block."""

    def __enter__(self):
        _OPENED.clear()
        _RECORDING[0] = True
        return _OPENED

    def __exit__(self, *exc):
        _RECORDING[0] = False


# -- crafted wheels -------------------------------------------------------------------------------

def _row(name: str, data: bytes) -> str:
    return f"{name},{wheelcache._digest(data)},{len(data)}"


def craft_wheel(path: Path, members: dict, extra_rows: tuple = (), version: str = VERSION) -> Path:
    """A wheel at ``path``: the small SGLang-shaped package plus ``members`` (names as given, not
    normalised), each listed in RECORD with its hash, plus ``extra_rows``."""
    files = {
        "sglang/__init__.py": f'__version__ = "{version}"\n'.encode(),
        "sglang/srt/__init__.py": b"",
        "sglang/srt/server_args.py": b"class ServerArgs:\n    tp_size: int = 1\n",
        f"sglang-{version}.dist-info/METADATA": f"Name: sglang\nVersion: {version}\n".encode(),
        **members,
    }
    rows = [_row(n, d) for n, d in files.items()] + list(extra_rows) + [f"sglang-{version}.dist-info/RECORD,,"]
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(zipfile.ZipInfo(n), d)  # a ZipInfo keeps the name exactly as written
        z.writestr(f"sglang-{version}.dist-info/RECORD", "\n".join(rows) + "\n")
    return path


@pytest.fixture
def own_cache(tmp_path, monkeypatch) -> Path:
    """An empty cache of this test's own, with its own key and synchronous writes."""
    c = tmp_path / "cache"
    (c / "downloads").mkdir(parents=True)
    monkeypatch.setenv("RECON_CACHE_DIR", str(c))
    monkeypatch.setenv("RECON_SYNC_WRITES", "1")
    monkeypatch.setenv(cachekey.KEY_ENV, str(tmp_path / "config" / "cache.key"))
    monkeypatch.setattr(cachekey, "_key", None)
    monkeypatch.setattr(cache, "_DISABLED", [], raising=False)
    return c


def _placed(own_cache: Path, monkeypatch, members: dict, extra_rows: tuple = ()) -> Path:
    """A crafted wheel placed where a download lands; fetching it again serves the same bytes
    (an index that hands out the crafted wheel every time)."""
    wheel = own_cache / "downloads" / f"sglang-{VERSION}-py3-none-any.whl"
    craft_wheel(wheel, members, extra_rows)
    monkeypatch.setattr(target, "_download", lambda v, d: craft_wheel(d / wheel.name, members, extra_rows))
    return wheel


def _outside(tmp_path: Path, own_cache: Path) -> list[str]:
    """Every file under tmp_path that is not in the cache or the key's folder."""
    out = []
    for dirpath, _dirs, names in os.walk(tmp_path):
        for n in names:
            p = Path(dirpath) / n
            if own_cache in p.parents or (tmp_path / "config") in p.parents:
                continue
            out.append(str(p.relative_to(tmp_path)))
    return sorted(out)


ESCAPES = [
    "sglang/../../../../escape/zz.pth",  # the red-team case: up and out of the cache
    "sglang/srt/../../../../../escape/zz.pth",
    "sglang/\\..\\..\\escape\\zz.pth",
    "sglang/srt/./x.py",
    "sglang//srt/y.py",
]


@pytest.mark.parametrize("name", ESCAPES)
def test_a_wheel_member_that_leaves_the_tree_writes_nothing(own_cache, tmp_path, monkeypatch, name):
    _placed(own_cache, monkeypatch, {name: b"import os; os.system('touch /tmp/pwned')\n"})
    with pytest.raises(ReconError, match="damaged.*written outside the tree"):
        target.fetch_wheel(VERSION)
    assert _outside(tmp_path, own_cache) == []
    assert not (own_cache / "wheels" / VERSION).exists()  # nothing of that wheel is used


def test_an_absolute_member_writes_nothing(own_cache, tmp_path, monkeypatch):
    planted = tmp_path / "abs" / "zz.pth"
    _placed(own_cache, monkeypatch, {f"sglang/{planted}": b"x"})  # sglang//tmp/...: an empty component
    with pytest.raises(ReconError, match="damaged"):
        target.fetch_wheel(VERSION)
    assert not planted.exists() and _outside(tmp_path, own_cache) == []


def test_the_real_wheel_with_one_member_added_is_refused(sglang_0513, cache_root, own_cache, tmp_path, monkeypatch):
    """The released 0.5.13.post1 wheel with a `.pth` member that climbs out: nothing is unpacked."""
    real = sorted((cache_root / "downloads").glob(f"sglang-{SEED_VERSION}-*.whl"))[-1]
    evil = own_cache / "downloads" / real.name

    def serve(*_a):
        shutil.copy(real, evil)
        with zipfile.ZipFile(evil, "a") as z:
            z.writestr(zipfile.ZipInfo("sglang/../../../../escape/zz.pth"), b"import os\n")
        return evil

    serve()
    monkeypatch.setattr(target, "_download", serve)
    with pytest.raises(ReconError, match="damaged"):
        target.fetch_wheel(SEED_VERSION)
    assert _outside(tmp_path, own_cache) == []
    assert not (own_cache / "wheels" / SEED_VERSION).exists()


def test_a_record_row_outside_the_tree_is_never_read_or_deleted(own_cache, tmp_path, monkeypatch, capsys):
    _placed(own_cache, monkeypatch, {})
    root = target.fetch_wheel(VERSION)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    rec = root / f"sglang-{VERSION}.dist-info" / "RECORD"
    rel = os.path.relpath(victim, root).replace(os.sep, "/")  # ../../../victim.txt
    row = f"sglang/{rel},sha256=AAAA,3\n"  # sglang/../../../../victim.txt
    rec.write_text(rec.read_text() + row)
    capsys.readouterr()
    with opened() as seen:
        res = target.verify_unpacked(VERSION, full=True)
    assert victim.read_text() == "precious"
    assert not [p for p in seen if "victim" in p]  # never even opened
    assert res.bad == []
    err = capsys.readouterr().err
    assert "1 RECORD row(s)" in err and "ignored" in err and len(err.strip().splitlines()) == 1


def test_a_record_row_outside_the_tree_in_the_wheel_is_ignored(own_cache, tmp_path, monkeypatch, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    _placed(own_cache, monkeypatch, {}, extra_rows=("sglang/../../../../victim.txt,sha256=AAAA,3",))
    root = target.fetch_wheel(VERSION)
    assert "ignored" in capsys.readouterr().err
    assert (root / "sglang" / "__init__.py").is_file() and victim.read_text() == "precious"
    victim.write_text("changed!")  # size and time differ: a check that followed the row would act
    assert target.verify_unpacked(VERSION, full=True).bad == [] and victim.read_text() == "changed!"


def test_a_record_row_on_the_real_tree_deletes_nothing(sglang_0513, cache_root, tmp_path, monkeypatch, capsys):
    """The real 0.5.13.post1 wheel in a cache of the test's own, its unpacked RECORD given a row
    that names a file outside the cache (as the red team did)."""
    c = tmp_path / "cache"
    (c / "downloads").mkdir(parents=True)
    real = sorted((cache_root / "downloads").glob(f"sglang-{SEED_VERSION}-*.whl"))[-1]
    shutil.copy(real, c / "downloads" / real.name)
    monkeypatch.setenv("RECON_CACHE_DIR", str(c))
    root = target.fetch_wheel(SEED_VERSION)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    rec = root / f"sglang-{SEED_VERSION}.dist-info" / "RECORD"
    rec.write_text(rec.read_text() + "sglang/../../../../victim.txt,sha256=AAAA,3\n")
    capsys.readouterr()
    res = target.verify_unpacked(SEED_VERSION, full=True)
    assert victim.read_text() == "precious" and res.bad == [] and res.files > 1000
    assert "ignored" in capsys.readouterr().err


# -- the safe-path rule itself ------------------------------------------------------------------

@pytest.mark.parametrize(
    "name",
    ["", "/etc/passwd", "../x", "a/../../x", "a/..", "C:/x", "c:x", "a\\b", "a/./b", "a//b", "a/", "a\0b", BAD, b"\xff"],
)
def test_clean_refuses(name):
    with pytest.raises(safepath.UnsafePath):
        safepath.clean(name)


def test_clean_keeps_normal_names():
    assert safepath.clean("sglang/srt/x.py") == "sglang/srt/x.py"
    assert safepath.clean(b"sglang/a.py") == "sglang/a.py"
    assert safepath.clean("sglang/..x/y..py") == "sglang/..x/y..py"  # dots in a name are not '..'


def test_unlink_in_never_deletes_through_a_link(tmp_path):
    root = tmp_path / "root"
    out = tmp_path / "out"
    root.mkdir()
    out.mkdir()
    (out / "victim.py").write_text("x")
    (root / "sub").symlink_to(out)
    with pytest.raises(OSError) as e:
        safepath.unlink_in(root, "sub/victim.py")
    assert e.value.errno in (errno.ELOOP, errno.ENOTDIR)
    assert (out / "victim.py").exists()


# -- trees: pipes, sockets, names that are not UTF-8, swaps -----------------------------------------

def _special_tree(root: Path) -> Path:
    make_tree(root, {"sglang/srt/a.py": "def f():\n    return 1\n"})
    srt = root / "sglang" / "srt"
    os.mkfifo(srt / "pipe.py")
    os.mkfifo(srt / "fifo")  # no extension: still not a file recon may open
    here = os.getcwd()
    os.chdir(srt)  # a socket's path is limited to ~100 bytes: bind it by a short relative name
    try:
        s = socket.socket(socket.AF_UNIX)
        s.bind("sock.py")
        s.close()
    finally:
        os.chdir(here)
    (srt / BAD).write_text("x = 1\n")
    (srt / BAD_DIR).mkdir()
    (srt / BAD_DIR / "inner.py").write_text("y = 2\n")
    return root


def _recon(*args, cwd=None, env=None, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recon", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def _not_indexed(r: subprocess.CompletedProcess) -> dict:
    data = json.loads(r.stdout)
    return {d["path"]: d.get("reason") or d.get("message") for d in data["diagnostics"]}


def test_pipes_sockets_and_bad_names_are_not_analyzed_never_a_hang(tmp_path):
    root = _special_tree(tmp_path / "t")
    r = _recon("index", "--path", str(root), "--format", "json", timeout=120)  # a blocking open would hang here
    assert r.returncode == 0, r.stderr
    got = _not_indexed(r)
    assert got["sglang/srt/pipe.py"].startswith("not a regular file (a named pipe)")
    assert got["sglang/srt/fifo"].startswith("not a regular file (a named pipe)")
    assert got["sglang/srt/sock.py"].startswith("not a regular file (a socket)")
    assert "not UTF-8" in got["sglang/srt/bad\\xff.py"]
    assert "not UTF-8" in got["sglang/srt/dir\\xfe"]
    assert "Traceback" not in r.stderr and "5 file(s) not analyzed" in r.stderr


def test_a_name_that_is_not_utf8_in_a_git_revision(tmp_path):
    root = make_tree(tmp_path / "repo", {"sglang/srt/a.py": "def f():\n    return 1\n"})
    (root / "sglang" / "srt" / BAD).write_text("x = 1\n")
    (root / "sglang" / "srt" / BAD_DIR).mkdir()
    (root / "sglang" / "srt" / BAD_DIR / "inner.py").write_text("y = 2\n")
    git = ["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    r = _recon("index", "--path", str(root), "--rev", "HEAD", "--format", "json", timeout=120)
    assert r.returncode == 0, r.stderr
    got = _not_indexed(r)
    assert "not UTF-8" in got["sglang/srt/bad\\xff.py"] and "not UTF-8" in got["sglang/srt/dir\\xfe"]


def test_the_real_tree_with_a_pipe_a_socket_and_bad_names(tree_0513, tmp_path):
    """A copy of the released 0.5.13.post1 tree (hard links) with the hostile entries planted."""
    root = tmp_path / "real"
    shutil.copytree(tree_0513.target.source.root / "sglang", root / "sglang", copy_function=os.link)
    srt = root / "sglang" / "srt"
    os.mkfifo(srt / "layers" / "pipe.py")
    (srt / BAD).write_text("x = 1\n")
    here = os.getcwd()
    os.chdir(srt)
    try:
        s = socket.socket(socket.AF_UNIX)
        s.bind("sock.py")
        s.close()
    finally:
        os.chdir(here)
    r = _recon("index", "--path", str(root), "--format", "json", timeout=400)
    assert r.returncode == 0, r.stderr
    got = _not_indexed(r)
    assert "named pipe" in got["sglang/srt/layers/pipe.py"] and "socket" in got["sglang/srt/sock.py"]
    assert "not UTF-8" in got["sglang/srt/bad\\xff.py"]
    assert json.loads(r.stdout)["files"] > 1000


class _Swapping(DirSource):
    """A source whose file is swapped right after it was listed (the race, made certain)."""

    swap = None

    def files(self):
        listed = list(super().files())
        self.swap()
        yield from listed


@pytest.mark.parametrize("how", ["file", "folder", "pipe"])
def test_a_file_swapped_after_the_check_is_never_read(tmp_path, how):
    from recon.indexer import build_index
    from recon.target import Target

    root = make_tree(tmp_path / "t", {"sglang/srt/a.py": "def f():\n    return 1\n"})
    out = tmp_path / "outside"
    (out / "srt").mkdir(parents=True)
    secret = "SECRET_TOKEN = 'do-not-index'\n"
    (out / "secret.py").write_text(secret)
    (out / "srt" / "a.py").write_text(secret)
    a = root / "sglang" / "srt" / "a.py"

    def swap():
        if how == "file":
            a.unlink()
            a.symlink_to(out / "secret.py")
        elif how == "folder":
            shutil.rmtree(a.parent)
            a.parent.symlink_to(out / "srt")
        else:
            a.unlink()
            os.mkfifo(a)

    src = _Swapping(root, ("sglang",))
    src.swap = swap
    t = Target(src, "dir", str(root), "test", "", None)
    idx = build_index(t, workers=1)
    meta = idx.files["sglang/srt/a.py"]
    assert meta.error and ("leaves the target root" in meta.error or "not a regular file" in meta.error or "unreadable" in meta.error)
    f = idx.facts("sglang/srt/a.py")
    assert f is None or "SECRET_TOKEN" not in repr(f)
    with pytest.raises(OSError):
        src.read("sglang/srt/a.py")


# -- the cache: read-only, full, and not trusted ---------------------------------------------------

def _synthetic(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "t", {"sglang/srt/a.py": "import os\n\ndef f():\n    return os.getcwd()\n"})


def _env(c: Path, tmp_path: Path) -> dict:
    return {**os.environ, "RECON_CACHE_DIR": str(c), cachekey.KEY_ENV: str(tmp_path / "config" / "cache.key"), "RECON_SYNC_WRITES": "1"}


def test_a_cache_whose_lock_cannot_be_opened_is_no_cache(tmp_path):
    root = _synthetic(tmp_path)
    good = _recon("index", "--path", str(root), "--format", "json", env=_env(tmp_path / "c1", tmp_path))
    ro = tmp_path / "ro"
    (ro / ".writer.lock").mkdir(parents=True)  # cannot be opened for writing, even by root
    r = _recon("index", "--path", str(root), "--format", "json", env=_env(ro, tmp_path))
    assert r.returncode == good.returncode == 0, r.stderr
    flat = " ".join(r.stderr.split())  # the warning folds at 100 columns
    assert flat.count("cannot be written") == 1 and "cannot be written" in flat.split("running without a cache")[0]
    assert "Traceback" not in r.stderr
    strip = lambda d: {k: v for k, v in json.loads(d).items() if k not in ("seconds", "target", "timings")}
    assert strip(r.stdout) == strip(good.stdout)
    assert sorted(p.name for p in ro.iterdir()) == [".writer.lock"]  # nothing written


def test_a_full_cache_disk_changes_no_finding(tree_0513, monkeypatch, capsys):
    """A scan of the real 0.5.13.post1 tree whose derived entries are all misses and whose every
    cache write fails with ENOSPC: the same findings and exit code as with a working cache."""
    from typer.testing import CliRunner

    from recon import cli, scan
    from recon.runtime import cached

    args = ["scan", "--sglang", SEED_VERSION, "--device", "h200", "--model", "deepseek-v3", "--format", "json"]
    runner = CliRunner()
    good = runner.invoke(cli.app, args)
    monkeypatch.setenv("RECON_SYNC_WRITES", "1")
    monkeypatch.setattr(cache, "_DISABLED", [], raising=False)
    for mod in (scan, cached):  # every rule result is rebuilt, so each tries to store it
        monkeypatch.setattr(mod, "load_pickle", lambda p: None)

    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(cache, "atomic_write_bytes", full)
    r = runner.invoke(cli.app, args)
    assert r.exit_code == good.exit_code, r.output
    assert json.loads(r.stdout)["findings"] == json.loads(good.stdout)["findings"]
    flat = " ".join(r.stderr.split())  # the warning folds at 100 columns
    assert flat.count("cannot be written") == 1 and "No space left" in flat


def test_enospc_on_a_synthetic_tree_is_one_warning(own_cache, tmp_path, monkeypatch, capsys):
    from recon.target import from_path
    from recon.tree import load

    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(cache, "atomic_write_bytes", full)
    tree = load(from_path(_synthetic(tmp_path)))
    assert "sglang/srt/a.py" in tree.index.files and tree.graph.number_of_nodes() > 0
    tree.resolver  # stored too: fails quietly now
    err = " ".join(capsys.readouterr().err.split())  # the warning folds at 100 columns
    assert err.count("cannot be written") == 1 and "No space left" in err


class _Planted:
    """A pickle that, when loaded, creates a file: proof that loading ran code."""

    marker = ""

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_planted_pickle_is_never_loaded(own_cache, tmp_path):
    from recon.target import from_path
    from recon.tree import _graph_paths, load

    t = from_path(_synthetic(tmp_path))
    load(t)  # a real, signed graph in the cache
    gpath, rpath = _graph_paths(t.key)
    assert gpath.read_bytes().startswith(cachekey.MAGIC)
    marker = tmp_path / "ran"
    _Planted.marker = str(marker)
    evil = pickle.dumps((cache.FORMAT, _Planted()))
    for p in (gpath, rpath):
        p.write_bytes(evil)  # what an attacker who can write the cache would plant
    tree = load(from_path(t.source.root))
    tree.resolver
    assert not marker.exists()
    assert tree.timings["graph"] == "built"  # a miss: rebuilt from the facts
    # signed with another key, or one byte changed: a miss too
    good = cache.cachekey.seal(pickle.dumps((cache.FORMAT, _Planted())))
    gpath.write_bytes(good)
    cachekey._key = b"k" * 32  # the entry was signed with this run's key; now another user's
    assert cache.load_pickle(gpath) is None and not marker.exists()


def test_a_tampered_entry_is_a_miss(own_cache, tmp_path):
    p = own_cache / "findings" / "x.pkl"
    cache.save_pickle(p, {"a": 1})
    assert cache.load_pickle(p) == {"a": 1}
    blob = bytearray(p.read_bytes())
    blob[-3] ^= 1
    p.write_bytes(bytes(blob))
    assert cache.load_pickle(p) is None
    p.write_bytes(pickle.dumps((cache.FORMAT, {"a": 1})))  # unsigned (an old recon, or planted)
    assert cache.load_pickle(p) is None


def test_a_cache_entry_name_outside_the_cache_is_neither_written_nor_read(own_cache, tmp_path):
    outside = tmp_path / "outside.pkl"
    cache.save_pickle(own_cache / "graph" / ".." / ".." / "outside.pkl", {"a": 1})
    assert not outside.exists()
    (own_cache / "graph").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    cache.save_pickle(own_cache / "graph" / "x.pkl", {"a": 1})  # the folder links out of the cache
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_the_key_is_made_private_outside_the_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(cachekey.KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(cachekey, "_key", None)
    k = cachekey.key()
    path = tmp_path / "xdg" / "recon" / "cache.key"
    assert path.read_bytes() == k and len(k) == 32 and (path.stat().st_mode & 0o777) == 0o600
    monkeypatch.setattr(cachekey, "_key", None)
    assert cachekey.key() == k  # the same key on the next run
    path.chmod(0o644)  # others could read it and sign entries: not used
    monkeypatch.setattr(cachekey, "_key", None)
    assert cachekey.key() != k and "no usable cache key" in capsys.readouterr().err


def test_prune_never_deletes_through_an_area_that_links_out(own_cache, tmp_path):
    from recon.cacheadmin import prune

    out = tmp_path / "precious"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "data.txt").write_text("keep")
    (own_cache / "graph").symlink_to(out, target_is_directory=True)  # planted by whoever shares the cache
    gone = prune(own_cache, 0, everything=True, wheels=True)
    assert (out / "sub" / "data.txt").read_text() == "keep" and gone.files == 0


def test_a_pipe_planted_as_a_cache_entry_or_lock_does_not_block(own_cache, tmp_path):
    p = own_cache / "findings" / "x.pkl"
    p.parent.mkdir(parents=True)
    os.mkfifo(p)
    assert cache.load_pickle(p) is None  # opened non-blocking, refused by fstat
    elsewhere = tmp_path / "created-by-lock"
    (own_cache / ".writer.lock").symlink_to(elsewhere)
    cache.wait_for_writers()  # the lock is not followed out of the cache: no cache, one line
    assert not elsewhere.exists() and cache.disabled()


def test_a_read_through_a_link_inside_the_root_still_works(tmp_path):
    """The safe open keeps the target's rule: links inside the root are followed, once checked."""
    root = make_tree(tmp_path / "t", {"sglang/srt/real/x.py": "x = 1\n"})
    os.symlink("real", root / "sglang" / "srt" / "ln")
    os.symlink("real/x.py", root / "sglang" / "srt" / "y.py")
    src = DirSource(root, ("sglang",))
    assert src.read("sglang/srt/ln/x.py") == src.read("sglang/srt/y.py") == b"x = 1\n"
    os.mkfifo(root / "sglang" / "srt" / "p.py")
    with pytest.raises(OSError, match="named pipe"):
        src.read("sglang/srt/p.py")


def test_a_zip_bomb_is_refused_before_it_is_inflated(own_cache, tmp_path, monkeypatch):
    """A member whose declared size is past any release's is refused before it is read: nothing of
    the wheel is unpacked and the bound, not the memory, stops it."""
    monkeypatch.setattr(wheelcache, "MAX_MEMBER_BYTES", 1 << 16)
    _placed(own_cache, monkeypatch, {"sglang/srt/bomb.json": b"0" * (1 << 17)})
    with pytest.raises(ReconError, match="damaged.*more than any SGLang release"):
        target.fetch_wheel(VERSION)
    assert not (own_cache / "wheels" / VERSION).exists()


def test_a_full_disk_while_unpacking_is_one_line_not_a_crash(own_cache, tmp_path, monkeypatch):
    _placed(own_cache, monkeypatch, {})

    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(wheelcache, "atomic_write_bytes", full)
    with pytest.raises(ReconError, match="cannot unpack sglang==9.9.9 into the cache.*No space left"):
        target.fetch_wheel(VERSION)
    assert not (own_cache / "wheels" / VERSION / "sglang").exists()


# -- what pip is asked to fetch never runs code -----------------------------------------------------

_BACKEND = '''
import pathlib
pathlib.Path({marker!r}).write_text("ran")  # runs the moment pip imports the backend
def get_requires_for_build_wheel(config_settings=None): return []
def prepare_metadata_for_build_wheel(d, config_settings=None): raise SystemExit(1)
def build_wheel(d, config_settings=None, metadata_directory=None): raise SystemExit(1)
'''


def _crafted_sdist(folder: Path, marker: Path) -> Path:
    """An sdist of sglang==VERSION whose in-tree build backend (no build requirements, so pip needs
    nothing else to run it) writes ``marker`` when imported."""
    import io
    import tarfile

    folder.mkdir(parents=True, exist_ok=True)
    top = f"sglang-{VERSION}"
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "evil_backend"\nbackend-path = ["."]\n',
        "evil_backend.py": _BACKEND.format(marker=str(marker)),
        "PKG-INFO": f"Metadata-Version: 2.1\nName: sglang\nVersion: {VERSION}\n",
    }
    path = folder / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def test_an_sdist_served_for_the_version_is_never_built(own_cache, tmp_path, monkeypatch):
    """An index (here a find-links folder) that serves only an sdist of the requested version: pip
    would run its build backend to read its metadata. recon takes wheels only, so nothing runs."""
    marker = tmp_path / "ran-the-sdist"
    links = tmp_path / "links"
    _crafted_sdist(links, marker)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    with pytest.raises(ReconError, match="could not fetch sglang==9.9.9"):
        target.fetch_wheel(VERSION)
    assert not marker.exists()
    assert list((own_cache / "downloads").iterdir()) == []


def test_pip_started_from_a_hostile_folder_is_the_installed_pip(own_cache, tmp_path, monkeypatch):
    """recon started inside a checkout that holds a ``pip`` package of its own: the download runs
    the environment's pip, never the checkout's."""
    marker = tmp_path / "ran-the-checkouts-pip"
    hostile = tmp_path / "checkout"
    (hostile / "pip").mkdir(parents=True)
    planted = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n"
    (hostile / "pip" / "__init__.py").write_text(planted)
    (hostile / "pip" / "__main__.py").write_text(planted)
    monkeypatch.chdir(hostile)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty"))
    with pytest.raises(ReconError, match="could not fetch"):
        target.fetch_wheel(VERSION)
    assert not marker.exists()


@pytest.mark.parametrize("area", ["wheels", "downloads"])
def test_a_fetched_area_that_links_out_is_neither_written_nor_deleted(own_cache, tmp_path, monkeypatch, area):
    """Whoever shares the cache plants ``wheels`` (or ``downloads``) as a link to a folder of the
    user's: a half tree there would be removed, a download or unpacked tree written there. recon
    refuses the area in one line and touches nothing outside the cache."""
    precious = tmp_path / "precious"
    (precious / VERSION).mkdir(parents=True)
    (precious / VERSION / "notes.txt").write_text("keep")  # looks like a half-unpacked tree
    (precious / f"sglang-{VERSION}-py3-none-any.whl").write_text("keep")  # looks like a download
    if (own_cache / area).exists():
        (own_cache / area).rmdir()
    (own_cache / area).symlink_to(precious, target_is_directory=True)
    _placed_outside = craft_wheel(tmp_path / f"sglang-{VERSION}-py3-none-any.whl", {})
    monkeypatch.setattr(target, "_download", lambda v, d: shutil.copy(_placed_outside, d) and Path(d) / _placed_outside.name)
    before = sorted(p.relative_to(precious).as_posix() for p in precious.rglob("*"))
    with pytest.raises(ReconError, match=f"cache's {area}.* leads outside the cache"):
        target.fetch_wheel(VERSION)
    assert sorted(p.relative_to(precious).as_posix() for p in precious.rglob("*")) == before
    assert (precious / VERSION / "notes.txt").read_text() == "keep"
    assert (precious / f"sglang-{VERSION}-py3-none-any.whl").read_text() == "keep"


def test_a_tree_nested_thousands_deep_is_walked_not_a_crash(tmp_path):
    """1,500 nested folders (within PATH_MAX): the walk keeps folders on a stack, so the file at the
    bottom is indexed and recon exits 0 instead of a RecursionError (exit 3)."""
    root = make_tree(tmp_path / "tree", {"sglang/srt/a.py": "def f():\n    pass\n"})
    here = os.getcwd()
    try:
        os.chdir(root / "sglang" / "srt")
        for _ in range(1500):
            os.mkdir("d")
            os.chdir("d")
        Path("deep.py").write_text("def deepest():\n    return 1\n")
    finally:
        os.chdir(here)
    try:
        _walk_the_nested_tree(root, tmp_path)
    finally:
        _remove_nested(root / "sglang" / "srt")


def _walk_the_nested_tree(root: Path, tmp_path: Path) -> None:
    files = dict(DirSource(root, ("sglang",)).files())
    deep = [p for p in files if p.endswith("/deep.py")]
    assert len(deep) == 1 and deep[0].split("/").count("d") == 1500 and "sglang/srt/a.py" in files
    got = subprocess.run([sys.executable, "-m", "recon", "index", "--path", str(root)], capture_output=True, text=True,
                         env={**os.environ, "RECON_CACHE_DIR": str(tmp_path / "c")}, timeout=300)
    assert got.returncode == 0, got.stderr[-500:]


def _remove_nested(top: Path) -> None:
    """Remove a chain of nested ``d`` folders bottom-up without recursion (``shutil.rmtree`` and
    pytest's clean-up of old temporary folders recurse once per level and fail past ~1,000)."""
    here = os.getcwd()
    try:
        os.chdir(top)
        depth = 0
        while os.path.isdir("d"):
            os.chdir("d")
            depth += 1
        for _ in range(depth):
            for name in os.listdir("."):
                os.unlink(name)
            os.chdir("..")
            os.rmdir("d")
    finally:
        os.chdir(here)
