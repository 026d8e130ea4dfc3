"""One agreement table from several: the rows and SGLang's answers of each input table, releases in
version order (a cell -- release, device, model, flags -- in more than one input: the later
input's rows and answer for it, so a rerun of some models of a release replaces only those). Run one release at a time
with ``run.py --releases X --out parts/X`` (CPU is scarce), then merge:

    python bench/oracle/merge.py bench/oracle/AGREEMENT.json parts/*.json --out bench/oracle/AGREEMENT

Nothing is recomputed: each input's recon rows are those its run made (rerun ``run.py
--reuse-oracle`` when recon changed). A release the oracle's environment could not run is kept with
the reason (``--not-run VERSION=why``, repeatable), which the table shows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402
from report import _version  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tables", nargs="+", help="table JSONs (run.py's --out with .json)")
    ap.add_argument("--out", required=True, help="path without suffix")
    ap.add_argument("--command", default="", help="how the inputs were made (written into the table)")
    ap.add_argument("--not-run", action="append", default=[], metavar="VERSION=WHY")
    a = ap.parse_args()
    rows: dict = {}
    oracle: dict = {}
    notes: dict = {}
    cmds = []
    for path in a.tables:
        data = run.load(Path(path))
        cmds.append(data.get("command", ""))
        notes.update(data.get("not_run") or {})
        cells: dict = {}
        for r in data["rows"]:
            cells.setdefault((r["release"], r["device"], f"{r['model']}|{r['flags']}"), []).append(r)
        answers = {(o["release"], o["device"], o["id"]): o for o in data.get("oracle") or []}
        for key in set(cells) | set(answers):  # a later input replaces a cell wholesale
            rows[key] = cells.get(key, [])
            if key in answers:
                oracle[key] = answers[key]
            else:
                oracle.pop(key, None)
    for item in a.not_run:
        v, _, why = item.partition("=")
        notes[v] = why
    order = sorted(rows, key=lambda k: _version(k[0]))  # stable: a release's cells keep their order
    have = {k[0] for k, rs in rows.items() if any(r["verdict"] != "oracle-failed" for r in rs)}
    cmd = a.command or ("python bench/oracle/merge.py " + " ".join(a.tables) + f" --out {a.out}")
    run.write([r for k in order for r in rows[k]], Path(a.out), cmd, [oracle[k] for k in order if k in oracle],
              {v: w for v, w in notes.items() if v not in have})


if __name__ == "__main__":
    main()
