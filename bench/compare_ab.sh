#!/usr/bin/env bash
# bench/compare_ab.sh A [RUNS]: an A/B of the fused GPU comparator (harness/cuda/compare.*) on the device machine, the
# method of reports/gpu/2026-11-22-h100-comparator-ab.json. A is a git revision or a directory holding compare.cu,
# compare.cuh and compare_element.hpp; B is this checkout. This checkout's bench/compare_cuda_timing.cu is built
# against each; then each prints its results hash at five shapes (same hash: same totals, |err| histogram, heatmap
# cells and first mismatches), and the two run alternately RUNS times (default 2) at 2^30 bf16 pairs, flat and as
# [2^18, 4096]. Binaries under ${OUT:-/tmp}/compare_ab. On the device machine pass A as a directory: the copy's .git
# there can be older than its files (on 2026-11-27 it still named 296abe8 two commits later), and a revision resolves
# against it; the log's first line says what A was.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,9p' "$0"; exit 2; }
a=$1 runs=${2:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
work=${OUT:-/tmp}/compare_ab
mkdir -p "$work/a/harness/cuda"
if [ -d "$a" ]; then
  echo "a: directory $a"
  cp "$a/compare.cu" "$a/compare.cuh" "$a/compare_element.hpp" "$work/a/harness/cuda/"
else
  echo "a: revision $a = $(git -C "$root" rev-parse --short "$a")"
  for f in compare.cu compare.cuh compare_element.hpp; do git -C "$root" show "$a:harness/cuda/$f" >"$work/a/harness/cuda/$f"; done
fi
build() {  # build <include root> <output>
  nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I"$1" -I"$root" \
    "$root/bench/compare_cuda_timing.cu" "$1/harness/cuda/compare.cu" -o "$2"
}
build "$work/a" "$work/cct_a" &
build "$root" "$work/cct_b" &
wait
for shape in "30" "30 4096" "24 64" "22 2" "22 16"; do
  for s in a b; do echo "$s [$shape] $("$work/cct_$s" $shape | grep hash)"; done
done
for r in $(seq "$runs"); do
  for shape in "30" "30 4096"; do
    for s in a b; do echo "$s [$shape] run $r: $("$work/cct_$s" $shape | grep -E 'read|compare' | tr -s ' ' | tr '\n' ' ')"; done
  done
done
