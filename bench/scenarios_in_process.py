"""Several cold specs of one release in one process, the way the test suite builds them, two recon
trees side by side.

    python bench/scenarios_in_process.py --before /tmp/base [--after .] [--release 0.5.5] [--runs 3]
        [--scenarios rtx-pro-6000:dsv4-flash,rtx-pro-6000:gpt-oss-120b,...]

A test session loads a released tree once (tests/scenarios.py) and then builds spec after spec on
it, each for another (device, model): the spec matrix, the cited-lines scans, the rule tests. What
one such scenario costs after the first is what this measures. Each run is one process per side
(`PYTHONPATH` = that side) that loads the tree from the shared cache (index and graph warm, read
only) and builds every scenario's spec in turn with derived data cold: the process hashes recon's
code under a random digest of its own, so no findings, view, map or spec entry is found, and it
writes nothing into the cache (what it derives is kept in memory for the run: a second read of an
entry within the run hits, as it would on disk). Sides alternate run by run so both see the same load on a shared
machine; the table gives medians of per-scenario CPU seconds (user + system of the process, the
figure that holds on a loaded machine) and wall, and whether the two sides' specs (rendered as
JSON) and kernel maps with a prefill step are identical.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT = "rtx-pro-6000:dsv4-flash,rtx-pro-6000:gpt-oss-120b,rtx-pro-6000:qwen3-30b-a3b,h200:dsv4"

# A child's first lines: derived data cold (a random code digest), its entries kept in memory, none
# written to the shared cache. bench/gc_share.py starts its children with them too.
COLD_DERIVED = r"""
import pickle, secrets
import recon.cache, recon.derived as D, recon.runtime.cached, recon.scan
D._DIGEST[(str(D.RECON_DIR), str(D.DATA_DIR))] = secrets.token_bytes(20)  # every derived entry a miss
# derived entries kept in memory instead of on disk: a second read within the run hits, as on disk
_MEM, _real_load = {}, recon.cache.load_pickle
def _save(path, obj):
    _MEM[str(path)] = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
def _load(path):
    b = _MEM.get(str(path))
    return pickle.loads(b) if b is not None else _real_load(path)
recon.cache.save_pickle = recon.scan.save_pickle = recon.runtime.cached.save_pickle = _save
recon.cache.load_pickle = recon.scan.load_pickle = recon.runtime.cached.load_pickle = _load
"""

CHILD = COLD_DERIVED + r"""
import hashlib, json, resource, sys, time
from recon.checks import CheckContext
from recon.kernels.kmap import map_for
from recon.profiles import load_device, load_model
from recon.spec import render, spec_for
from recon.target import from_version
from recon.tree import load

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

t0, c0 = time.time(), cpu()
tree = load(from_version(sys.argv[1]))
rows = [{"scenario": "load", "cpu": cpu() - c0, "wall": time.time() - t0, "sha": ""}]
for sc in sys.argv[2].split(","):
    dev, model = sc.split(":")
    t0, c0 = time.time(), cpu()
    ctx = spec_for(tree, load_device(dev), load_model(model))
    c1, t1 = cpu(), time.time()
    # the map with a prefill step, as the checks read it (from the run's store), compared too
    m = map_for(CheckContext(tree, load_device(dev), load_model(model)), 8192)
    text = render(ctx, "json") + json.dumps(m, sort_keys=True, default=str)
    rows.append({"scenario": sc, "cpu": c1 - c0, "wall": t1 - t0,
                 "sha": hashlib.sha1(text.encode()).hexdigest(), "errors": len(ctx["errors"])})
rows.append({"scenario": "peak RSS MB", "cpu": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "wall": 0, "sha": ""})
print(json.dumps(rows))
"""


def _run(side: Path, release: str, scenarios: str) -> list:
    env = dict(os.environ, PYTHONPATH=str(side), RECON_DIST_MODULES=os.environ.get("RECON_DIST_MODULES", "off"))
    p = subprocess.run([sys.executable, "-c", CHILD, release, scenarios], cwd=tempfile.gettempdir(), env=env,
                       capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{side}: rc {p.returncode}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, type=Path, help="a tree of the base commit (e.g. `git archive` of it)")
    ap.add_argument("--after", default=REPO, type=Path)
    ap.add_argument("--release", default="0.5.5")
    ap.add_argument("--scenarios", default=DEFAULT, help="device:model,... built in this order in one process")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="write the raw numbers here as JSON")
    a = ap.parse_args()
    sides = {"before": a.before.resolve(), "after": a.after.resolve()}
    runs: dict = {name: [] for name in sides}
    for i in range(a.runs):
        for name, side in sides.items():
            rows = _run(side, a.release, a.scenarios)
            runs[name].append(rows)
            print(f"run {i} {name}: " + ", ".join(f"{r['scenario']} {r['cpu']:.1f}" for r in rows), file=sys.stderr, flush=True)

    print(f"\nrelease {a.release}; one process per side and run, derived data cold; medians of {a.runs} runs")
    print("| step | before CPU s (wall s) | after CPU s (wall s) | spec identical |")
    print("|---|---|---|---|")
    labels = [r["scenario"] for r in runs["before"][0]]
    for j, label in enumerate(labels):
        cells = []
        for name in sides:
            cpu = statistics.median(rs[j]["cpu"] for rs in runs[name])
            wall = statistics.median(rs[j]["wall"] for rs in runs[name])
            cells.append(f"{cpu:.0f}" if label == "peak RSS MB" else f"{cpu:.1f} ({wall:.1f})")
        shas = {rs[j]["sha"] for name in sides for rs in runs[name]}
        same = "-" if not runs["before"][0][j]["sha"] else ("yes" if len(shas) == 1 else "NO")
        print(f"| {label} | {cells[0]} | {cells[1]} | {same} |")
    if a.out:
        a.out.write_text(json.dumps({"release": a.release, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
