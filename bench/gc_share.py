"""How much of a cold scenario's CPU goes to Python's cyclic garbage collector.

    python bench/gc_share.py [--release 0.5.5] [--scenarios rtx-pro-6000:gpt-oss-120b,h200:dsv4]

One child process per mode loads the release's tree from the cache (index and graph warm) and
builds each scenario's spec with derived data cold (a random code digest; entries kept in memory,
nothing written), with the collector on (Python's default) and off (as `recon`'s console entry
runs a command). Prints CPU seconds, seconds inside collections per generation, and peak memory.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

from scenarios_in_process import COLD_DERIVED  # bench/ is the script's folder

CHILD = COLD_DERIVED + r"""
import gc, json, resource, sys, time
spent, count, start = [0.0, 0.0, 0.0], [0, 0, 0], [0.0]
def clock(phase, info):
    if phase == "start":
        start[0] = time.perf_counter()
    else:
        spent[info["generation"]] += time.perf_counter() - start[0]
        count[info["generation"]] += 1
gc.callbacks.append(clock)
from recon.profiles import load_device, load_model
from recon.spec import spec_for
from recon.target import from_version
from recon.tree import load
release, mode, scenarios = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
tree = load(from_version(release))
tree.graph
c0 = time.process_time()
if mode == "off":
    gc.disable()
for s in scenarios:
    dev, model = s.split(":")
    spec_for(tree, load_device(dev), load_model(model))
print(json.dumps({"mode": mode, "cpu": time.process_time() - c0, "gc_s": spent, "collections": count,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--release", default="0.5.5")
    ap.add_argument("--scenarios", default="rtx-pro-6000:gpt-oss-120b,h200:dsv4")
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args()
    print(f"release {a.release}, scenarios {a.scenarios}, derived data cold, modes alternating")
    print("| collector | CPU s | in collections s (gen 0 / 1 / 2) | collections (gen 0 / 1 / 2) | peak MB |\n|---|---|---|---|---|")
    for _ in range(a.runs):
        for mode in ("on", "off"):
            out = subprocess.run([sys.executable, "-c", CHILD, a.release, mode, a.scenarios],
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"| {mode} | {r['cpu']:.1f} | {' / '.join(f'{x:.1f}' for x in r['gc_s'])} | "
                  f"{' / '.join(map(str, r['collections']))} | {r['peak_mb']:.0f} |")


if __name__ == "__main__":
    main()
