#!/bin/bash
# One device call: GPU tests + tuned benchmark. Usage: bash bench/reference_impl/run_device.sh [tests|bench|all]
set -o pipefail
export PYTHONUNBUFFERED=1
what=${1:-all}
mkdir -p /tmp/slot && python3 -c "import zipfile,glob; z=zipfile.ZipFile(glob.glob('.whl/sglang-0.5.13.post1-*.whl')[0]); open('/tmp/slot/mxfp4_moe_sm120_triton.py','wb').write(z.read('sglang/srt/layers/moe/fused_moe_triton/mxfp4_moe_sm120_triton.py'))" 
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
if [ "$what" != bench ]; then
  timeout 540 python3 -m pytest -v -s -p no:cacheprovider tests/reference_impl 2>&1 | tee $OUT/gpu_test_log.txt | grep -E "passed|failed|PASS|FAIL|Error|rel_err" | tail -60
fi
if [ "$what" != tests ]; then
  python3 bench/reference_impl/bench_moe.py --out $OUT --slot-module /tmp/slot/mxfp4_moe_sm120_triton.py ${BENCH_ARGS} 2>&1 | tee $OUT/bench_log.txt
fi
