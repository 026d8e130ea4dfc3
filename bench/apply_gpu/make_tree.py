"""Build, here (recon installed), the patched files the device check needs: run ``recon apply
--no-git`` on a copy of the SGLang 0.5.13.post1 wheel tree and keep only what it wrote.

    python bench/apply_gpu/make_tree.py [--out .apply_gpu]

The device has no recon and no network: it gets ``.apply_gpu/tree/`` (the patched dispatch file
and the grouped kernel package, at their SGLang paths) plus ``manifest.json`` saying where the
swap-in point is. ``.apply_gpu/`` is git-ignored (``.git/info/exclude``) and carried to the device.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from recon.apply import run
from recon.target import from_version

SEED = "0.5.13.post1"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".apply_gpu")
    a = ap.parse_args()
    out = Path(a.out)
    src = Path(from_version(SEED).source.root)
    with tempfile.TemporaryDirectory() as td:
        work = Path(td) / "sglang-tree"
        shutil.copytree(src / "sglang", work / "sglang")
        res = run(work, no_git=True)
        p = res.plan
        shutil.rmtree(out / "tree", ignore_errors=True)
        for rel in p.files:
            dst = out / "tree" / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(work / rel, dst)
        sp = p.swap
        manifest = {"sglang": SEED, "dispatch_file": sp.path, "method": sp.method_scope, "call_line": sp.call_line,
                    "host": sp.host, "kernel": sp.kernel, "bundle_dir": sp.bundle_dir, "bundle_module": sp.bundle_module,
                    "files": sorted(p.files), "log": res.lines}
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        (out / "apply.diff").write_text(p.diff())
    print("\n".join(res.lines))
    print(f"wrote {len(p.files)} files under {out}/tree")


if __name__ == "__main__":
    main()
