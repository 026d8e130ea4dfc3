"""What `recon kernels` costs: a warm run end to end (the map read from the cache, the tree's index
and graph too), and building the map itself (in process, tree already loaded, nothing of the map
cached), on real SGLang trees.

    python bench/kernels_bench.py [--repeat 3] [--out bench/results/kernels_bench.json]

Uses the default cache (RECON_CACHE_DIR or ~/.cache/recon): the wheels must be there, and a first
`recon kernels` for each case warms it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CASES = [("0.5.13.post1", "rtx-pro-6000", "DeepSeek-V4-Flash"), ("0.5.23", "rtx-pro-6000", "DeepSeek-V4-Flash"),
         ("0.5.23", "h200", "DeepSeek-V4-Flash")]


def _cmd(v, d, m):
    return [sys.executable, "-m", "recon", "kernels", "--sglang", v, "--device", d, "--model", m]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "kernels_bench.json"))
    a = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from recon.checks import CheckContext
    from recon.kernels.kmap import build_map
    from recon.profiles import load_device, load_model
    from recon.target import from_version
    from recon.tree import load

    rows = []
    for v, d, m in CASES:
        subprocess.run(_cmd(v, d, m), check=True, capture_output=True, cwd=REPO)  # warm the cache
        warm = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            subprocess.run(_cmd(v, d, m), check=True, capture_output=True, cwd=REPO)
            warm.append(time.perf_counter() - t)
        tree = load(from_version(v))
        build = []
        for _ in range(a.repeat):
            ctx = CheckContext(tree, load_device(d), load_model(m))
            t = time.perf_counter()
            build_map(ctx)
            build.append(time.perf_counter() - t)
        rows.append({"sglang": v, "device": d, "model": m, "warm_s": round(statistics.median(warm), 2),
                     "warm_runs_s": [round(x, 2) for x in warm], "map_build_s": round(statistics.median(build), 2)})
        print(rows[-1], flush=True)
    Path(a.out).write_text(json.dumps({"repeat": a.repeat, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
