"""results.json -> results.md (table), results.png (plot), and the tuned
configs under reference_impl/configs/ (run here; the device lacks matplotlib)."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
from reference_impl.configs import CONFIG_DIR, config_file_name  # noqa: E402


def main(path=os.path.join(HERE, "results.json")):
    res = json.load(open(path))
    rows = res["rows"]
    lines = [f"Device: {res['device']}, torch {res['torch']}; copy bandwidth {res['copy_bw_Bps'] / 1e12:.2f} TB/s, "
             f"dense bf16 {res['dense_bf16_tflops']:.0f} TFLOP/s (same run). Timing: {res['timing']}.", "",
             "| model | M | experts touched | roofline ms | ours ms | % roofline | TFLOP/s | % dense bf16 | "
             "slot ms | x slot | bf16 peer ms | x bf16 | err vs ref |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v, d=3: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    for r in rows:
        lines.append(f"| {r['model']} | {r['M']} | {r['uniq']} | {f(r['roofline_ms'], 4)} | {f(r['ms'], 4)} | "
                     f"{100 * r['frac_roofline']:.1f} | {r['tflops']:.1f} | {100 * r['frac_dense']:.1f} | "
                     f"{f(r.get('slot_ms'))} | {f(r.get('x_slot'), 1)} | {f(r.get('bf16_ms'))} | "
                     f"{f(r.get('x_bf16'), 2)} | {f(r.get('err_vs_reference'), 4)} |")
    open(os.path.join(HERE, "results.md"), "w").write("\n".join(lines) + "\n")
    by_model = {}
    for r in rows:
        by_model.setdefault((r["model"], r["E"], r["I"]), {})[str(r["M"])] = r["config"]
    for (m, E, I), table in by_model.items():
        with open(os.path.join(CONFIG_DIR, config_file_name(E, I, res["device"])), "w") as fh:
            json.dump(table, fh, indent=1)
            fh.write("\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, (m, E, I) in zip(axes, by_model):
        rs = [r for r in rows if r["model"] == m]
        Ms = [r["M"] for r in rs]
        ax.loglog(Ms, [r["ms"] for r in rs], "o-", label="grouped (ours)")
        ax.loglog(Ms, [r["roofline_ms"] for r in rs], "k--", label="memory roofline")
        ax.loglog(Ms, [r.get("bf16_ms") for r in rs], "s-", label="bf16 dequant + _grouped_mm")
        sl = [(r["M"], r["slot_ms"]) for r in rs if r.get("slot_ms")]
        ax.loglog([a for a, _ in sl], [b for _, b in sl], "x-", label="SGLang 0.5.13.post1 slot path")
        ax.set_title(f"{m} (E={E}, I={I})")
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("ms (CUDA graph replay, median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"MXFP4 MoE forward on {res['device']}")
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "results.png"), dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:])
