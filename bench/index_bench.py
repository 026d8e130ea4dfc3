"""Index + graph speed and memory on a real SGLang tree, measured side by side in one run.

    python bench/index_bench.py [--sglang 0.5.23] [--repeat 3] [--out bench/results/index_bench.json]

Rows (each the median of --repeat runs, each run in a fresh process):
  ast.parse      stdlib ast.parse of every .py file, one process (the bar a cold run must meet)
  recon cold     empty cache: list, hash, extract (all cores), build the graph, write the cache
  recon warm     nothing changed: stat every file, load the cached graph
  recon 1 edit   one file's body edited: re-extract it and patch the graph
  pyan3 layers   pyan3's call graph of sglang/srt/layers of --peer-sglang (peer figure), if installed
  recon layers   recon, cold, on the same files
Peak memory is the largest resident set of the process and its workers.
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

_RECON_RUN = r"""
import json, resource, sys, time
t = time.perf_counter()
from recon.target import from_path
from recon.tree import load
from recon.sources import DirSource
target = from_path(sys.argv[1])
if len(sys.argv) > 2:  # limit to one sub-folder (the pyan3 comparison)
    target.source = DirSource(target.source.root, (sys.argv[2],))
    target.extras["sub"] = sys.argv[2]
tree = load(target)
wall = time.perf_counter() - t
rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"wall": wall, "rss_mb": rss / 1024, "graph": tree.timings["graph"], "files": tree.index.stats["files"],
                  "index_s": tree.timings["index_s"], "graph_s": tree.timings["graph_s"],
                  "extracted": tree.index.stats["extracted"], "nodes": tree.graph.number_of_nodes(), "edges": tree.graph.number_of_edges()}))
"""

_AST_RUN = r"""
import ast, json, os, resource, sys, time
t = time.perf_counter()
n = 0
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        if f.endswith(".py"):
            with open(os.path.join(d, f), "rb") as fh:
                ast.parse(fh.read())
            n += 1
print(json.dumps({"wall": time.perf_counter() - t, "files": n, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _run(code: str, args: list[str], env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark step failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fetch(version: str, cache: Path) -> Path:
    env = dict(os.environ, RECON_CACHE_DIR=str(cache))
    code = "import sys; from recon.target import fetch_wheel; print(fetch_wheel(sys.argv[1]))"
    out = subprocess.run([sys.executable, "-c", code, version], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    return Path(out.stdout.strip())


def _pyan3_exe() -> str | None:
    """pyan3 from PATH, else beside this interpreter (a venv run without activation)."""
    beside = Path(sys.executable).parent / "pyan3"
    return shutil.which("pyan3") or (str(beside) if beside.exists() else None)


def _pyan3(files_root: Path) -> dict | None:
    exe = _pyan3_exe()
    if exe is None:
        return None
    files = [str(p) for p in sorted(files_root.rglob("*.py"))]
    t = time.perf_counter()
    proc = subprocess.run([exe, *files, "--uses", "--no-defines", "--dot"], capture_output=True, text=True)
    wall = time.perf_counter() - t
    return {"wall": wall, "files": len(files), "ok": proc.returncode == 0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sglang", default="0.5.23")
    ap.add_argument("--peer-sglang", default="0.5.13.post1")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "index_bench.json"))
    a = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="recon-bench-"))
    fetch_cache = work / "fetch"
    src = _fetch(a.sglang, fetch_cache)
    tree_dir = work / "tree"
    shutil.copytree(src, tree_dir)
    peer_src = _fetch(a.peer_sglang, fetch_cache)
    rows: dict[str, list[dict]] = {k: [] for k in ("ast.parse", "recon cold", "recon warm", "recon 1 edit", "pyan3 layers", "recon layers")}
    # a file every release has (fp8_kernel.py moved in newer ones): editing must not add a file
    edit_file = tree_dir / "sglang" / "srt" / "utils" / "common.py"
    assert edit_file.is_file(), edit_file
    for i in range(a.repeat):
        cache = work / f"cache{i}"
        env = dict(os.environ, RECON_CACHE_DIR=str(cache))
        rows["ast.parse"].append(_run(_AST_RUN, [str(tree_dir / "sglang")], env))
        rows["recon cold"].append(_run(_RECON_RUN, [str(tree_dir)], env))
        rows["recon warm"].append(_run(_RECON_RUN, [str(tree_dir)], env))
        with open(edit_file, "a", encoding="utf-8") as f:
            f.write(f"\n# bench edit {i}\n")
        rows["recon 1 edit"].append(_run(_RECON_RUN, [str(tree_dir)], env))
        peer = _pyan3(peer_src / "sglang" / "srt" / "layers")
        if peer:
            rows["pyan3 layers"].append(peer)
        rows["recon layers"].append(_run(_RECON_RUN, [str(peer_src), "sglang/srt/layers"], dict(env, RECON_CACHE_DIR=str(work / f"layers{i}"))))
        shutil.rmtree(cache, ignore_errors=True)

    base = statistics.median(r["wall"] for r in rows["ast.parse"])
    table = []
    for name, rs in rows.items():
        if not rs:
            continue
        wall = statistics.median(r["wall"] for r in rs)
        rss = max(r.get("rss_mb", 0) for r in rs)
        table.append({"step": name, "median_s": round(wall, 3), "vs_ast_parse": round(wall / base, 2), "peak_rss_mb": round(rss), "runs": len(rs), "files": rs[0].get("files"), "graph": rs[0].get("graph", "")})
    result = {
        "sglang": a.sglang,
        "peer_sglang": a.peer_sglang,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "table": table,
        "raw": rows,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"SGLang {a.sglang}, {os.cpu_count()} CPUs, median of {a.repeat} (peer rows on {a.peer_sglang} sglang/srt/layers)")
    print(f"{'step':<14} {'median s':>9} {'x ast.parse':>12} {'peak MB':>8} {'files':>6} graph")
    for r in table:
        print(f"{r['step']:<14} {r['median_s']:>9.2f} {r['vs_ast_parse']:>12.2f} {r['peak_rss_mb']:>8} {r['files'] or '':>6} {r['graph']}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
