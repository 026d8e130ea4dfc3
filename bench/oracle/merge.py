"""One agreement table from several: the rows and SGLang's answers of each input table, releases in
version order (a release in more than one input: the later input's). Run one release at a time
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
        mine = {r["release"] for r in data["rows"]} | {o["release"] for o in data.get("oracle") or []}
        for v in mine:  # a later input replaces a release wholesale
            rows[v], oracle[v] = [], []
        for r in data["rows"]:
            rows[r["release"]].append(r)
        for o in data.get("oracle") or []:
            oracle[o["release"]].append(o)
    for item in a.not_run:
        v, _, why = item.partition("=")
        notes[v] = why
    order = sorted(rows, key=_version)
    cmd = a.command or ("python bench/oracle/merge.py " + " ".join(a.tables) + f" --out {a.out}")
    run.write([r for v in order for r in rows[v]], Path(a.out), cmd, [o for v in order for o in oracle[v]],
              {v: w for v, w in notes.items() if v not in rows or not rows[v]})


if __name__ == "__main__":
    main()
