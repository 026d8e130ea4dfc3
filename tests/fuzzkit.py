"""What the fuzz tests and ``bench/fuzz_bench.py`` share: recon's per-file analyses run on one
untrusted source, the sources to run them on, and what counts as a bug.

Three stages, each as recon runs it on a target:

- ``facts``: :func:`recon.indexer.index_plain` (the per-file fact extraction the index stores);
- ``triton``: :func:`recon.tritonast.summarize` (kernel and host-function summaries);
- ``evaluators``: the file placed in a one-file SGLang tree, loaded, and every rule run for two
  devices (the gate interpreter, the launch-shape and epilogue-shape evaluators, the config and
  CUDA-graph checks all read it).

A bug is an exception that escapes a stage, a file that runs past :data:`HANG_S` (a hang guard, a
hundred times what any file takes, not a timing assertion), a diagnostic that says recon itself
failed (``internal error``), or a rule that crashed. Whatever else cannot be analyzed must come
back as a diagnostic.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import random
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

HANG_S = float(os.environ.get("RECON_FUZZ_HANG_S", 60))  # seconds one file may take in one stage: a hang
INTERNAL = "internal error"  # the prefix recon's backstops give a failure of its own code
DEVICES = ("h200", "rtx-pro-6000")


class Bug(AssertionError):
    """A stage crashed, hung, or reported a failure of recon's own code."""


class Hang(BaseException):  # not an Exception: recon's own `except Exception` must not swallow it
    pass


