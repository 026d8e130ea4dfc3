"""The cache under stress: concurrent runs, prunes and SIGKILLs on one fresh cache, then checks.

    python bench/cache_stress.py [--seconds 420] [--slots 3] [--seed 0] [--json bench/results/cache_stress.json]

1. References: ``recon spec --format json`` and ``recon scan --format json`` for every release
   (0.5.5, 0.5.13.post1, 0.5.23) and device (h200, rtx-pro-6000), each release in a fresh cache
   of its own.
2. Stress, for ``--seconds``: ``--slots`` runs at a time on ONE fresh cache, each a random
   (release, device, command) in its own process group, and each either left alone (its output
   must equal the reference), SIGKILLed at a random moment, or SIGKILLed, with its whole process
   group (the write-behind child too), the moment its answer is on disk (the answer must still
   be right). Meanwhile ``recon cache prune`` runs every 10-25 s (``--all`` one time in ten,
   else what is unused for ~40 s).
3. Checks: no cache entry is half-written (every facts blob has its header and unmarshals,
   every pickle loads), and a last run of every (release, device, command) on the stressed cache
   equals the reference.

The released wheels are fetched (or found) in the test cache and linked into each fresh cache,
so no run downloads anything and prune (never given ``--wheels`` here) leaves them alone.
This machine has 2 cores: every run here is slower than alone; only correctness is measured.
"""

from __future__ import annotations

import argparse
import json
import marshal
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VERSIONS = ("0.5.5", "0.5.13.post1", "0.5.23")
DEVICES = ("h200", "rtx-pro-6000")
COMMANDS = {"spec": ["spec", "--format", "json"], "scan": ["scan", "--format", "json"]}
RECON = [sys.executable, "-m", "recon"]


def _env(cache: Path) -> dict:
    env = dict(os.environ, RECON_CACHE_DIR=str(cache))
    env.pop("RECON_SYNC_WRITES", None)  # the write-behind child is part of what is stressed
    return env


def _fresh_cache(base: Path, name: str, wheels: Path) -> Path:
    cache = base / name
    (cache / "wheels").mkdir(parents=True)
    for v in VERSIONS:  # hard links: instant, and the unpacked trees are only read
        shutil.copytree(wheels / v, cache / "wheels" / v, copy_function=os.link)
    return cache


def _argv(version: str, device: str, command: str, out: Path) -> list[str]:
    return RECON + COMMANDS[command] + ["--sglang", version, "--device", device, "-o", str(out)]


