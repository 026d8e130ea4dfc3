"""What the runtime view costs: cold `recon scan` with and without it, and a warm `recon spec`,
side by side in one run on a real SGLang tree.

    python bench/runtime_bench.py [--sglang 0.5.23] [--base REV] [--repeat 2] [--out bench/results/runtime_bench.json]

Rows (medians of --repeat runs, each a fresh process with its own empty cache; the base and this
checkout alternate so the machine's load falls on both alike):
  base cold scan   recon at --base (before the runtime view), empty cache
  view cold scan   this checkout, empty cache (index + graph + checks + the runtime view)
  view warm spec   this checkout, everything cached: `recon spec` end to end
The base checkout is made with `git worktree add` in a temporary folder and run from there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _wheel_tree(cache: Path, version: str) -> None:
    """Reuse the unpacked wheel of the default cache: the cold runs time analysis, not downloads."""
    src = Path(os.environ.get("RECON_CACHE_DIR", Path.home() / ".cache" / "recon")) / "wheels" / version
    if not src.is_dir():
        subprocess.run([sys.executable, "-m", "recon", "index", "--sglang", version], check=True, capture_output=True)
    shutil.copytree(src, cache / "wheels" / version)


def _timed(cmd: list[str], cwd: Path, cache: Path, pythonpath: Path) -> float:
    env = dict(os.environ, RECON_CACHE_DIR=str(cache), PYTHONPATH=str(pythonpath))
    t = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sglang", default="0.5.23")
    ap.add_argument("--base", default="5e61f6c", help="the commit before the runtime view")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "runtime_bench.json"))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="recon-rtbench-"))
    base = work / "base"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), a.base], check=True, capture_output=True)
    scan = [sys.executable, "-m", "recon", "scan", "--sglang", a.sglang, "--format", "json", "-o", os.devnull]
    rows: dict[str, list[float]] = {"base cold scan": [], "view cold scan": [], "view warm spec": []}
    try:
        for i in range(a.repeat):
            for name, root in (("base cold scan", base), ("view cold scan", REPO)):
                cache = work / f"cache-{name.split()[0]}-{i}"
                _wheel_tree(cache, a.sglang)
                rows[name].append(_timed(scan, work, cache, root))
                print(f"{name} #{i + 1}: {rows[name][-1]:.1f} s", flush=True)
            warm_cache = work / f"cache-view-{i}"
            spec = [sys.executable, "-m", "recon", "spec", "--sglang", a.sglang, "-o", os.devnull]
            _timed(spec, work, warm_cache, REPO)  # fills the spec's own entries once
            rows["view warm spec"].append(_timed(spec, work, warm_cache, REPO))
            print(f"view warm spec #{i + 1}: {rows['view warm spec'][-1]:.2f} s", flush=True)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    ratio = med["view cold scan"] / med["base cold scan"]
    print(f"\nSGLang {a.sglang}, median of {a.repeat}")
    print("| step | median s | runs |")
    print("|---|---|---|")
    for k, v in rows.items():
        print(f"| {k} | {med[k]:.2f} | {', '.join(f'{x:.1f}' for x in v)} |")
    print(f"| cold scan, view / base | {ratio:.2f}x | |")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"sglang": a.sglang, "base": a.base, "repeat": a.repeat, "runs": rows, "median": med,
                                       "cold_ratio": ratio}, indent=2) + "\n")


if __name__ == "__main__":
    main()
