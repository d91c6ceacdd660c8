#!/usr/bin/env bash
# bench/hc_ab.sh A B [C ...] [RUNS] [-- ARGS]: an A/B of two or more versions of kernels/cuda/hc.cu on the device
# machine, the method of reports/gpu/2026-11-22-h200-standalone-ab.json. Each version is a git revision or a directory
# holding an hc.cu and hc.cuh. bench/hc_cuda_timing.cu is built against each (see checkout), then the binaries run in
# turn RUNS times each (default 3; ARGS go to every run: tokens hc hidden), so that all see the same machine; each run
# prints its table and the output hashes (same hash = same bits); a run past HC_AB_TIMEOUT seconds (120) is killed.
# Last, per kernel row, the median over the runs of every version, and each version's over A's; then every version's
# output hashes at more shapes (HC_AB_HASH_SHAPES, "T H D" triples separated by commas; default 1001 4 4096, 4096 4
# 4096 and 37 4 2048; empty: none), each set against A's, so that a change meant to keep the bits is checked where the
# timing's shape does not reach (partial tiles, hidden 2048). Logs and binaries under ${OUT:-/tmp}/hc_ab (version i in
# v<i>).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,11p' "$0"; exit 2; }
versions=()
while [ $# -gt 0 ] && [ "$1" != "--" ] && ! [[ $1 =~ ^[0-9]+$ ]]; do versions+=("$1"); shift; done
[ ${#versions[@]} -ge 2 ] || { sed -n '2,11p' "$0"; exit 2; }
runs=3
if [ $# -gt 0 ] && [ "$1" != "--" ]; then runs=$1; shift; fi
[ "${1:-}" = "--" ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
work=${OUT:-/tmp}/hc_ab
mkdir -p "$work"

# The version's kernel (kernels/cuda/hc.cu, hc.cuh) and standalone bench (bench/hc_cuda_timing.cu, cuda_timing.cuh)
# in a tree of its own, so that each builds against its own launchers. A directory gives the kernel, and the bench
# too where it holds one (hc_cuda_timing.cu and cuda_timing.cuh beside hc.cu; else this checkout's: on the device
# machine, whose copy's .git can be older than its files, a revision is passed as such a directory).
checkout() {
  local version=$1 dir=$2
  mkdir -p "$dir/kernels/cuda" "$dir/bench"
  if [ -d "$version" ]; then
    cp "$version/hc.cu" "$version/hc.cuh" "$dir/kernels/cuda/"
    local bench=$root/bench
    [ -f "$version/hc_cuda_timing.cu" ] && bench=$version
    cp "$bench/hc_cuda_timing.cu" "$bench/cuda_timing.cuh" "$dir/bench/"
    return
  fi
  for f in kernels/cuda/hc.cu kernels/cuda/hc.cuh bench/hc_cuda_timing.cu bench/cuda_timing.cuh; do
    git -C "$root" show "$version:$f" >"$dir/$f" || { echo "hc_ab: no $f at '$version'"; exit 2; }
  done
}

builds=()
for i in "${!versions[@]}"; do
  checkout "${versions[$i]}" "$work/v$i"
  nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -I"$work/v$i" \
    "$work/v$i/bench/hc_cuda_timing.cu" "$work/v$i/kernels/cuda/hc.cu" -o "$work/v$i/hct" &
  builds+=($!)
done
for b in "${builds[@]}"; do wait "$b"; done

for r in $(seq "$runs"); do
  for i in "${!versions[@]}"; do
    echo "== run $r, v$i (${versions[$i]})"
    # A version that deadlocks (a cluster or named barrier gone wrong) must not take the device session with it.
    timeout "${HC_AB_TIMEOUT:-120}" "$work/v$i/hct" "$@" | tee "$work/v$i.run$r.log" ||
      echo "hc_ab: v$i run $r failed or ran past ${HC_AB_TIMEOUT:-120} s (exit ${PIPESTATUS[0]})"
  done
done

# Rows are "%-36s %10.4f ...": the kernel's name in the first 36 columns, then its median ms.
for i in "${!versions[@]}"; do
  for r in $(seq "$runs"); do
    awk -v s="$i" 'length($0) > 47 && substr($0, 37, 11) ~ /^ *[0-9]+\.[0-9]+$/ {
      name = substr($0, 1, 36); sub(/ +$/, "", name); print s "\t" name "\t" substr($0, 37, 11) + 0 }' \
      "$work/v$i.run$r.log"
  done
done | sort -t$'\t' -k2,2 -k1,1n -k3,3n | awk -F'\t' -v names="${versions[*]}" '
  function median(side, key,   n) {
    n = count[side, key]
    if (n % 2) return v[side, key, (n + 1) / 2]
    return (v[side, key, n / 2] + v[side, key, n / 2 + 1]) / 2
  }
  { v[$1, $2, ++count[$1, $2]] = $3; if (!($2 in seen)) { seen[$2] = 1; order[++rows] = $2 } }
  END {
    k = split(names, name, " ")
    printf "\n%-36s", "kernel (medians over runs, ms)"
    for (s = 0; s < k; ++s) printf " %10s", "v" s
    for (s = 1; s < k; ++s) printf " %8s", "v" s "/v0"
    printf "\n"
    for (i = 1; i <= rows; ++i) {
      key = order[i]; a = median(0, key)
      printf "%-36s", key
      for (s = 0; s < k; ++s) printf " %10.4f", median(s, key)
      for (s = 1; s < k; ++s) printf " %8.3f", (a > 0 ? median(s, key) / a : 0)
      printf "\n"
    }
    for (s = 0; s < k; ++s) printf "v%d = %s\n", s, name[s + 1]
  }'

IFS=, read -ra shapes <<<"${HC_AB_HASH_SHAPES-1001 4 4096,4096 4 4096,37 4 2048}"
for shape in "${shapes[@]}"; do
  echo
  echo "== output hashes at $shape (tokens hc hidden)"
  for i in "${!versions[@]}"; do
    # shellcheck disable=SC2086  # the shape is three arguments
    timeout "${HC_AB_TIMEOUT:-120}" "$work/v$i/hct" $shape | grep -E 'hash|differ' >"$work/v$i.hashes" ||
      echo "hc_ab: v$i at $shape failed or ran past ${HC_AB_TIMEOUT:-120} s"
    if [ "$i" = 0 ]; then sed 's/^/  /' "$work/v0.hashes"
    elif cmp -s "$work/v0.hashes" "$work/v$i.hashes"; then echo "v$i: the same bits as v0"
    else echo "v$i: other bits than v0:"; { diff "$work/v0.hashes" "$work/v$i.hashes" || true; } | sed -n 's/^> /  /p'
    fi
  done
done
