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
# The null run. On the 2-core CI VM the host can run the same code ~1.5x slower for a second while the host probe
# moves far less (a CI run at c454f18: x1.544 SLOWER with the probes 1.10x apart, 4 null gates of 5 passed): a
# verdict on unchanged code that the environment explains. A null gate that fails is run again once against a fresh
# baseline; failing twice in a row fails the test (a gate that calls unchanged code slower every time).
null_gate() {
  "$parity" gate --cases-dir "$tmp/before" --case $case --perf --cpu --no-color "${base[@]}" 2>&1
}
for i in 1 2 3 4 5; do
  out=$(null_gate) && grep -q "gate: PASS (exit 0)" <<<"$out" && continue
  echo "null gate $i failed: $(grep -E "^(SLOWER|FASTER) " <<<"$out" | head -1 | cut -c1-160); measuring both again"
  record_baseline
  expect 0 "gate: PASS \(exit 0\)" "$parity" gate --cases-dir "$tmp/before" --case $case --perf --cpu --no-color \
    "${base[@]}"
done
# A stretch of slow host under one of the two runs makes them NOT-COMPARABLE (eager, or where eager cannot tell,
# the host probes, moved) or drops most of one's samples (AMBIGUOUS): the verdict's next step, and this test's, is
# to measure both again, up to $attempts times (on the CI VM the probe moved 9 -> 15 us between runs for minutes:
# three undecided runs in a row, twice in five test runs, neither time a SAME or FASTER; here, on a noisy day, 10
# gates gave 2 SLOWER, 4 NOT-COMPARABLE, 3 AMBIGUOUS and one SAME before eager replaced the probes). SAME or FASTER is never
# acceptable. The 2x is read at the baseline's host speed, the ratio the verdict judges (the raw one moves with the
# host: x1.43 raw, x1.72 at the baseline's host speed, seen here).
slower="SLOWER $case \[planted:slow\] fwd: x"
# The slowdown at the baseline's host speed: the raw ratio times the probes' ratio, where the verdict gives one.
at_base_speed() {
  grep -E "$slower" <<<"$1" | head -1 | awk '{
    match($0, / fwd: x[0-9.]+/); r = substr($0, RSTART + 7, RLENGTH - 7); h = 1
    if (match($0, /host speed: x[0-9.]+/)) h = substr($0, RSTART + 13, RLENGTH - 13)
    printf "%.3f", r * h }'
}
attempts=8
for attempt in $(seq $attempts); do
  out=$("$parity" gate --cases-dir "$tmp/after" --case $case --perf --cpu --no-color "${base[@]}" 2>&1)
  code=$?
  if [ $code = 1 ] && grep -Eq "$slower" <<<"$out"; then
    ratio=$(at_base_speed "$out")
    if awk -v r="$ratio" 'BEGIN { exit !(r >= 1.6) }'; then
      echo "ok: attempt $attempt: x$ratio at the baseline's host speed: $(grep -E "$slower" <<<"$out")"
      exit 0
    fi
    # The right verdict at the wrong size: a slow stretch under the baseline's run (x1.35 seen here, eager the
    # same beside both: its short samples ride out stretches that double a 4 ms region). Measured again like an
    # undecided verdict; the 2x must still show within the attempts.
    echo "attempt $attempt: SLOWER but x$ratio at the baseline's host speed, not ~2x; measuring both again"
    record_baseline
    continue
  fi
  if [ $code != 0 ] || ! grep -Eq "^(NOT-COMPARABLE|AMBIGUOUS) $case \[planted:slow\]" <<<"$out"; then
    printf 'attempt %s: expected exit 1 and /%s/ (or a NOT-COMPARABLE/AMBIGUOUS to re-measure), got exit %s:\n%s\n' \
      "$attempt" "$slower" "$code" "$out"
    exit 1
  fi
  echo "attempt $attempt: $(grep -E "$case \[planted:slow\]" <<<"$out"); measuring both again"
  record_baseline
done
echo "no SLOWER verdict of ~2x in $attempts attempts"
exit 1
