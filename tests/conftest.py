"""Shared fixtures: real SGLang trees fetched from PyPI once and cached between runs.

The cache lives in ``RECON_CACHE_DIR`` when set, else in ``.cache/recon-tests`` at the repo root
(ignored by git). Wheels are fetched with ``pip download --no-deps``; nothing is installed or imported.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SEED_VERSION = "0.5.13.post1"
NEW_VERSION = os.environ.get("RECON_TEST_NEW_VERSION", "0.5.23")
OLD_VERSION = "0.5.5"  # before the seed: gpt-oss's MoE kernels picked at run time, no DeepSeek-V4

os.environ.setdefault("RECON_CACHE_DIR", str(REPO / ".cache" / "recon-tests"))
# The kernel wheels a release pins are a few hundred MB each: the suite decides importability by
# names (recon.shipped's fallback) except where a test turns reading them on (one wheel in all).
os.environ.setdefault("RECON_DIST_MODULES", "off")

# a released tree is loaded once per session, CLI invocations included (tests/scenarios.py)
from tests import scenarios  # noqa: E402

scenarios.install_tree_memo()

# Fixtures that fetch a released wheel: every test that uses one (directly or through another
# fixture), or calls from_version itself, is marked `network` here, so `pytest -m "not network"`
# runs offline without a list to keep.
WHEEL_FIXTURES = frozenset({"sglang_0513", "sglang_new", "tree_old", "tree_0513", "tree_new", "tree_unseen", "tree_traced"})
# A release outside the three above, for the mechanisms the differential oracle (bench/oracle)
# found wrong: a fix must hold on a release the rest of the suite never reads.
UNSEEN_VERSION = os.environ.get("RECON_TEST_UNSEEN_VERSION", "0.5.20")
# A release traced by hand against recon's answers (bench/handtrace/): the claims it got wrong are
# pinned on it once fixed (tests/test_traced_release.py).
TRACED_VERSION = "0.5.19"


# The cyclic collector: off, and run by the suite itself, each time followed by gc.freeze(). A
# scenario builds millions of objects that stay (parsed modules, memos, the released trees the memo
# of tests/scenarios.py keeps), and Python's own collections, or one per module (tried), walked
# them again each time: a fifth of the suite's CPU (bench/NOTES.md "s34"; the console entry turns
# the collector off for a command the same way). Survivors of a collection are frozen, so the next
# one walks only what was made since:
# - a shallow collection after each test module and after any test that grew resident memory by
#   _GC_STEP_MB since the last one (a module of tree copies, the apply tests, makes a loaded tree and
#   its memo, a cycle, per test: 5.7 GB when collected only per module);
# - a shallow one before a tree load once _GC_LOAD_OBJECTS objects were made since the last one: a
#   test that loads a copy per CLI command frees the previous copy before making the next (resident
#   memory does not show it: the process reuses what it freed, at its high-water mark);
# - a deep one (unfreeze first) when memory grew by _GC_DEEP_MB since the last deep one: what was
#   frozen alive and became cyclic garbage later (a module fixture's tree) is freed there. An evicted
#   released tree needs none: tests/scenarios.py cuts its cycles, and reference counting frees it.
import gc as _gc_policy  # noqa: E402

_gc_policy.disable()
_GC_STEP_MB = int(os.environ.get("RECON_TEST_GC_STEP_MB", "384"))
_GC_DEEP_MB = int(os.environ.get("RECON_TEST_GC_DEEP_MB", "1024"))
_collected_at = [0.0, 0.0]  # resident MB after the last collection, after the last deep one


def _resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _collect(deep: bool) -> None:
    before, t0 = _resident_mb(), time.perf_counter()
    if deep:
        _gc_policy.unfreeze()
    found = _gc_policy.collect()
    _gc_policy.freeze()
    _collected_at[0] = _resident_mb()
    if deep:
        _collected_at[1] = _collected_at[0]
    if ON_COLLECT is not None:
        ON_COLLECT(deep, found, time.perf_counter() - t0, before, _collected_at[0])


ON_COLLECT = None  # the profile's log of each collection (RECON_TEST_PROFILE)


def _collect_if_grown() -> None:
    now = _resident_mb()
    if now - _collected_at[1] > _GC_DEEP_MB:
        _collect(deep=True)
    elif now - _collected_at[0] > _GC_STEP_MB:
        _collect(deep=False)


_GC_LOAD_OBJECTS = int(os.environ.get("RECON_TEST_GC_LOAD_OBJECTS", "200000"))


def _collect_before_load() -> None:
    """Before every tree load: a test that loads copies of a real tree one after another (a planted
    link, the apply round trips, each CLI invocation) no longer holds the earlier copy, garbage in a
    cycle, while the next one is made. Counted in objects made since the last collection, not in
    resident memory: a process at its high-water mark reuses what it freed and does not grow until
    the two copies no longer fit."""
    if _gc_policy.get_count()[0] > _GC_LOAD_OBJECTS:
        _collect(deep=False)
    else:
        _collect_if_grown()


scenarios.BEFORE_LOAD = _collect_before_load


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    """The released trees among a test's fixtures are used now (tests/scenarios.py ``touch``)."""
    from recon.tree import Tree

    trees = []
    for value in getattr(item, "funcargs", {}).values():
        try:
            held = getattr(value, "tree", None)
        except Exception:  # a fixture's value whose attributes raise: it holds no tree
            held = None
        for t in (value, held):
            if isinstance(t, Tree):
                trees.append(t)
    scenarios.touch(trees)


