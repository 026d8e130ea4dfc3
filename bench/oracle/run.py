"""The differential oracle: SGLang's own server-argument resolution beside recon's, per
(release, device, model, flags, field), written as an agreement table.

    RECON_CACHE_DIR=/work/cache-shared python bench/oracle/run.py \
        --releases 0.5.5,0.5.13.post1,0.5.23 --out bench/oracle/AGREEMENT

SGLang runs in the oracle's own virtual environment (see venvs.py and child.py; torch's CPU build,
the release's pinned transformers, the kernel packages it requires stubbed, the device faked from
recon's device profile). recon runs in this process and only parses, as always. Each cell's
fields compare as ``agree``, ``disagree`` (recon decided a different value) or ``undecided``
(recon says it cannot decide the value: a fork or a field decided later); ``missing`` is a field
SGLang resolves that recon's view does not track. A cell SGLang rejects (it raises or exits) is
compared on that alone: recon must refuse it too.

Past the arguments (fields ``oracle_*``, unless ``ORACLE_PROBE=0``): in each cell the child then
builds what SGLang's loader builds from them -- ``ModelConfig``, the quant config from config.json
(``get_quant_config``), the class ``get_quant_method`` returns for a MoE layer and for a linear
layer, and the decode attention backend class the registry's factory constructs -- as far as that
runs on a CPU with the device faked; a step that cannot run is ``probe-not-run`` with SGLang's
error, not compared. recon's side names the same from its runtime view and kernel-map steps.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

import release as rel  # noqa: E402
import venvs  # noqa: E402
import recon_side  # noqa: E402

RELEASES = ["0.5.5", "0.5.6.post2", "0.5.7", "0.5.8.post1", "0.5.9", "0.5.10.post1", "0.5.11",
            "0.5.12.post1", "0.5.13.post1", "0.5.14", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18",
            "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]
DEVICES = ["rtx-pro-6000-server", "h200", "b200"]
FLAG_SETS = {
    "default": [],
    "attn-triton": ["--attention-backend", "triton"],
    "kv-fp8": ["--kv-cache-dtype", "fp8_e4m3"],
    "moe-triton": ["--moe-runner-backend", "triton"],
    "quant-fp8": ["--quantization", "fp8"],
}
# The dispatch-relevant fields compared (where the release has them).
FIELDS = ["moe_runner_backend", "attention_backend", "decode_attention_backend",
          "prefill_attention_backend", "quantization", "kv_cache_dtype", "fp8_gemm_runner_backend",
          "fp4_gemm_runner_backend", "moe_a2a_backend", "speculative_algorithm", "page_size",
          "disable_cuda_graph", "enable_dp_attention", "ep_size"]
# Beyond the arguments (child.py ``probe``): what the loader builds from them -- the quant config
# from config.json, its get_quant_method for a MoE and a linear layer, the attention backend class.
PROBE_FIELDS = ["oracle_quantization", "oracle_quant_config", "oracle_moe_method", "oracle_linear_method",
                "oracle_attention_class"]
# GPU memory as nvidia-smi reports it (MiB); recon's profiles carry no memory size.
MEMORY_MIB = {"h200": 143771, "b200": 183359, "rtx-pro-6000-server": 97887, "h100-sxm": 81559,
              "a100-80gb": 81920, "h20": 97871, "l40s": 46068, "rtx-5090": 32607,
              "rtx-pro-6000-workstation": 97887, "rtx-pro-6000-maxq": 97887}


def device_json(short: str) -> dict:
    from recon.profiles import load_device

    d = load_device(short)
    cuda = getattr(d, "cuda_version", None) or (12, 8)
    return {"name": d.name, "capability": list(d.compute_capability), "sm_count": d.sm_count,
            "memory_mib": MEMORY_MIB.get(short, 81920), "cuda": "%d.%d" % tuple(cuda[:2])}


def oracle(version: str, root: Path, work: Path, device: str, cells: list) -> dict:
    reqs = rel.requirements(rel.metadata(root, version))
    py = venvs.base_python(work)
    ov = venvs.overlay(work, py, rel.transformers_pin(reqs), rel.overlay_requirements(reqs, version))
    job = {"device": device_json(device), "stubs": rel.required_modules(reqs), "stub_dists": rel.stub_distributions(reqs),
           "hide": rel.hidden_modules(reqs), "fields": None, "cells": cells}
    (work / "home").mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([str(py), str(HERE / "child.py")], input=json.dumps(job), capture_output=True,
                          text=True, env=venvs.env_for(work, root, ov), timeout=1800)
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            out[r["id"]] = r
    if not out:
        raise SystemExit(f"oracle for {version} printed nothing: {proc.stderr[-800:]}")
    return out


def compare(sg: dict, rc: dict) -> dict:
    """field -> (verdict, sglang value, recon value, recon source)."""
    if not sg.get("ok") and str(sg.get("error", "")).startswith(("import failed", "no answer", "the cell's process died")):
        # the oracle's own environment failed (not SGLang rejecting the cell): no verdict
        return {"__cell__": ("oracle-failed", sg.get("error"), "", "")}
    if not sg.get("ok"):
        refused = "__error__" in rc
        return {"__cell__": ("agree" if refused else "disagree", sg.get("error"), rc.get("__error__", "accepted"), "")}
    if "__error__" in rc:
        return {"__cell__": ("disagree", "accepted", rc["__error__"], "")}
    out = {}
    probe_errors = sg["fields"].get("oracle_probe_errors") or {}
    for f in FIELDS + PROBE_FIELDS:
        if f not in sg["fields"]:
            continue
        want = sg["fields"][f]
        step = f[len("oracle_"):]
        if f in PROBE_FIELDS and step in probe_errors:
            # that step of SGLang's code could not run here (CPU, faked device): no answer to compare
            out[f] = ("probe-not-run", probe_errors[step], None, "")
            continue
        got = rc.get(f)
        if got is None:
            out[f] = ("missing", want, None, "")
        elif not got["decided"]:
            out[f] = ("undecided", want, got["value"], got["source"])
        else:
            out[f] = ("agree" if _same(want, got["value"]) else "disagree", want, got["value"],
                      f"{got['source']} {got['where']}".strip())
    return out


def _same(want, got) -> bool:
    """SGLang's value (JSON) against recon's, which reads as the value's repr (``'triton'``, ``None``)."""
    return repr(want) == got or (isinstance(want, list) and repr(tuple(want)) == got)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", default=",".join(RELEASES))
    ap.add_argument("--devices", default=",".join(DEVICES))
    ap.add_argument("--models", default="", help="model folder names under bench/oracle/models (default: all)")
    ap.add_argument("--flags", default=",".join(FLAG_SETS))
    ap.add_argument("--out", default=str(HERE / "AGREEMENT"), help="path without suffix: .md and .json are written")
    ap.add_argument("--work", default="", help="the oracle's venvs (default: $RECON_CACHE_DIR/oracle)")
    ap.add_argument("--reuse-oracle", default="", metavar="JSON",
                    help="take SGLang's answers from an earlier table's JSON (same cells) and recompute only recon's: "
                         "SGLang's resolution does not change when recon does")
    a = ap.parse_args()
    from recon.cache import cache_dir
    from recon.target import fetch_wheel

    work = Path(a.work) if a.work else cache_dir() / "oracle"
    models = [m for m in (a.models.split(",") if a.models else sorted(p.name for p in (HERE / "models").iterdir()))]
    reused = _oracle_rows(Path(a.reuse_oracle)) if a.reuse_oracle else None
    rows, raw = [], []
    t0 = time.time()
    cmd = "RECON_CACHE_DIR=... python bench/oracle/run.py " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    for version in a.releases.split(","):
        t_sg = t_rc = 0.0
        t = time.time()
        root = fetch_wheel(version)
        tree = recon_side.load_tree(version)
        t_rc += time.time() - t
        for device in a.devices.split(","):
            cells = [{"id": f"{m}|{fs}", "model_dir": str(HERE / "models" / m), "flags": FLAG_SETS[fs], "env": {}}
                     for m in models for fs in a.flags.split(",")]
            have = reused is not None and any(k[0] == version and k[1] == device for k in reused)
            t = time.time()
            sg = {c["id"]: reused.get((version, device, c["id"]), {"ok": False, "error": "no answer"}) for c in cells} \
                if have else oracle(version, root, work, device, cells)
            t_sg += time.time() - t
            t = time.time()
            for c in cells:
                if have and (version, device, c["id"]) not in reused:
                    continue  # a cell the earlier table does not hold: SGLang's side was not run for it
                raw.append({"release": version, "device": device, "id": c["id"], "answer": sg.get(c["id"])})
                m, fs = c["id"].split("|")
                ans = sg.get(c["id"]) or {}
                probes = any(f in (ans.get("fields") or {}) for f in PROBE_FIELDS)
                rc = recon_side.answers(tree, device, c["model_dir"], c["flags"], {}, probes=probes)
                for field, (verdict, want, got, src) in compare(sg.get(c["id"], {"ok": False, "error": "no answer"}), rc).items():
                    rows.append({"release": version, "device": device, "model": m, "flags": fs, "field": field,
                                 "verdict": verdict, "sglang": want, "recon": got, "recon_source": src})
            t_rc += time.time() - t
        print(f"oracle: {version} done ({time.time() - t0:.0f}s; SGLang's side {t_sg:.0f}s, recon's side {t_rc:.0f}s)",
              file=sys.stderr, flush=True)
        write(rows, Path(a.out), cmd, raw)  # after each release, so a long run can be read while it goes


