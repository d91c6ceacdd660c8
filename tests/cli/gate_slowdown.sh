#!/usr/bin/env bash
# gate_slowdown.sh PARITY DATA: the gate's perf side end to end. planted:slow does its work planted_repeats times
# (tests/data/slow): a run at 1 becomes the baseline; the same build gated against it again and again gives no
# failure (the null run); the kernel slowed down 2x (planted_repeats = 2, same case, path and direction) fails the
# gate with a SLOWER verdict naming the path.
set -u
parity=$1 data=$2
expect() { bash "$(dirname "$0")/expect.sh" "$@" || exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case=hc_post/planted_slow
mkdir -p "$tmp/before" "$tmp/after"
cp "$data/hc_post_slow.toml" "$tmp/before/"
sed 's/^planted_repeats = 1$/planted_repeats = 2/' "$data/hc_post_slow.toml" >"$tmp/after/hc_post_slow.toml"
grep -q '^planted_repeats = 2$' "$tmp/after/hc_post_slow.toml" || { echo "could not plant the slowdown"; exit 1; }
base=(--baseline-dir "$tmp/baselines")
record_baseline() {
  expect 0 "1 passed" "$parity" run --cases-dir "$tmp/before" --case $case --perf --cpu --no-color --json "$tmp/run.json"
  expect 0 "wrote" "$parity" baseline "${base[@]}" update --from "$tmp/run.json" --why "before the slowdown" --who tester
}

record_baseline
for i in 1 2 3 4 5; do
  expect 0 "gate: PASS \(exit 0\)" "$parity" gate --cases-dir "$tmp/before" --case $case --perf --cpu --no-color \
    "${base[@]}"
done
# A stretch of slow host under one of the two runs makes them NOT-COMPARABLE (their host probes differ) or drops
# most of one's samples (AMBIGUOUS): the verdict's next step, and this test's, is to measure both again. SAME or
# FASTER is never acceptable.
slower="SLOWER $case \[planted:slow\] fwd: x(1\.[6-9]|2\.|3\.)"
for attempt in 1 2 3; do
  out=$("$parity" gate --cases-dir "$tmp/after" --case $case --perf --cpu --no-color "${base[@]}" 2>&1)
  code=$?
  if [ $code = 1 ] && grep -Eq "$slower" <<<"$out"; then
    echo "ok: attempt $attempt: $(grep -E "$slower" <<<"$out")"
    exit 0
  fi
  if [ $code != 0 ] || ! grep -Eq "^(NOT-COMPARABLE|AMBIGUOUS) $case \[planted:slow\]" <<<"$out"; then
    printf 'attempt %s: expected exit 1 and /%s/ (or a NOT-COMPARABLE/AMBIGUOUS to re-measure), got exit %s:\n%s\n' \
      "$attempt" "$slower" "$code" "$out"
    exit 1
  fi
  echo "attempt $attempt: $(grep -E "$case \[planted:slow\]" <<<"$out"); measuring both again"
  record_baseline
done
echo "no SLOWER verdict in three attempts"
exit 1