def references(base: Path, wheels: Path) -> dict:
    """Every output from a fresh cache per release (the releases side by side, each one's runs in
    turn: nothing in it is killed, pruned or shared with another run)."""
    refs = {}

    def one_release(v: str) -> None:
        cache = _fresh_cache(base, f"ref-{v}", wheels)
        for d in DEVICES:
            for c in COMMANDS:
                out = base / f"ref-{v}-{d}-{c}.json"
                p = subprocess.run(_argv(v, d, c, out), env=_env(cache), capture_output=True, text=True)
                if p.returncode != 0:
                    raise SystemExit(f"reference run failed ({v} {d} {c}): {p.stderr.strip().splitlines()[-1:]}")
                refs[(v, d, c)] = out.read_bytes()
        shutil.rmtree(cache, ignore_errors=True)
        print(f"references {v}: done", flush=True)

    threads = [threading.Thread(target=one_release, args=(v,)) for v in VERSIONS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(refs) != len(VERSIONS) * len(DEVICES) * len(COMMANDS):
        raise SystemExit("a reference run failed")
    return refs


class Stress:
    def __init__(self, base: Path, cache: Path, refs: dict, rng: random.Random, seconds: float, slots: int):
        self.base, self.cache, self.refs, self.rng = base, cache, refs, rng
        self.deadline = time.monotonic() + seconds
        self.slots = slots
        self.lock = threading.Lock()
        self.runs: list[dict] = []
        self.prunes: list[dict] = []
        self.n = 0

    def _record(self, rec: dict) -> None:
        with self.lock:
            self.runs.append(rec)

    def one(self, slot: int) -> None:
        with self.lock:
            self.n += 1
            n = self.n
            rng = random.Random(self.rng.random())
        v, d, c = rng.choice(VERSIONS), rng.choice(DEVICES), rng.choice(list(COMMANDS))
        mode = rng.choices(["normal", "kill-random", "kill-after-answer"], [0.45, 0.3, 0.25])[0]
        out = self.base / f"run-{n}.json"
        t0 = time.monotonic()
        proc = subprocess.Popen(_argv(v, d, c, out), env=_env(self.cache), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)  # its own process group
        rec = {"n": n, "version": v, "device": d, "command": c, "mode": mode}
        if mode == "kill-random":
            delay = rng.uniform(0, 25)
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rec["killed_at_s"] = round(delay, 1)
        elif mode == "kill-after-answer":
            while proc.poll() is None and not out.exists():
                time.sleep(0.005)
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the answer is out: kill the group, writer included
                rec["killed_at_s"] = round(time.monotonic() - t0, 1)
            except ProcessLookupError:  # the whole group had already finished
                pass
        _, err = proc.communicate()
        rec["rc"] = proc.returncode
        rec["seconds"] = round(time.monotonic() - t0, 1)
        if out.exists():
            rec["output"] = "equal" if out.read_bytes() == self.refs[(v, d, c)] else "DIFFERENT"
            out.unlink()
        elif mode == "normal":
            rec["output"] = "MISSING"
        if mode == "normal" and proc.returncode != 0:
            rec["stderr"] = err.decode("utf-8", "replace").strip().splitlines()[-3:]
        self._record(rec)

    def slot_loop(self, slot: int) -> None:
        while time.monotonic() < self.deadline:
            self.one(slot)

    def prune_loop(self) -> None:
        while time.monotonic() < self.deadline:
            time.sleep(self.rng.uniform(10, 25))
            # everything, or what no run used in the last ~40 s: both race with live runs
            args = ["--all"] if self.rng.random() < 0.1 else ["--older-than", "0.0005"]
            p = subprocess.run(RECON + ["cache", "prune", *args], env=_env(self.cache), capture_output=True, text=True)
            with self.lock:
                self.prunes.append({"rc": p.returncode, "args": args, "out": p.stdout.strip()[-120:]})

    def run(self) -> None:
        threads = [threading.Thread(target=self.slot_loop, args=(i,)) for i in range(self.slots)]
        threads.append(threading.Thread(target=self.prune_loop))
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def half_written(cache: Path) -> dict:
    """Every entry of the cache read back: facts blobs by header + marshal, pickles by pickle."""
    counts = {"facts": 0, "pickles": 0, "temporary": 0, "bad": []}
    for p in sorted(cache.rglob("*")):
        if not p.is_file() or "wheels" in p.relative_to(cache).parts or p.name == ".writer.lock":
            continue
        if p.name.endswith(".tmp"):
            counts["temporary"] += 1  # a killed writer's; never read, pruned after an hour
            continue
        data = p.read_bytes()
        try:
            if p.suffix == ".bin":
                head, _, body = data.partition(b"\n")
                if not head.startswith(b"recon-facts-"):
                    raise ValueError("no header")
                marshal.loads(body)
                counts["facts"] += 1
            elif p.suffix == ".pkl":
                fmt, _obj = pickle.loads(data)
                counts["pickles"] += 1
            else:
                raise ValueError("unknown entry")
        except Exception as e:  # noqa: BLE001 - any failure to read back is the finding
            counts["bad"].append(f"{p.relative_to(cache)}: {type(e).__name__}: {e}"[:200])
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=420)
    ap.add_argument("--slots", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "cache_stress.json")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()

    sys.path.insert(0, str(REPO))
    os.environ.setdefault("RECON_CACHE_DIR", str(REPO / ".cache" / "recon-tests"))
    from recon.target import fetch_wheel

    wheels = fetch_wheel(VERSIONS[0]).parent
    for v in VERSIONS[1:]:
        fetch_wheel(v)
    base = Path(tempfile.mkdtemp(prefix="recon-cache-stress-"))
    t0 = time.monotonic()
    refs = references(base, wheels)
    t_ref = time.monotonic() - t0
    cache = _fresh_cache(base, "shared", wheels)
    stress = Stress(base, cache, refs, random.Random(args.seed), args.seconds, args.slots)
    stress.run()
    t_stress = time.monotonic() - t0 - t_ref
    entries = half_written(cache)
    final = {}
    for v in VERSIONS:
        for d in DEVICES:
            for c in COMMANDS:
                out = base / f"final-{v}-{d}-{c}.json"
                p = subprocess.run(_argv(v, d, c, out), env=_env(cache), capture_output=True, text=True)
                final[f"{v} {d} {c}"] = "equal" if p.returncode == 0 and out.read_bytes() == refs[(v, d, c)] else f"DIFFERENT (rc {p.returncode})"
    runs = stress.runs
    by_mode: dict = {}
    for r in runs:
        m = by_mode.setdefault(r["mode"], {"runs": 0, "killed": 0, "equal": 0, "different": 0, "missing": 0, "failed": 0})
        m["runs"] += 1
        m["killed"] += "killed_at_s" in r
        m["equal"] += r.get("output") == "equal"
        m["different"] += r.get("output") == "DIFFERENT"
        m["missing"] += r.get("output") == "MISSING"
        m["failed"] += r["mode"] == "normal" and r["rc"] != 0
    ok = (not entries["bad"] and all(v == "equal" for v in final.values())
          and not any(m["different"] or m["missing"] or m["failed"] for m in by_mode.values())
          and all(p["rc"] == 0 for p in stress.prunes))
    summary = {
        "ok": ok, "seed": args.seed, "stress_seconds": args.seconds, "slots": args.slots,
        "reference_wall_s": round(t_ref), "stress_wall_s": round(t_stress),
        "by_mode": by_mode, "prunes": {"runs": len(stress.prunes), "failed": sum(p["rc"] != 0 for p in stress.prunes)},
        "entries": entries, "final_runs": final, "runs": runs,
    }
    print(f"{'mode':18} {'runs':>4} {'killed':>6} {'equal':>5} {'different':>9} {'missing':>7} {'failed':>6}")
    for mode, m in sorted(by_mode.items()):
        print(f"{mode:18} {m['runs']:>4} {m['killed']:>6} {m['equal']:>5} {m['different']:>9} {m['missing']:>7} {m['failed']:>6}")
    print(f"prunes {len(stress.prunes)} (failed {summary['prunes']['failed']}); entries read back: {entries['facts']} facts, "
          f"{entries['pickles']} pickles, {len(entries['bad'])} half-written, {entries['temporary']} temporary files left by killed writers")
    print("final runs on the stressed cache: " + ", ".join(f"{k}: {v}" for k, v in final.items()))
    print("OK" if ok else "FAILED")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=2) + "\n")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
