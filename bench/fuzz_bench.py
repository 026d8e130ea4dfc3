"""The long fuzz run: recon's per-file analyses on generated and mutated sources, with a table.

    python bench/fuzz_bench.py [--examples 300] [--seed 0] [--json bench/results/fuzz.json]

Three sources (see ``tests/fuzzkit.py`` for the stages and what counts as a bug):

- ``grammar``: syntactically valid Python generated from the grammar (hypothesmith);
- ``template``: a gate, a Triton kernel and its launcher whose holes take generated expressions
  over the names and probes the evaluators know (what random programs almost never reach);
- ``mutated``: real SGLang files (0.5.5, 0.5.13.post1, 0.5.23 wheels, fetched and cached as the
  tests do) with a few random edits each.

Every example runs every stage; failures are collected (not raised) so that one run finds all
of them. Reproducers: generated sources are written beside the JSON; a mutated SGLang file is
recorded as (version, path, edits) only, never as its code.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import fuzzkit  # noqa: E402

VERSIONS = ("0.5.5", "0.5.13.post1", "0.5.23")


def _key(msg: str) -> str:
    """A bug's identity: its message without numbers and quoted text (one bug, many inputs)."""
    return re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", msg.splitlines()[0])[:160]


class Run:
    def __init__(self, name: str, out_dir: Path):
        self.name, self.out_dir = name, out_dir
        self.times: dict[str, list[float]] = {}
        self.examples = 0
        self.diagnosed = 0
        self.bugs: dict[str, dict] = {}

    def one(self, relpath: str, data: bytes, repro: dict) -> None:
        self.examples += 1
        try:
            times = fuzzkit.run_all(relpath, data)
        except fuzzkit.Bug as e:
            k = _key(str(e))
            b = self.bugs.setdefault(k, {"message": str(e)[:400], "count": 0, "repro": None})
            b["count"] += 1
            if b["repro"] is None or len(data) < b.get("size", 1 << 60):
                b["size"] = len(data)
                if "source" in repro:
                    self.out_dir.mkdir(parents=True, exist_ok=True)
                    f = self.out_dir / f"{self.name}-{len(self.bugs)}.py.txt"
                    f.write_bytes(data)
                    b["repro"] = {"file": f.name}
                else:
                    b["repro"] = repro
            return
        from recon.indexer import index_plain

        if index_plain(relpath, data, "")[5]:
            self.diagnosed += 1
        for stage, s in times.items():
            self.times.setdefault(stage, []).append(s)

    def row(self) -> dict:
        stages = {}
        for stage, ts in sorted(self.times.items()):
            ts = sorted(ts)
            stages[stage] = {
                "median_ms": round(statistics.median(ts) * 1000, 2),
                "p99_ms": round(ts[min(len(ts) - 1, int(len(ts) * 0.99))] * 1000, 2),
                "max_ms": round(ts[-1] * 1000, 2),
            }
        return {"source": self.name, "examples": self.examples, "diagnostics": self.diagnosed,
                "bugs": [{k: v for k, v in b.items() if k != "size"} for b in self.bugs.values()], "stages": stages}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=300, help="examples per source")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "fuzz.json")
    ap.add_argument("--only", choices=["grammar", "template", "mutated"], action="append")
    args = ap.parse_args()

    import hypothesmith
    from hypothesis import given, seed
    from hypothesis import strategies as st

    from recon.target import fetch_wheel

    roots = [fetch_wheel(v) for v in VERSIONS]  # before the private cache: the wheels stay shared
    fuzzkit.quiet_env()
    out_dir = args.json.parent / "fuzz_repro"  # made only when a generated source fails
    cfg = fuzzkit.fuzz_settings(max_examples=args.examples, derandomize=False)
    runs = []
    t0 = time.perf_counter()

    if not args.only or "grammar" in args.only:
        r = Run("grammar", out_dir)

        @seed(args.seed)
        @cfg
        @given(hypothesmith.from_grammar())
        def grammar(src):
            r.one("sglang/srt/layers/fuzz_gen.py", src.encode("utf-8", "surrogatepass"), {"source": True})

        grammar()
        runs.append(r)

    if not args.only or "template" in args.only:
        r = Run("template", out_dir)

        @seed(args.seed)
        @cfg
        @given(st.lists(fuzzkit.expressions(), min_size=fuzzkit.HOLES, max_size=fuzzkit.HOLES))
        def template(exprs):
            r.one("sglang/srt/layers/fuzz_tpl.py", fuzzkit.templated(exprs).encode(), {"source": True})

        template()
        runs.append(r)

    if not args.only or "mutated" in args.only:
        r = Run("mutated", out_dir)
        files = fuzzkit.real_files(roots, limit=60, seed=args.seed)

        @seed(args.seed)
        @cfg
        @given(st.integers(0, len(files) - 1), st.integers(0, len(files) - 1), fuzzkit.mutations())
        def mutated(i, j, edits):
            version, path, data = files[i]
            r.one(path, fuzzkit.mutate(data, edits, files[j][2]),
                  {"version": version, "path": path, "splice_from": list(files[j][:2]), "edits": edits})

        mutated()
        runs.append(r)

    rows = [r.row() for r in runs]
    wall = time.perf_counter() - t0
    print(f"{'source':10} {'examples':>8} {'diagnostics':>11} {'bugs':>5}  stage: median / p99 / max ms")
    for row in rows:
        st_txt = "  ".join(f"{k} {v['median_ms']}/{v['p99_ms']}/{v['max_ms']}" for k, v in row["stages"].items())
        print(f"{row['source']:10} {row['examples']:>8} {row['diagnostics']:>11} {len(row['bugs']):>5}  {st_txt}")
        for b in row["bugs"]:
            print(f"    bug x{b['count']}: {b['message'][:200]}")
    print(f"wall {wall:.0f} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"seed": args.seed, "examples_per_source": args.examples, "wall_s": round(wall, 1),
                                     "hang_guard_s": fuzzkit.HANG_S, "runs": rows}, indent=2, default=str) + "\n")
    return 1 if any(row["bugs"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