@pytest.fixture(autouse=True)
def _collect_when_memory_grew():
    yield
    _collect_if_grown()


@pytest.fixture(scope="module", autouse=True)
def _collect_after_each_module():
    yield
    _collect(deep=_resident_mb() - _collected_at[1] > _GC_DEEP_MB)


# The `quick` core (`pytest -m quick`, run on every change): every test that needs no released
# wheel, except these offline files, which take minutes (measured, bench/NOTES.md "the test
# suite's time"): kernel compiles for four architectures, kernels under Triton's CPU interpreter,
# the fuzzers, and building recon's own wheel. The full command runs them all.
NOT_QUICK = frozenset({
    "reference_impl/test_gluon_compile.py",
    "reference_impl/test_refimpl_cpu.py",
    "reference_impl/test_tune_configs.py",
    "test_fuzz.py",
    "test_install_layout.py",
})
_TESTS = Path(__file__).resolve().parent


def _fetches_a_release(item) -> bool:
    """A test that loads a released tree itself (``from_version("0.5.16")`` in its body, a release
    no fixture holds) needs a wheel as much as one that takes a wheel fixture; one that hands
    from_version a string it refuses (``"latest; rm -rf /"``) does not."""
    fn = getattr(item, "function", None)
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    if code not in _FETCHES:
        import ast
        import inspect
        import re
        import textwrap

        try:
            body = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        except (OSError, TypeError, SyntaxError):
            body = None
        _FETCHES[code] = body is not None and any(
            isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "from_version"
            and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)
            and re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", n.args[0].value)  # a release, not a refused string
            for n in ast.walk(body))
    return _FETCHES[code]


_FETCHES: dict = {}


def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        # a test parametrized with fixture names fetches them with request.getfixturevalue
        callspec = getattr(item, "callspec", None)
        used |= {v for v in (callspec.params.values() if callspec else ()) if isinstance(v, str)}
        if WHEEL_FIXTURES & used or _fetches_a_release(item):
            item.add_marker(pytest.mark.network)
        elif item.get_closest_marker("network") is None and item.get_closest_marker("gpu") is None:
            rel = Path(str(item.fspath)).resolve().relative_to(_TESTS).as_posix()
            if rel not in NOT_QUICK:
                item.add_marker(pytest.mark.quick)
    # the longest files first (their CPU seconds in the last measured run, bench/NOTES.md "s34"):
    # `--dist loadscope` hands files to the workers in this order, so a six-minute file started
    # last no longer leaves one worker running alone at the end
    def weight(item):
        rel = Path(str(item.fspath)).resolve().relative_to(_TESTS).as_posix()
        return -FIRST.get(rel, 0)

    items.sort(key=weight)


