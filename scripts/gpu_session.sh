#!/usr/bin/env bash
# One batched GPU session (device machine: H100/H200, no network): build the release preset against the machine's
# own torch, measure the device ceilings, run the full suite with perf, the comparators' bench and every test, and
# leave results, report and logs under $OUT. toml++ (header-only, not installed there) travels in .carry/include.
#   usage (device tool): PARITY_COMMIT=<hash> PARITY_SESSION_S=<the call's limit> bash scripts/gpu_session.sh
#   with carry [".carry"]
#   (the device copy's .git, where there is one, can be older than its files: the commit, and PARITY_DIRTY=1 for
#   uncommitted changes, are told)
# A device call returns at most 8 files and is cut off at its time limit: the logs are written outside $OUT and packed
# into $OUT/logs.tar.gz after every step, and the results come before ctest (the longest step: 180-245 s on an H100),
# so a call cut off in a later step still brings back what the earlier ones measured (run48's first call lost its
# results document that way, cut off in the bench with the logs not yet packed).
set -uo pipefail
t_start=$(date +%s)
OUT=${OUT:-/tmp/parity-out}
LOG=/tmp/parity-logs HIST=/tmp/parity-history
rm -rf "$LOG" "$HIST" && mkdir -p "$OUT" "$LOG" "$HIST"
pack() { tar czf "$OUT/logs.tar.gz" -C "$LOG" .; }
cd "$(dirname "$0")/.."
export PARITY_PYTHON=python3 PARITY_SKIP_BOOTSTRAP=1 PARITY_BUILD_ROOT=/tmp/parity-build PARITY_HOME=/tmp/parity-home
export PARITY_JOBS=${PARITY_JOBS:-16} CMAKE_CUDA_COMPILER_LAUNCHER= CMAKE_CXX_COMPILER_LAUNCHER=
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$LOG/gpu.txt"
t0=$(date +%s)
prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
cmake --preset release -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER_LAUNCHER= -DCMAKE_CUDA_COMPILER_LAUNCHER= \
  >"$LOG/configure.log" 2>&1 || { tail -30 "$LOG/configure.log"; pack; exit 2; }
cmake --build --preset release -j "$PARITY_JOBS" >"$LOG/build.log" 2>&1 ||
  { grep -E 'error|FAILED' "$LOG/build.log" | head -30; pack; exit 2; }
echo "build: $(( $(date +%s) - t0 )) s"; pack
B=$PARITY_BUILD_ROOT/release
"$B/parity" device --remeasure >"$LOG/device.txt" 2>&1; cat "$LOG/device.txt"
t2=$(date +%s)
"$B/parity" run --suite full --perf --no-color --json "$OUT/results-gpu.json" --html "$OUT/report-gpu.html" \
  >"$LOG/run-full.txt" 2>&1
echo "run full rc=$? ($(( $(date +%s) - t2 )) s)"
tail -60 "$LOG/run-full.txt"
# History: the committed store plus this run, verdicts against the previous comparable record, and the report.
cp reports/history/*.jsonl "$HIST/" 2>/dev/null
"$B/parity" history append "$OUT/results-gpu.json" --dir "$HIST" >"$LOG/history-check.txt" 2>&1
"$B/parity" history check --dir "$HIST" >>"$LOG/history-check.txt" 2>&1
echo "history check rc=$?"; grep -E 'SLOWER|FASTER|CREEP|NUMERIC' "$LOG/history-check.txt" | head -20
"$B/parity" report --results "$OUT/results-gpu.json" --history "$HIST" --out "$OUT/report-gpu.html"
echo "report rc=$?"; pack
# The comparators themselves: the fused GPU comparator against a read of both tensors (x_read), the CPU one
# against memcpy (x_memcpy), Google Benchmark JSON.
"$B/bench/parity_bench" --benchmark_filter='CompareCuda|Compare/|Memcpy' --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_out="$OUT/bench-compare.json" --benchmark_out_format=json \
  >"$LOG/bench-compare.txt" 2>&1
echo "bench rc=$?"; grep -E "CompareCuda.*median" "$LOG/bench-compare.txt" | head
timeout 120 compute-sanitizer --tool memcheck "$B/tests/parity_unit_tests" --gtest_filter='CompareCuda.*' \
  >"$LOG/memcheck-compare.txt" 2>&1; tail -1 "$LOG/memcheck-compare.txt"; pack
# With PARITY_SESSION_S (the seconds the whole call may take), ctest is stopped 20 s before that, so that its log (how
# far it got, what failed) is packed rather than lost with the call (run51's was, its machine building in 153 s).
t1=$(date +%s)
ctest_limit=()
if [ -n "${PARITY_SESSION_S:-}" ]; then
  left=$(( PARITY_SESSION_S - (t1 - t_start) - 20 ))
  ctest_limit=(timeout "$(( left > 10 ? left : 10 ))")
fi
# cli/malformed_inputs drives the CLI on the CPU only: CI runs it; here it took 66 s in run73 and left cli/bisect_perf
# past the limit.
(cd "$B" && "${ctest_limit[@]}" ctest -j 8 --timeout 300 --output-on-failure -E '^cli/malformed_inputs$' \
  >"$LOG/ctest.log" 2>&1)
ctest_rc=$?
echo "ctest rc=$ctest_rc ($(( $(date +%s) - t1 )) s)"; grep -E 'tests passed|Failed|\*\*\*' "$LOG/ctest.log" | head -20; pack
# The Python-only peer (torch.compile), with eager and a copy timed in the same process (~2 min: PARITY_PEERS=0
# leaves it out when the call would outrun its 10 minutes).
if [ "${PARITY_PEERS:-1}" = 1 ]; then
  timeout 240 python3 bench/hc_torch_timing.py --json "$OUT/torch-peers.json" >"$LOG/torch-peers.txt" 2>&1
  echo "torch peers rc=$?"; tail -16 "$LOG/torch-peers.txt"; pack
fi
# The call's exit status is the tests': the logs above say what else ran.
exit "$ctest_rc"
