"""The benchmark's results -> results.md (table), results.png (plot), and the tuned configs under
reference_impl/configs/ (run here; the device lacks matplotlib).

The results of bench_moe.py live in one place, recon/data/anchors/h200_grouped_reference_impl.json,
which recon's spec reads (copy a device run's $OUT/results.json there, then run this)."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
from reference_impl.configs import CONFIG_DIR, config_file_name  # noqa: E402


# (header, cell) columns; a column shows only where some row has its key
def _f(v, d=3):
    return "-" if v is None else f"{v:.{d}f}"


COLUMNS = [
    ("run", "run", lambda r: str(r.get("run", "-"))), ("model", None, lambda r: r["model"]),
    ("M", None, lambda r: str(r["M"])),
    ("experts touched", None, lambda r: str(r["uniq"])), ("roofline ms", None, lambda r: _f(r["roofline_ms"], 4)),
    ("ours ms", None, lambda r: _f(r.get("ms"), 4)),
    ("% roofline", None, lambda r: _f(100 * r["frac_roofline"] if "frac_roofline" in r else None, 1)),
    ("TFLOP/s", None, lambda r: _f(r.get("tflops"), 1)),
    ("% dense bf16", None, lambda r: _f(100 * r["frac_dense"] if "frac_dense" in r else None, 1)),
    ("FlashInfer default-tactic ms", "fi_default_ms", lambda r: _f(r.get("fi_default_ms"), 4)),
    ("default / ours", "fi_default_ms", lambda r: _f(r.get("x_fi_default"), 2)),
    ("FlashInfer autotuned ms", "fi_default_ms", lambda r: _f(r.get("fi_ms"), 4)),
    ("autotuned / ours", "fi_default_ms", lambda r: _f(r.get("x_fi"), 2)),
    ("FlashInfer % roofline (best)", "fi_default_ms",
     lambda r: _f(100 * r["fi_frac_roofline"] if "fi_frac_roofline" in r else None, 1)),
    ("slot ms", "slot_ms", lambda r: _f(r.get("slot_ms"))), ("x slot", "slot_ms", lambda r: _f(r.get("x_slot"), 1)),
    ("bf16 peer ms", "bf16_ms", lambda r: _f(r.get("bf16_ms"))), ("x bf16", "bf16_ms", lambda r: _f(r.get("x_bf16"), 2)),
    ("err vs ref", None, lambda r: _f(r.get("err_vs_reference"), 4)),
    ("FlashInfer err vs ref", "fi_err_vs_reference", lambda r: _f(r.get("fi_err_vs_reference"), 4)),
]


def table(res):
    rows = res["rows"]
    cols = [c for c in COLUMNS if c[1] is None or any(c[1] in r for r in rows)]
    head = (f"Device: {res['device']}, torch {res['torch']}; copy bandwidth {res['copy_bw_Bps'] / 1e12:.2f} TB/s, "
            f"dense bf16 {res['dense_bf16_tflops']:.0f} TFLOP/s (same run). Timing: {res['timing']}.")
    if res.get("peer"):
        head += f" Peer: {res['peer']}, FlashInfer {res.get('flashinfer', '?')}."
        for run in res.get("runs", []):
            head += (f" Run {run['run']} ({run['rows']}): copy {run['copy_bw_Bps'] / 1e12:.2f} TB/s at start, "
                     f"{run['copy_bw_end_Bps'] / 1e12:.2f} at end; autotune {run.get('autotune', '')}.")
    lines = [head, "", "| " + " | ".join(c[0] for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(c[2](r) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def anchor(res, out):
    """The FlashInfer comparison as recon's data anchor: per shape and M, both kernels' medians
    (us), the ratio, the roofline fractions, with the copy bandwidth of the same run."""
    us = lambda v: None if v is None else round(v * 1e3, 2)  # noqa: E731
    shapes = {}
    for r in res["rows"]:
        sh = shapes.setdefault(r["model"], {"E": r["E"], "H": r["H"], "I": r["I"], "topk": r["topk"],
                                            "points": [], "autotuned_points": []})
        tuned = bool(r.get("fi_autotuned"))
        pt = {"M": r["M"], "run": r.get("run"), "experts_touched": r["uniq"], "bytes": r["bytes"],
              "roofline_us": us(r["roofline_ms"]), "reference_impl_us": us(r.get("ms")),
              "flashinfer_default_tactic_us": us(r.get("fi_default_ms")),
              "flashinfer_default_over_reference_impl": None if r.get("x_fi_default") is None else round(r["x_fi_default"], 3),
              "reference_impl_frac_roofline": None if "frac_roofline" not in r else round(r["frac_roofline"], 4),
              "err_reference_impl": r.get("err_vs_reference"), "err_flashinfer": r.get("fi_err_vs_reference")}
        if tuned:
            pt.update(flashinfer_autotuned_us=us(r.get("fi_ms")),
                      flashinfer_autotuned_over_reference_impl=None if r.get("x_fi") is None else round(r["x_fi"], 3))
        pt["flashinfer_frac_roofline"] = None if "fi_frac_roofline" not in r else round(r["fi_frac_roofline"], 4)
        sh["autotuned_points" if tuned else "points"].append(pt)
    doc = {"schema": "recon.anchor.flashinfer_cutlass_moe/1",
           "what": "MXFP4 MoE forward, reference_impl.grouped_mxfp4_moe vs FlashInfer's CUTLASS fused MoE "
                   "(W4A16: bf16 activations x MXFP4 weights, sm_90; what SGLang >= 0.5.22 runs through "
                   "Mxfp4FlashinferCutlassMoEMethod), same weights, one process, measured side by side",
           "device": res["device"], "torch": res["torch"], "flashinfer": res.get("flashinfer"),
           "timing": res["timing"], "runs": res.get("runs"),
           "copy_bw_Bps": res["copy_bw_Bps"], "copy_bw_end_Bps": res.get("copy_bw_end_Bps"),
           "dense_bf16_tflops": res["dense_bf16_tflops"],
           "roofline": "experts touched x their weight + scale bytes / the run's copy bandwidth (bytes read + written per s)",
           "points": "the sweep (runs 1-2): FlashInfer at its default tactic (its autotuner could not profile there)",
           "autotuned_points": "run 3: FlashInfer autotuned, reference_impl timed again in the same run",
           "source": "bench/reference_impl/results_flashinfer.json (bench_flashinfer.py)", "shapes": shapes}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


RESULTS = os.path.join(ROOT, "recon", "data", "anchors", "h200_grouped_reference_impl.json")


def main(path=RESULTS, anchor_out=None):
    """The grouped kernel's results -> results.md / results.png here (+ the tuned configs); any
    other results_X.json (bench_flashinfer.py's results_flashinfer.json) -> results_X.md / .png."""
    res = json.load(open(path))
    rows = res["rows"]
    stem = os.path.join(HERE, "results") if os.path.abspath(path) == RESULTS else os.path.splitext(os.path.abspath(path))[0]
    open(stem + ".md", "w").write(table(res))
    if anchor_out:
        anchor(res, anchor_out)
    by_model = {}
    for r in rows:
        by_model.setdefault((r["model"], r["E"], r["I"]), {})[str(r["M"])] = r.get("config")
    for (m, E, I), cfgs in by_model.items():
        if res.get("kind"):  # a peer comparison run: the shipped configs stay as they are
            break
        with open(os.path.join(CONFIG_DIR, config_file_name(E, I, res["device"])), "w") as fh:
            json.dump(cfgs, fh, indent=1)
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
        ours_rs = [r for r in rs if not r.get("fi_autotuned")]
        Ms = [r["M"] for r in ours_rs]
        ax.loglog(Ms, [r.get("ms") for r in ours_rs], "o-", label="grouped (ours)")
        ax.loglog(Ms, [r["roofline_ms"] for r in ours_rs], "k--", label="memory roofline")
        if any(r.get("bf16_ms") for r in ours_rs):
            ax.loglog(Ms, [r.get("bf16_ms") for r in ours_rs], "s-", label="bf16 dequant + _grouped_mm")
        sl = [(r["M"], r["slot_ms"]) for r in rs if r.get("slot_ms")]
        if sl:
            ax.loglog([a for a, _ in sl], [b for _, b in sl], "x-", label="SGLang 0.5.13.post1 slot path")
        fi = [(r["M"], r["fi_default_ms"]) for r in rs if r.get("fi_default_ms") and not r.get("fi_autotuned")]
        if fi:
            ax.loglog([a for a, _ in fi], [b for _, b in fi], "d-",
                      label=f"FlashInfer {res.get('flashinfer', '')} CUTLASS W4A16, default tactic")
        ft = [(r["M"], r["fi_ms"]) for r in rs if r.get("fi_autotuned") and r.get("fi_ms")]
        if ft:
            ax.loglog([a for a, _ in ft], [b for _, b in ft], "D", mfc="none", ms=8,
                      label="FlashInfer autotuned (run 3)")
        ax.set_title(f"{m} (E={E}, I={I})")
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("ms (CUDA graph replay, median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"MXFP4 MoE forward on {res['device']}")
    fig.tight_layout()
    fig.savefig(stem + ".png", dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:])