def _oracle_rows(path: Path) -> dict:
    """(release, device, cell id) -> SGLang's answer, rebuilt from an earlier table's rows."""
    data = load(path)
    if data.get("oracle"):
        return {(o["release"], o["device"], o["id"]): o["answer"] for o in data["oracle"] if o.get("answer")}
    out: dict = {}
    for r in data["rows"]:
        key = (r["release"], r["device"], f"{r['model']}|{r['flags']}")
        got = out.setdefault(key, {"ok": True, "fields": {}})
        if r["field"] == "__cell__":
            if r["sglang"] == "accepted":
                continue
            got.update(ok=False, error=r["sglang"])
        else:
            got["fields"][r["field"]] = r["sglang"]
    return out


# The table's JSON keeps every field SGLang resolved (so a later table can compare a field this one
# does not, without rerunning SGLang), compactly: rows as lists under one column header, and each
# release's SGLang fields that are the same in all its cells written once (``oracle_common``).
COLUMNS = ["release", "device", "model", "flags", "field", "verdict", "sglang", "recon", "recon_source"]


def load(path: Path) -> dict:
    """A table's JSON as {"command", "rows": [dict], "oracle": [{release, device, id, answer}]},
    from either layout (rows as dicts and full answers, or the compact one ``write`` makes)."""
    data = json.loads(path.read_text())
    if data.get("columns"):
        data["rows"] = [dict(zip(data["columns"], r)) for r in data["rows"]]
    common = data.get("oracle_common") or {}
    for o in data.get("oracle") or []:
        ans = o.get("answer")
        if ans and ans.get("ok") and o["release"] in common:
            ans["fields"] = {**common[o["release"]], **ans["fields"]}
    return data


