"""The spec's picture: time per MoE layer against M, as a Mermaid ``xychart-beta`` (GitHub renders it
in the Markdown) and, where matplotlib is importable, a PNG beside the Markdown file.

Every value is read from the context rows section 6's tables print (``reference_kernel.rows`` and,
off the measuring device, ``reference_kernel.on_device.rows``): the chart never computes a number of
its own, so it cannot disagree with the tables. A line needs a value at every M of the x axis (the
chart has no gaps), so the axis holds the M where the floor, the kernel that runs today and recon's
kernel all have one; the M left out are named under the chart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def chart_of(ctx: dict) -> Optional[dict]:
    """{"M": [...], "series": [{"name", "values"}], "left_out": [...], "unit"} or None (no table)."""
    ref = ctx.get("reference_kernel") or {}
    rows = ref.get("rows") or []
    if not ref.get("available") or not rows:
        return None
    od = ref.get("on_device") or {}
    measured_here = bool(od.get("measured"))
    # the prediction for this device: the per-path prediction where the table has one, else the
    # column that assumes the measured fraction of the floor (both are printed in section 6)
    predicted = {r["M"]: r["predicted_layer_ms"] for r in od.get("rows", []) if r.get("prediction") is not None and r.get("predicted_layer_ms") is not None}
    if not predicted and not measured_here:
        predicted = {r["M"]: r["est_device_ms"] for r in rows if r.get("est_device_ms") is not None}
    dev = ref.get("device") or "the measuring device"
    short = (ctx.get("device") or {}).get("short") or "this device"
    cols = [(f"floor on {dev}", {r["M"]: r["roofline_ms"] for r in rows}),
            ("today: the slot kernel (E8M0 scales)", {r["M"]: r["slot_ms"] for r in rows if r.get("slot_ms") is not None}),
            (f"recon's grouped kernel, measured on {dev}", {r["M"]: r["ms"] for r in rows})]
    if not measured_here and predicted:
        cols.append((f"recon's grouped kernel on {short} (prediction)", predicted))
    ms = [r["M"] for r in rows if all(r["M"] in c for _, c in cols)]
    if len(ms) < 2 and len(cols) == 4:  # the prediction covers too few M: the chart goes without it
        cols.pop()
        ms = [r["M"] for r in rows if all(r["M"] in c for _, c in cols)]
    if len(ms) < 2:
        return None
    left_out = [r["M"] for r in rows if r["M"] not in ms]
    return {"M": ms, "unit": "ms per MoE layer", "left_out": left_out,
            "series": [{"name": name, "values": [c[m] for m in ms]} for name, c in cols]}


def mermaid(chart: dict, title: str) -> str:
    """The chart as a Mermaid xychart-beta block body (recon's own text: numbers and fixed words;
    the title is passed through without quotes, which the block could not hold)."""
    top = max(v for s in chart["series"] for v in s["values"])
    lines = ["xychart-beta",
             f'    title "{title.replace(chr(34), "")}"',
             '    x-axis "M (tokens per step)" [' + ", ".join(f'"{m}"' for m in chart["M"]) + "]",
             f'    y-axis "{chart["unit"]}" 0 --> {_ceil(top)}']
    for s in chart["series"]:
        lines.append("    line [" + ", ".join(_num(v) for v in s["values"]) + "]")
    return "\n".join(lines)


def _num(v: float) -> str:
    return repr(float(v)) if not float(v).is_integer() else str(int(v)) if abs(v) < 1e15 else repr(float(v))


def _ceil(v: float) -> str:
    import math

    if v <= 0:
        return "1"
    step = 10 ** math.floor(math.log10(v))
    return _num(math.ceil(v / step) * step)


def write_png(chart: dict, title: str, path: Path) -> Optional[Path]:
    """The same chart as a PNG at ``path`` when matplotlib is importable (optional: recon never
    requires it); returns the path written, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001 - not installed, or a backend that cannot load: no PNG
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    x = list(range(len(chart["M"])))
    for s in chart["series"]:
        ax.plot(x, s["values"], marker="o", label=s["name"])
    ax.set_xticks(x, [str(m) for m in chart["M"]])
    ax.set_yscale("log")  # the slot kernel is 10-60x the others: a log axis keeps every line readable
    ax.set_xlabel("M (tokens per step)")
    ax.set_ylabel(chart["unit"] + " (log scale)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    # no timestamp in the file: the same chart gives the same bytes
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path
