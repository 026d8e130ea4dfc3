"""Where the test suite's time and memory went, from a run with RECON_TEST_PROFILE=<folder>
(tests/conftest.py writes one JSON line per test and process).

    RECON_TEST_PROFILE=/tmp/prof python -m pytest -q -n 2 --dist loadscope
    python bench/suite_profile.py /tmp/prof [--before /tmp/prof-old] [--top 25]

Prints, per process, the CPU (its own and its children's) and the peak resident memory, then the
files and tests that took the most CPU and the tests after which resident memory grew the most.
With --before, the files side by side with the other run.
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path


def load(folder: str) -> list[dict]:
    rows = []
    for p in sorted(q for q in Path(folder).glob("*.jsonl") if not q.name.startswith("builds-")):  # builds-*: conftest's build log
        rows += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return rows


def _cpu(r: dict) -> float:
    return r["cpu"] + r["child_cpu"]


def by_file(rows: list[dict]) -> dict[str, float]:
    out: dict[str, float] = collections.Counter()
    for r in rows:
        out[r["test"].split("::")[0]] += _cpu(r)
    return out


def growth(rows: list[dict]) -> list[tuple[float, dict]]:
    """(MB resident memory grew during the test, row), per process in the order it ran."""
    out, last = [], {}
    for r in rows:
        prev = last.get(r["worker"])
        if prev is not None:
            out.append((r["rss_mb"] - prev, r))
        last[r["worker"]] = r["rss_mb"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--before", help="another run's folder, to compare file by file")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    rows = load(a.folder)
    workers = sorted({r["worker"] for r in rows})
    print("| process | tests | wall s | CPU s (self + children) | peak RSS MB |\n|---|---|---|---|---|")
    for w in workers:
        mine = [r for r in rows if r["worker"] == w]
        print(f"| {w} | {len(mine)} | {sum(r['wall'] for r in mine):.0f} | "
              f"{sum(_cpu(r) for r in mine):.0f} | {max(r['peak_mb'] for r in mine):.0f} |")
    total = sum(_cpu(r) for r in rows)
    print(f"\nall: {len(rows)} tests, {total:.0f} CPU s ({total / 60:.1f} CPU min)\n")
    files = by_file(rows)
    before = by_file(load(a.before)) if a.before else None
    head = "| file | CPU s | share |" + (" before CPU s |" if before else "")
    print(head)
    print("|---|---|---|" + ("---|" if before else ""))
    for f, c in sorted(files.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"| {f} | {c:.0f} | {100 * c / total:.1f}% |" + (f" {before.get(f, 0):.0f} |" if before else ""))
    print("\n| test | CPU s | of which children | wall s |\n|---|---|---|---|")
    for r in sorted(rows, key=lambda r: -_cpu(r))[:a.top]:
        print(f"| {r['test']} | {_cpu(r):.0f} | {r['child_cpu']:.0f} | {r['wall']:.0f} |")
    print("\n| test (process) | RSS grew MB | RSS after MB |\n|---|---|---|")
    for d, r in sorted(growth(rows), key=lambda x: -x[0])[:a.top]:
        print(f"| {r['test']} ({r['worker']}) | {d:.0f} | {r['rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