def _compact_oracle(raw: list) -> tuple:
    by_release: dict = defaultdict(list)
    for o in raw:
        if o.get("answer") and o["answer"].get("ok"):
            by_release[o["release"]].append(o["answer"]["fields"])
    common = {}
    for version, answers in by_release.items():
        first = answers[0]
        common[version] = {k: v for k, v in first.items()
                           if all(k in a and a[k] == v for a in answers[1:])}
    out = []
    for o in raw:
        ans = o.get("answer")
        if ans and ans.get("ok") and o["release"] in common:
            shared = common[o["release"]]
            ans = {**ans, "fields": {k: v for k, v in ans["fields"].items() if k not in shared or shared[k] != v}}
        out.append({**o, "answer": ans})
    return common, out


def write(rows: list, out: Path, cmd: str, raw: list = (), notes: dict = None) -> None:
    """``notes``: release -> why the oracle's environment could not run it (shown in the table)."""
    import report

    common, oracle_ = _compact_oracle(list(raw))
    data = {"command": cmd, "columns": COLUMNS, "rows": [[r.get(c) for c in COLUMNS] for r in rows],
            "oracle_common": common, "oracle": oracle_}
    if notes:
        data["not_run"] = notes
    # one row (one oracle answer) a line: small diffs when a table is rerun
    enc = lambda v: json.dumps(v, separators=(",", ":"), default=str)  # noqa: E731
    parts = [f'"{k}":{enc(v)}' for k, v in data.items() if k not in ("rows", "oracle")]
    parts.append('"rows":[\n' + ",\n".join(enc(r) for r in data["rows"]) + "]")
    parts.append('"oracle":[\n' + ",\n".join(enc(o) for o in data["oracle"]) + "]")
    # appended, not with_suffix: `parts/0.5.10.post1` is a name, not a stem and a suffix
    Path(f"{out}.json").write_text("{" + ",\n".join(parts) + "}\n")
    Path(f"{out}.md").write_text(report.markdown(rows, cmd, notes or {}))


if __name__ == "__main__":
    main()
