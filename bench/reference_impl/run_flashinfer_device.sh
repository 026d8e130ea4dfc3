#!/bin/bash
# One device call: bench_flashinfer.py with FlashInfer carried as prebuilt modules (the device has no
# network and FlashInfer's stock JIT of fused_moe_90 takes far more than a call). Staged here first:
#   .cache/fib/fi.tar.xz            flashinfer-python 0.7.2 without data/{csrc,cutlass,cccl,spdlog}
#   .cache/fib/apache_tvm_ffi-*.whl apache-tvm-ffi 0.1.15.post2, cp312 manylinux wheel
#   .cache/fib/fused_moe_90.so.xz   flashinfer_w4a16_build.py ninja + ninja + link (xz-compressed)
#   .cache/fib/trtllm_utils.so      flashinfer_w4a16_build.py utils (the autotuner's delay kernel)
# Call with carry [".cache/fib"]. Usage: bash bench/reference_impl/run_flashinfer_device.sh [bench args]
set -o pipefail
export PYTHONUNBUFFERED=1
S=/tmp/site
mkdir -p $S/flashinfer/data/aot/fused_moe_90 $S/flashinfer/data/aot/trtllm_utils
tar xJf .cache/fib/fi.tar.xz -C $S || exit 1
xz -dc .cache/fib/fused_moe_90.so.xz > $S/flashinfer/data/aot/fused_moe_90/fused_moe_90.so || exit 1
cp .cache/fib/trtllm_utils.so $S/flashinfer/data/aot/trtllm_utils/ 2>/dev/null
python3 -m zipfile -e .cache/fib/apache_tvm_ffi-*.whl $S || exit 1
# prebuilt modules only: a missing one fails at once instead of starting an hour-long JIT build
export PYTHONPATH=$S FLASHINFER_DISABLE_JIT=1 FLASHINFER_WORKSPACE_BASE=/tmp/fiws
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python3 bench/reference_impl/bench_flashinfer.py --out $OUT --require-flashinfer "$@" 2>&1 \
  | grep -v "Autotuner\|AutoTuner" | tee $OUT/bench_flashinfer_log.txt
