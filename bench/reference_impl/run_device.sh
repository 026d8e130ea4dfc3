#!/bin/bash
# One device call. Usage: bash bench/reference_impl/run_device.sh [tests|bench|configs|all]
#   tests    the GPU tests (tests/reference_impl), log to $OUT/gpu_test_log.txt
#   bench    bench_moe.py against SGLang's slot path and the bf16 peer (results.json), log $OUT/bench_log.txt
#   configs  bench_configs.py: tuned vs heuristic defaults (vs a tuner's folder: TUNED_DIR), host overhead
#   fused    the one-launch decode path and prepacked weights: its GPU tests, the fast-launch test, and
#            bench_fused.py (side by side with the shipped configs, host overhead), logs to $OUT
#   host     bench_host.py (eager minus graph replay: v14 launches / lean launches / eager graph, with
#            the breakdown and the host primitives), the eager-graph and one-launch-order GPU tests,
#            bench_fused.py for the one-launch ticket orders (FUSED_ONLY), the fast-launch/graph tests
# Raw logs go to $OUT only; bench/NOTES.md quotes the numbers and cites any kept log by commit.
set -o pipefail
export PYTHONUNBUFFERED=1
what=${1:-all}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
if [ "$what" = tests ] || [ "$what" = all ]; then
  timeout 540 python3 -m pytest -v -s -p no:cacheprovider tests/reference_impl 2>&1 | tee $OUT/gpu_test_log.txt | grep -E "passed|failed|PASS|FAIL|Error|rel_err" | tail -60
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  mkdir -p /tmp/slot && python3 -c "import zipfile,glob; z=zipfile.ZipFile(glob.glob('.whl/sglang-0.5.13.post1-*.whl')[0]); open('/tmp/slot/mxfp4_moe_sm120_triton.py','wb').write(z.read('sglang/srt/layers/moe/fused_moe_triton/mxfp4_moe_sm120_triton.py'))"
  python3 bench/reference_impl/bench_moe.py --out $OUT --slot-module /tmp/slot/mxfp4_moe_sm120_triton.py ${BENCH_ARGS} 2>&1 | tee $OUT/bench_log.txt
fi
if [ "$what" = fused ]; then
  timeout ${FUSED_TEST_S:-240} python3 -m pytest -x -q -p no:cacheprovider tests/reference_impl/test_fused_gpu.py 2>&1 | tee $OUT/fused_tests.txt | tail -15
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/reference_impl/test_refimpl_gpu.py -k fast_launch 2>&1 | tee $OUT/fast_launch_tests.txt | tail -4
  timeout ${FUSED_BENCH_S:-300} python3 bench/reference_impl/bench_fused.py --out $OUT ${FUSED_ARGS} 2>&1 | tee $OUT/bench_fused_log.txt
fi
if [ "$what" = host ]; then
  timeout ${HOST_BENCH_S:-150} python3 bench/reference_impl/bench_host.py --out $OUT ${HOST_ARGS} 2>&1 | tee $OUT/bench_host_log.txt
  timeout ${EAGER_TEST_S:-150} python3 -m pytest -x -q -p no:cacheprovider tests/reference_impl/test_eager_graph_gpu.py \
    tests/reference_impl/test_fused_gpu.py 2>&1 | tee $OUT/eager_fused_tests.txt | tail -15
  timeout ${FUSED_BENCH_S:-150} python3 bench/reference_impl/bench_fused.py --out $OUT --no-host --ms ${FUSED_MS:-1,4,16} \
    --only "${FUSED_ONLY:-shipped raw,shipped prepacked,fused q1 w2 c8,fused q1 w2 c8 o1,fused q1 w4 c8,fused q1 w4 c8 o1,fused q2 w2 c8,fused q2 w2 c8 o1,fused q1 w2 c8 r96,fused q1 w2 c8 r96 o1}" \
    2>&1 | tee $OUT/bench_fused_log.txt
  timeout ${GPU_TEST_S:-120} python3 -m pytest -q -p no:cacheprovider tests/reference_impl/test_refimpl_gpu.py \
    -k "${GPU_TEST_K:-fast_launch or alive or graph_replay}" 2>&1 | tee $OUT/gpu_tests.txt | tail -4
fi
if [ "$what" = configs ]; then
  python3 bench/reference_impl/bench_configs.py --out $OUT ${TUNED_DIR:+--tuned-dir $TUNED_DIR} 2>&1 | tee $OUT/bench_configs_log.txt
fi
