#!/usr/bin/env bash
# One batched GPU session (device machine: H100/H200, no network): build the release preset against the machine's
# own torch, run every test, measure the device ceilings, run the full suite with perf, and leave results, report and
# logs under $OUT. toml++ (header-only, not installed there) travels in .carry/include.
#   usage (device tool): PARITY_COMMIT=<hash> bash scripts/gpu_session.sh   with carry [".carry"]
#   (the device copy's .git, where there is one, can be older than its files: the commit, and PARITY_DIRTY=1 for
#   uncommitted changes, are told)
set -uo pipefail
OUT=${OUT:-/tmp/parity-out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PARITY_PYTHON=python3 PARITY_SKIP_BOOTSTRAP=1 PARITY_BUILD_ROOT=/tmp/parity-build PARITY_HOME=/tmp/parity-home
export PARITY_JOBS=${PARITY_JOBS:-16} CMAKE_CUDA_COMPILER_LAUNCHER= CMAKE_CXX_COMPILER_LAUNCHER=
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)
prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
cmake --preset release -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER_LAUNCHER= -DCMAKE_CUDA_COMPILER_LAUNCHER= \
  >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 2; }
cmake --build --preset release -j "$PARITY_JOBS" >"$OUT/build.log" 2>&1 || { grep -E 'error|FAILED' "$OUT/build.log" | head -30; exit 2; }
echo "build: $(( $(date +%s) - t0 )) s"
B=$PARITY_BUILD_ROOT/release
t1=$(date +%s)
(cd "$B" && ctest -j 8 --timeout 300 --output-on-failure >"$OUT/ctest.log" 2>&1)
echo "ctest rc=$? ($(( $(date +%s) - t1 )) s)"; grep -E 'tests passed|Failed|\*\*\*' "$OUT/ctest.log" | head -20
"$B/parity" device --remeasure >"$OUT/device.txt" 2>&1; cat "$OUT/device.txt"
t2=$(date +%s)
"$B/parity" run --suite full --perf --no-color --json "$OUT/results-gpu.json" --html "$OUT/report-gpu.html" \
  >"$OUT/run-full.txt" 2>&1
echo "run full rc=$? ($(( $(date +%s) - t2 )) s)"
tail -60 "$OUT/run-full.txt"
# History: the committed store plus this run, verdicts against the previous comparable record, and the report.
mkdir -p "$OUT/history" && cp reports/history/*.jsonl "$OUT/history/" 2>/dev/null
"$B/parity" history append "$OUT/results-gpu.json" --dir "$OUT/history" >"$OUT/history-check.txt" 2>&1
"$B/parity" history check --dir "$OUT/history" >>"$OUT/history-check.txt" 2>&1
echo "history check rc=$?"; grep -E 'SLOWER|FASTER|CREEP|NUMERIC' "$OUT/history-check.txt" | head -20
"$B/parity" report --results "$OUT/results-gpu.json" --history "$OUT/history" --out "$OUT/report-gpu.html"
echo "report rc=$?"
# The comparators themselves: the fused GPU comparator against a read of both tensors (x_read), the CPU one
# against memcpy (x_memcpy), Google Benchmark JSON.
"$B/bench/parity_bench" --benchmark_filter='CompareCuda|Compare/|Memcpy' --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_out="$OUT/bench-compare.json" --benchmark_out_format=json \
  >"$OUT/bench-compare.txt" 2>&1
echo "bench rc=$?"; grep -E "CompareCuda.*median" "$OUT/bench-compare.txt" | head
timeout 120 compute-sanitizer --tool memcheck "$B/tests/parity_unit_tests" --gtest_filter='CompareCuda.*' \
  >"$OUT/memcheck-compare.txt" 2>&1; tail -1 "$OUT/memcheck-compare.txt"
# The Python-only peer (torch.compile), with eager and a copy timed in the same process (~2 min: PARITY_PEERS=0
# leaves it out when the call would outrun its 10 minutes).
touch "$OUT/torch-peers.txt"
if [ "${PARITY_PEERS:-1}" = 1 ]; then
  timeout 240 python3 bench/hc_torch_timing.py --json "$OUT/torch-peers.json" >"$OUT/torch-peers.txt" 2>&1
  echo "torch peers rc=$?"; tail -16 "$OUT/torch-peers.txt"
fi
# At most 8 files come back: the logs travel as one archive.
(cd "$OUT" && tar czf logs.tar.gz gpu.txt configure.log build.log ctest.log device.txt run-full.txt history-check.txt \
  torch-peers.txt bench-compare.txt memcheck-compare.txt && rm -rf gpu.txt configure.log build.log ctest.log \
  device.txt run-full.txt history-check.txt torch-peers.txt bench-compare.txt memcheck-compare.txt history)