def pytest_configure(config):
    # xdist's loadscope would hand out files by their number of tests instead (the 559 GPU tests,
    # skipped here in seconds, first): the order above is kept
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if _CPROFILE:
        _profiler.enable()


# CPU seconds of the longest files in a full run (bench/suite_profile.py); the rest keep their order
FIRST = {"reference_impl/test_gluon_compile.py": 343, "test_apply.py": 269, "test_spec_matrix.py": 253,
         "test_oracle_mechanisms.py": 96, "test_apply_hostile.py": 91, "test_will_it_run.py": 77,
         "test_oracle_slice.py": 69, "test_rules_configs.py": 63, "test_runtime_view.py": 58, "test_dense_models.py": 53}


@pytest.fixture(scope="session")
def cache_root() -> Path:
    return Path(os.environ["RECON_CACHE_DIR"])


@pytest.fixture(scope="session")
def sglang_0513():
    from recon.target import from_version

    return from_version(SEED_VERSION)


@pytest.fixture(scope="session")
def sglang_new():
    from recon.target import from_version

    return from_version(NEW_VERSION)


# A released tree per module, not per session: tests/scenarios.py keeps the trees in use and drops
# the rest, which a session-long fixture would hold to the end.
@pytest.fixture(scope="module")
def tree_old():
    from recon.target import from_version
    from recon.tree import load

    return load(from_version(OLD_VERSION))


@pytest.fixture(scope="module")
def tree_unseen():
    from recon.target import from_version
    from recon.tree import load

    return load(from_version(UNSEEN_VERSION))


@pytest.fixture(scope="module")
def tree_traced():
    from recon.target import from_version
    from recon.tree import load

    return load(from_version(TRACED_VERSION))


@pytest.fixture(scope="module")
def tree_0513(sglang_0513):
    from recon.tree import load

    return load(sglang_0513)


@pytest.fixture(scope="module")
def tree_new(sglang_new):
    from recon.tree import load

    return load(sglang_new)


def make_tree(root: Path, files: dict[str, str]) -> Path:
    """A tiny synthetic SGLang-shaped tree: ``{relpath: source}`` under ``root`` (with package inits)."""
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    for d in {(root / rel).parent for rel in files}:
        cur = d
        while cur != root and cur.is_relative_to(root / "sglang"):
            init = cur / "__init__.py"
            if not init.exists():
                init.write_text("", encoding="utf-8")
            cur = cur.parent
    sg = root / "sglang" / "__init__.py"
    if not sg.exists():
        sg.parent.mkdir(parents=True, exist_ok=True)
        sg.write_text("", encoding="utf-8")
    return root


@pytest.fixture
def synthetic(tmp_path):
    """Build a synthetic tree and load it: ``synthetic({relpath: code}) -> Tree``."""
    from recon.target import from_path
    from recon.tree import load

    def build(files: dict[str, str]):
        make_tree(tmp_path / "tree", files)
        return load(from_path(tmp_path / "tree"))

    return build


