#!/usr/bin/env bash
# The test files that reached the suite's memory peak, in one process, on a cache folder that holds
# the wheels, facts, indexes and graphs of a warm cache (hard links) but no derived entries
# (findings, views, maps, specs): what each test builds is built cold, as in a run from a fresh
# cache, without indexing the releases again. Prints pytest's summary, the peak (KiB) and the wall.
#
#   bench/suite_heavy.sh NAME WARM_CACHE [VAR=value ...]     e.g. bench/suite_heavy.sh base ~/.cache/recon
#
# Per-test rows go to $OUT/prof-NAME (RECON_TEST_PROFILE; read them with bench/suite_profile.py).
set -euo pipefail
name=$1 warm=$2; shift 2
out=${OUT:-/tmp/recon-suite-heavy}
c=$out/cache-$name
rm -rf "$c" "$out/prof-$name"; mkdir -p "$c"
for d in downloads wheels facts graph index tritonast; do
    [ -d "$warm/$d" ] && cp -al "$warm/$d" "$c/"
done
cd "$(dirname "$0")/.."
env RECON_CACHE_DIR="$c" RECON_TEST_PROFILE="$out/prof-$name" "$@" /usr/bin/time -v python -m pytest -q -p no:cacheprovider \
    tests/test_spec_matrix.py tests/test_will_it_run.py tests/test_links.py tests/test_placement.py > "$out/$name.log" 2>&1 || true
grep -E "passed|failed|Maximum resident|Elapsed" "$out/$name.log"