@contextlib.contextmanager
def hang_guard(seconds: float = HANG_S) -> Iterator[None]:
    """Raise :class:`Hang` in this (main) thread when the block runs past ``seconds``.

    A signal handler runs only between bytecodes: a hang inside one C call (``10 ** 10 ** 10``,
    a gigabyte string) never reaches it. For those, ``faulthandler`` prints every thread's stack
    and ends the process at twice the bound: loud, and never a silent stall of the run."""

    def fire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    faulthandler.dump_traceback_later(2 * seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _guarded(stage: str, fn, *args):
    try:
        with hang_guard():
            return fn(*args)
    except Hang as e:
        raise Bug(f"{stage}: hang ({e})") from None
    except Exception as e:
        raise Bug(f"{stage}: {type(e).__name__}: {e}"[:500]) from e


# ── the stages ──


def run_facts(relpath: str, data: bytes) -> tuple:
    from recon.indexer import index_plain

    facts = _guarded("facts", index_plain, relpath, data, "")
    if facts[5] and INTERNAL in facts[5]:
        raise Bug(f"facts: {facts[5]}")
    return facts


def run_triton(text: str) -> dict:
    from recon.tritonast import summarize

    out = _guarded("triton", summarize, text)
    if out.get("error") and INTERNAL in out["error"]:
        raise Bug(f"triton: {out['error']}")
    return out


_RULES = None


def run_evaluators(relpath: str, data: bytes) -> list:
    """Every rule on a one-file tree holding ``data`` at ``relpath``, for each of :data:`DEVICES`;
    the index diagnostics of the tree."""
    global _RULES
    from recon.profiles import load_device, load_model
    from recon.rules import load_rules
    from recon.scan import run_rules
    from recon.target import from_path
    from recon.tree import load

    if _RULES is None:
        _RULES = load_rules()
    work = Path(tempfile.mkdtemp(prefix="recon-fuzz-"))
    try:
        p = work / relpath
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        cur = p.parent
        while cur != work:
            if not (cur / "__init__.py").exists():
                (cur / "__init__.py").write_bytes(b"")
            cur = cur.parent
        tree = _guarded("evaluators", load, from_path(work))
        for dev in DEVICES:
            res = _guarded("evaluators", run_rules, tree, load_device(dev), load_model(None), _RULES, False)
            if res.errors:
                raise Bug(f"evaluators ({dev}): rule {res.errors[0][0]} crashed: {res.errors[0][1]}")
        return tree.index.diagnostics
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_all(relpath: str, data: bytes, evaluators: bool = True) -> dict:
    """Every stage on one file; {stage: seconds}. Raises :class:`Bug`."""
    times = {}
    t = time.perf_counter()
    run_facts(relpath, data)
    times["facts"] = time.perf_counter() - t
    t = time.perf_counter()
    run_triton(data.decode("utf-8", "replace"))
    times["triton"] = time.perf_counter() - t
    if evaluators:
        t = time.perf_counter()
        run_evaluators(relpath, data)
        times["evaluators"] = time.perf_counter() - t
    return times


# ── sources ──

# A kernel, its launcher and a gate whose holes take generated expressions: the evaluators only
# look at code shaped like this, which random programs almost never are.
TEMPLATE = '''import torch
import triton
import triton.language as tl


def _check_fuzz_device(device_capability_majors=None):
    major, minor = torch.cuda.get_device_capability()
    cap = major * 10 + minor
    x = {0}
    if {1}:
        return {2}
    return {3}


is_fuzz_supported = _check_fuzz_device


def is_fuzz_derived():
    return is_fuzz_supported() and {1}


_is_fuzz = is_fuzz_derived()
_FUZZ_CONST = {4}


@triton.autotune(configs=[triton.Config({{"BLOCK": {5}}}, num_warps={6})], key=["N"])
@triton.jit
def fuzz_kernel(a, b, c, N, K, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k0 in range(0, K, BLOCK):
        x = tl.load(a + k0)
        w = tl.load(b + k0)
        q = (w >> 4) & 0xF
        acc += tl.sum(x[None, :] * tl.exp2(q) * ({4}), axis=1)
    tl.store(c + pid, acc)


def fuzz_launch(x, w, out, meta):
    M, K = x.shape
    N = w.shape[0]
    BLOCK = {5}
    grid = ({7}, triton.cdiv(N, BLOCK))
    if _is_fuzz and {1}:
        fuzz_kernel[grid](x, w, out, N, K, BLOCK=BLOCK, num_warps={6})
    else:
        fuzz_kernel[lambda META: ({7}, META["BLOCK"])](x, w, out, N, K)
    y = torch.empty(({5}, N), dtype=torch.float32)
    y = y * out.view({7}, -1).unsqueeze({6})
    return y.to(torch.float32)
'''
HOLES = 8

LEAVES = [
    "0", "1", "2", "-1", "9", "10", "12", "90", "100", "128", "4096", "2 ** 70", "10 ** 8", "1e308", "0.5",
    "major", "minor", "cap", "x", "M", "N", "K", "BLOCK", "_FUZZ_CONST", "_is_fuzz", "meta['BLOCK']",
    "torch.version.cuda", "torch.version.hip", "'12.8'", "'a'", "(9, 0)", "(12, 0)", "[]", "None", "True", "False",
    "device_capability_majors", "torch.cuda.get_device_capability()", "is_fuzz_supported()", "is_fuzz_derived()",
    "0x" + "f" * 4000, "9" * 200, "float('inf')", "float('nan')",
]
BINOPS = ["+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^", "==", "!=", "<", ">=", "and", "or", "in", "not in", "is"]
CALLS = [
    "max({}, {})", "min({}, {})", "triton.cdiv({}, {})", "triton.next_power_of_2({})", "int({})", "len({})",
    "tuple({})", "str({})", "({}).split('.')", "({})[0]", "({}, {})", "[{}] * {}", "sorted({})", "any({})", "({} if {} else {})",
    "math.ceil({})", "({}).major", "({}).to_int()", "_check_fuzz_device({})", "str({}).startswith({})",
]


def expressions():
    """Hypothesis strategy: expressions over the names, probes and operators the evaluators know."""
    from hypothesis import strategies as st

    def grow(inner):
        binary = st.tuples(inner, st.sampled_from(BINOPS), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
        unary = st.tuples(st.sampled_from(["-", "not ", "~"]), inner).map(lambda t: f"({t[0]}{t[1]})")
        call = st.tuples(st.sampled_from(CALLS), st.lists(inner, min_size=3, max_size=3)).map(
            lambda t: t[0].format(*t[1][: t[0].count("{}")])
        )
        return st.one_of(binary, unary, call)

    return st.recursive(st.sampled_from(LEAVES), grow, max_leaves=10)


def templated(exprs: list[str]) -> str:
    return TEMPLATE.format(*exprs)


def real_files(roots: list[Path], limit: int = 40, seed: int = 0) -> list[tuple[str, str, bytes]]:
    """(release, relpath, bytes) of SGLang files the analyses care about most (kernels, gates, launchers),
    a fixed sample per release so that runs are reproducible."""
    out = []
    rng = random.Random(seed)
    for root in roots:
        found = []
        for p in sorted((root / "sglang").rglob("*.py")):
            try:
                data = p.read_bytes()
            except OSError:
                continue
            if len(data) > 120_000:
                continue
            if b"triton.jit" in data or b"get_device_capability" in data or b"[grid]" in data or b"is_sm" in data:
                found.append((root.name, p.relative_to(root).as_posix(), data))
        rng.shuffle(found)
        out.extend(found[: limit // max(1, len(roots))])
    return out


# ── mutations: small edits a real file could plausibly suffer, and a few hostile ones ──

INSERTS = [
    b"(" * 300, b"[" * 120 + b"]" * 120, b"\0", b"\xff\xfe", b"\t", b"\\\n", b'"""', b"'", b"\x0c", b"\r",
    b"# -*- coding: latin-1 -*-\n", b"\xef\xbb\xbf", b"lambda: (yield)", b"async ", b"await ", b":=",
    b"f'{x!r:>{y}}'", b"0x" + b"f" * 5000, b"-'a'", b"-None", b"1 if 2 else 3", b"*", b"**", b"@",
    b"if torch.cuda.get_device_capability()[0] == 9:\n    pass\n", b"BLOCK = 10 ** 10 ** 10\n",
    b"grid = (triton.cdiv(M, 2 ** 4000),)\n",
]


def mutations():
    """Hypothesis strategy: a short list of (op, position, argument) edits; see :func:`mutate`."""
    from hypothesis import strategies as st

    op = st.sampled_from(["delete", "duplicate", "swap", "truncate", "insert", "indent", "dedent", "flip", "splice"])
    return st.lists(st.tuples(op, st.integers(0, 1 << 20), st.integers(0, 1 << 20)), min_size=1, max_size=4)


def mutate(data: bytes, edits: list[tuple[str, int, int]], other: Optional[bytes] = None) -> bytes:
    """Apply ``edits`` to ``data``: positions are taken modulo the current size, so any draw applies."""
    for op, a, b in edits:
        lines = data.split(b"\n")
        n = len(lines)
        i, j = a % n, b % n
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "truncate":
            data = data[: a % (len(data) + 1)]
            continue
        elif op == "insert":
            k = a % (len(data) + 1)
            data = data[:k] + INSERTS[b % len(INSERTS)] + data[k:]
            continue
        elif op == "indent":
            lines[i] = b"    " + lines[i]
        elif op == "dedent":
            lines[i] = lines[i].lstrip()
        elif op == "flip":
            if data:
                k = a % len(data)
                data = data[:k] + bytes([data[k] ^ (1 << (b % 8))]) + data[k + 1 :]
            continue
        elif op == "splice" and other:
            olines = other.split(b"\n")
            lines[i:i] = olines[b % len(olines) : b % len(olines) + 5]
        data = b"\n".join(lines)
    return data


def fuzz_settings(**kw):
    """Deterministic Hypothesis settings: the same examples every run, no deadline (see HANG_S)."""
    from hypothesis import HealthCheck, settings

    base = dict(derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=True)
    base.update(kw)
    return settings(**base)


def quiet_env() -> None:
    """Writes in this process (no write-behind child per example) into a private cache."""
    os.environ["RECON_SYNC_WRITES"] = "1"
    if "RECON_FUZZ_CACHE" not in os.environ:
        os.environ["RECON_FUZZ_CACHE"] = tempfile.mkdtemp(prefix="recon-fuzz-cache-")
    os.environ["RECON_CACHE_DIR"] = os.environ["RECON_FUZZ_CACHE"]
