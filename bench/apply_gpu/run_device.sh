#!/bin/bash
# One device call. The patched files are made HERE first (recon is not on the device):
#   python bench/apply_gpu/make_tree.py        # -> .apply_gpu/ (git-ignored), carried with .whl/
# then on the device: bash bench/apply_gpu/run_device.sh   (writes under $OUT)
set -o pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
cp .apply_gpu/apply.diff .apply_gpu/manifest.json "$OUT"/ 2>/dev/null
timeout 540 python3 bench/apply_gpu/check_patched_method.py --tree .apply_gpu/tree --manifest .apply_gpu/manifest.json --out "$OUT" 2>&1 | tee "$OUT/check_log.txt"