# Where the suite's time and memory go, per test (bench/suite_profile.py reads it): with
# RECON_TEST_PROFILE=<folder>, each process appends one JSON line per test — wall and CPU seconds
# (its own and its children's, setup and teardown included), the seconds of full garbage
# collections in it, resident memory after the test and the process's peak so far.
_PROFILE = os.environ.get("RECON_TEST_PROFILE")
if _PROFILE:
    import json as _json
    import resource as _resource
    import time as _time

    import gc as _gc

    _gc_time = [0.0, 0.0]  # seconds in full (oldest-generation) collections, start of the current one

    def _gc_clock(phase, info):
        if info["generation"] == 2:
            if phase == "start":
                _gc_time[1] = _time.perf_counter()
            else:
                _gc_time[0] += _time.perf_counter() - _gc_time[1]

    _gc.callbacks.append(_gc_clock)

    def _rss_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        t0, c0, g0 = _time.perf_counter(), os.times(), _gc_time[0]
        yield
        c1 = os.times()
        cpu = (c1.user - c0.user) + (c1.system - c0.system)
        child = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
        row = {"test": item.nodeid, "wall": round(_time.perf_counter() - t0, 3), "cpu": round(cpu, 3),
               "child_cpu": round(child, 3), "sys": round(c1.system - c0.system, 3),
               "child_sys": round(c1.children_system - c0.children_system, 3), "full_gc": round(_gc_time[0] - g0, 3), "rss_mb": round(_rss_mb(), 1),
               "peak_mb": round(_resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
               "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
        Path(_PROFILE).mkdir(parents=True, exist_ok=True)
        with open(Path(_PROFILE) / f"{row['worker']}.jsonl", "a") as f:
            f.write(_json.dumps(row) + "\n")


# With RECON_TEST_PROFILE, every runtime view and kernel map built (by a test, the CLI or a spec)
# is also logged to <folder>/builds-<worker>.jsonl: its scenario key, the tree, device, model and
# CPU seconds. A key built more than once in a session (in one worker or in both) is work done twice.
if _PROFILE:
    import recon.kernels.kmap as _kmap
    import recon.runtime as _runtime

    def _logged(module, name):
        real = getattr(module, name)
        if hasattr(real, "__wrapped__"):  # this file imported again as tests.conftest: wrapped once
            return

        def wrapper(ctx, *args, **kwargs):
            from recon.derived import scenario_key

            c0 = _time.process_time()
            out = real(ctx, *args, **kwargs)
            row = {"what": name, "key": scenario_key(ctx, *args[:1]) if name == "build_map" else scenario_key(ctx),
                   "args": repr(args)[:80], "tree": getattr(ctx.tree.target, "label", "")[:60], "device": ctx.device.short,
                   "model": getattr(ctx.model, "name", ""), "cpu": round(_time.process_time() - c0, 3),
                   "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": os.environ.get("PYTEST_CURRENT_TEST", "")}
            with open(Path(_PROFILE) / f"builds-{row['worker']}.jsonl", "a") as f:
                f.write(_json.dumps(row) + "\n")
            return out

        wrapper.__wrapped__ = real
        setattr(module, name, wrapper)

    def _log_load(target, cpu, released):
        row = {"what": "load", "key": target.key, "tree": target.label[:60], "released": released, "cpu": round(cpu, 3),
               "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": os.environ.get("PYTEST_CURRENT_TEST", "")}
        with open(Path(_PROFILE) / f"builds-{row['worker']}.jsonl", "a") as f:
            f.write(_json.dumps(row) + "\n")

    def _log_collect(deep, found, secs, rss_before, rss_after):
        row = {"what": "collect", "deep": deep, "found": found, "secs": round(secs, 3), "rss_before": round(rss_before),
               "rss_after": round(rss_after), "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
               "test": os.environ.get("PYTEST_CURRENT_TEST", "")}
        with open(Path(_PROFILE) / f"builds-{row['worker']}.jsonl", "a") as f:
            f.write(_json.dumps(row) + "\n")

    scenarios.ON_LOAD = _log_load
    ON_COLLECT = _log_collect
    Path(_PROFILE).mkdir(parents=True, exist_ok=True)
    _logged(_runtime, "build")
    _logged(_kmap, "build_map")


# With RECON_TEST_CPROFILE=<folder>, each process profiles itself for the whole session and writes
# <folder>/<worker>.prof at the end (read with pstats): which of recon's functions the suite spends
# its time in, across every test.
_CPROFILE = os.environ.get("RECON_TEST_CPROFILE")
if _CPROFILE:
    import cProfile as _cprofile

    _profiler = _cprofile.Profile()

    def pytest_unconfigure(config):
        _profiler.disable()
        Path(_CPROFILE).mkdir(parents=True, exist_ok=True)
        _profiler.dump_stats(str(Path(_CPROFILE) / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.prof"))
