#!/usr/bin/env bash
# bench/cpu_compare_ab.sh A [ROUNDS]: an A/B of the CPU comparator (harness/src/compare.cpp), one thread, BM_Compare
# at 2^22 and 2^26. A is a git revision or a copy of compare.cpp; B is this checkout. parity_bench is built for B in
# the checkout's build tree (./dev's, or PARITY_BUILD_ROOT), then for A with A's compare.cpp in place of B's (restored on
# exit, and the bench rebuilt for B); the two binaries then run ROUNDS times (default 6) in ABBA order, so that neither
# side always runs second (on an H200 host's Intel CPU one binary under both names ran up to 8% slower second in a
# pair: reports/cpu/2026-11-27-h200-host-compare-fma-intmax-ab.log). Each round is the median of 3 repetitions; the
# last lines are each side's median [min-max] over the rounds (ms). Both run pinned to one core (PARITY_AB_CPU, default
# 1): unpinned on a busy Intel host, rounds swung 78-179 ms. Binaries and rounds under ${OUT:-/tmp}/cpu_ab.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,9p' "$0"; exit 2; }
a=$1 rounds=${2:-6}
root=$(cd "$(dirname "$0")/.." && pwd)
build_root=${PARITY_BUILD_ROOT:-${PARITY_HOME:-$HOME/.cache/parity}/build/$(basename "$root")-$(printf '%s' "$root" | sha256sum | cut -c1-12)}
tree=$build_root/${PARITY_PRESET:-release}
[ -f "$tree/build.ninja" ] || { echo "no build tree at $tree: build once first (./dev test)"; exit 2; }
work=${OUT:-/tmp}/cpu_ab
mkdir -p "$work"
src=$root/harness/src/compare.cpp
cp "$src" "$work/compare_b.cpp"
if [ -f "$a" ]; then cp "$a" "$work/compare_a.cpp"; echo "a: file $a"
else git -C "$root" show "$a:harness/src/compare.cpp" >"$work/compare_a.cpp"; echo "a: revision $(git -C "$root" rev-parse --short "$a")"; fi
bench() { cmake --build "$tree" --target parity_bench >"$work/build.log" 2>&1 || { tail -20 "$work/build.log"; exit 2; }; }
restore() { cp "$work/compare_b.cpp" "$src"; bench; }  # a new mtime: the bench is rebuilt
bench && cp "$tree/bench/parity_bench" "$work/bench_b"
trap restore EXIT
cp "$work/compare_a.cpp" "$src" && bench && cp "$tree/bench/parity_bench" "$work/bench_a"
restore && trap - EXIT
rm -f "$work"/rounds_[ab].txt
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="a b"; else order="b a"; fi
  for s in $order; do
    taskset -c "${PARITY_AB_CPU:-1}" "$work/bench_$s" --benchmark_filter='BM_Compare/.*/log2:2[26]/threads:1/' \
      --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null | awk '/_median/ { print $1, $2 }' >>"$work/rounds_$s.txt"
  done
done
python3 - "$work" <<'EOF'
import collections, statistics, sys
for side in "ab":
    rounds = collections.defaultdict(list)
    for line in open(f"{sys.argv[1]}/rounds_{side}.txt"):
        name, ms = line.split()
        rounds[name.replace("BM_Compare/", "").replace("/threads:1/real_time_median", "")].append(float(ms))
    print(side, " ".join(f"{k} {statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]" for k, v in sorted(rounds.items())))
EOF
