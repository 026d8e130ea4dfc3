"""Cold and warm `recon spec` / `recon kernels` on one release, two recon trees side by side.

    python bench/scenario_speed.py --before /tmp/base [--after .] [--runs 3] [--release 0.5.23] [--out bench/results/scenario_speed.json]

Each side gets its own fresh cache folder holding only what is fetched, never derived: the
unpacked wheel of the release (copied with its timestamps, so the stamp check passes) and the
shipped-module lists of its kernel wheels (`shipped/`, else a cold run would download a kernel
wheel). Nothing is written into the source cache. Then, per side, alternating before/after at
each step so both see the same load on a shared machine:

- `tree`: `recon index` (the index and graph built from the wheel, nothing cached);
- `spec cold`: `recon spec` (tree cached, every derived product cold: findings, runtime view, map);
- `spec warm` x runs;
- `kernels cold`: `recon kernels` on another scenario (tree cached, its view and map cold);
- `kernels warm` x runs.

Each run is one `python -m recon` process under `/usr/bin/time`: user and system CPU, wall, peak
RSS (the process itself; the write-behind child that stores cache entries after the answer is not
counted, on either side). User CPU is the comparable figure on a shared machine. Both trees are
byte-compiled first (a user's install has bytecode; this machine sets PYTHONDONTWRITEBYTECODE).
The outputs of the two sides are compared byte for byte (cold and warm).
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPEC = ["spec", "--device", "rtx-pro-6000", "--model", "deepseek-v4-flash", "--format", "json"]
KERNELS = ["kernels", "--device", "h200", "--model", "gpt-oss-120b", "--format", "json"]


def _fresh_cache(src: Path, release: str, into: Path) -> Path:
    into.mkdir(parents=True)
    (into / "wheels").mkdir()
    subprocess.run(["cp", "-a", str(src / "wheels" / release), str(into / "wheels" / release)], check=True)
    if (src / "shipped").is_dir():
        subprocess.run(["cp", "-a", str(src / "shipped"), str(into / "shipped")], check=True)
    return into


def _run(side: Path, cache: Path, args: list, out: Path) -> dict:
    """One recon process; its CPU, wall and peak RSS."""
    tf = out.with_suffix(".time")
    env = dict(os.environ, RECON_CACHE_DIR=str(cache), PYTHONPATH=str(side))
    cmd = ["/usr/bin/time", "-o", str(tf), "-f", "%U %S %e %M", sys.executable, "-m", "recon", *args, "-o", str(out)]
    p = subprocess.run(cmd, cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True)
    user, system, wall, rss = tf.read_text().split()[-4:]
    return {"rc": p.returncode, "user": float(user), "sys": float(system), "wall": float(wall), "rss_mb": int(rss) / 1024,
            "stderr": p.stderr[-400:] if p.returncode else ""}


def _index(side: Path, cache: Path, release: str, out: Path) -> dict:
    tf = out.with_suffix(".time")
    env = dict(os.environ, RECON_CACHE_DIR=str(cache), PYTHONPATH=str(side))
    cmd = ["/usr/bin/time", "-o", str(tf), "-f", "%U %S %e %M", sys.executable, "-m", "recon", "index", "--sglang", release]
    p = subprocess.run(cmd, cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True)
    user, system, wall, rss = tf.read_text().split()[-4:]
    return {"rc": p.returncode, "user": float(user), "sys": float(system), "wall": float(wall), "rss_mb": int(rss) / 1024}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, type=Path, help="a tree of the base commit (e.g. `git archive` of it)")
    ap.add_argument("--after", default=REPO, type=Path)
    ap.add_argument("--release", default="0.5.23")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--source-cache", type=Path, default=Path(os.environ.get("RECON_CACHE_DIR") or Path.home() / ".cache/recon"))
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a new temp folder, removed at the end)")
    ap.add_argument("--out", type=Path, default=None, help="write the raw numbers here as JSON")
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="scenario_speed."))
    sides = {"before": a.before.resolve(), "after": a.after.resolve()}
    for side in sides.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(side / "recon")], check=False)
    caches = {name: _fresh_cache(a.source_cache, a.release, work / name / "cache") for name in sides}
    rows: dict = {}

    def step(label: str, fn) -> None:
        for name, side in sides.items():
            r = fn(name, side)
            rows.setdefault(label, {}).setdefault(name, []).append(r)
            print(f"{label:13} {name:6} rc {r['rc']} user {r['user']:7.2f} s  sys {r['sys']:5.2f} s  wall {r['wall']:7.1f} s  "
                  f"rss {r['rss_mb']:6.0f} MB {r.get('stderr', '')}", file=sys.stderr, flush=True)

    rel = ["--sglang", a.release]
    step("tree", lambda n, s: _index(s, caches[n], a.release, work / n / "index.out"))
    step("spec cold", lambda n, s: _run(s, caches[n], SPEC + rel, work / n / "spec_cold.json"))
    for i in range(a.runs):
        step("spec warm", lambda n, s: _run(s, caches[n], SPEC + rel, work / n / f"spec_warm{i}.json"))
    step("kernels cold", lambda n, s: _run(s, caches[n], KERNELS + rel, work / n / "kernels_cold.json"))
    for i in range(a.runs):
        step("kernels warm", lambda n, s: _run(s, caches[n], KERNELS + rel, work / n / f"kernels_warm{i}.json"))

    same = {}
    for what in ("spec_cold", "spec_warm0", "kernels_cold", "kernels_warm0"):
        b, f = work / "before" / f"{what}.json", work / "after" / f"{what}.json"
        same[what] = b.is_file() and f.is_file() and b.read_bytes() == f.read_bytes()

    print(f"\nrelease {a.release}; spec: {' '.join(SPEC[1:5])}; kernels: {' '.join(KERNELS[1:5])}; medians of {a.runs} warm runs")
    print("| run | before user / sys / wall s, RSS MB | after user / sys / wall s, RSS MB | output identical |")
    print("|---|---|---|---|")
    for label, by in rows.items():
        cells = []
        for name in sides:
            rs = by[name]
            med = {k: statistics.median(r[k] for r in rs) for k in ("user", "sys", "wall", "rss_mb")}
            cells.append(f"{med['user']:.2f} / {med['sys']:.2f} / {med['wall']:.1f}, {med['rss_mb']:.0f}")
        key = {"spec cold": "spec_cold", "spec warm": "spec_warm0", "kernels cold": "kernels_cold", "kernels warm": "kernels_warm0"}.get(label)
        print(f"| {label} | {cells[0]} | {cells[1]} | {('yes' if same[key] else 'NO') if key else '-'} |")
    if a.out:
        a.out.write_text(json.dumps({"release": a.release, "runs": rows, "identical": same}, indent=1) + "\n")
    if a.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
