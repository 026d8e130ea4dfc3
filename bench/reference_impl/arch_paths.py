"""The data an "on paper" prediction for another GPU needs, from arch.py and one bench_configs.py run
on the H200: which path each architecture runs at each M of both shapes (its defaults), whether CI
compiles it for that architecture (tests/reference_impl/test_gluon_compile.py), and each path's
measured H200 efficiency at that M (memory roofline fraction = bytes / copy bandwidth / time, and
TFLOP/s), the path timed with the defaults the H200 would run for it.

  python bench/reference_impl/arch_paths.py BENCH_CONFIGS_JSON > reference_impl/arch_paths.json

A predicted time on GPU X at M = max(bytes / X's bandwidth / efficiency, flops / X's rate / (H200
TFLOP/s / H200 dense rate)) is a prediction, not a measurement.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from reference_impl import arch, configs  # noqa: E402
from reference_impl.tune import MODELS, MS  # noqa: E402


def main():
    b = json.load(open(sys.argv[1]))
    bw = b["copy_bw_Bps"]
    out = {"note": __doc__.split("\n\n")[0].replace("\n", " "), "h200_run": {k: b[k] for k in (
        "device", "arch", "sm_count", "copy_bw_Bps", "timing")}, "architectures": {}, "h200_efficiency": {}}
    for cc in arch.COMPILED:
        a = arch.for_capability(cc)
        row = {"paths": list(a.paths()), "decode_tma_ring": a.mma_tma, "bf16_atomics": a.bf16_atomics,
               "compiled_in_ci": True, "path_by_M": {}}
        for m, s in MODELS.items():
            row["path_by_M"][m] = {str(M): configs.default_config(M, s["E"], s["topk"], s["H"], s["I"], a)
                                   .get("path", "dot") for M in MS}
        out["architectures"][a.name] = row
    for r in b["rows"]:
        for key, cfg in r["configs"].items():
            if key not in ("default", "dot"):
                continue
            path = cfg.get("path", "dot")
            ms = r[f"ms_{key}"]
            e = out["h200_efficiency"].setdefault(path, {}).setdefault(r["model"], {})
            e[str(r["M"])] = {"ms": ms, "frac_memory_roofline": r["bytes"] / bw / (ms * 1e-3),
                              "tflops": r["flops"] / (ms * 1e-3) / 1e12, "config": cfg}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
