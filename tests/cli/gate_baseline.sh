#!/usr/bin/env bash
# gate_baseline.sh PARITY: baselines end to end in a scratch directory. A run becomes the baseline (update) and the
# gate passes against it; a per-arch override is applied and reported; a baseline made smaller than the run turns
# into a numeric regression (exit 1, named).
set -u
parity=$1
expect() { bash "$(dirname "$0")/expect.sh" "$@" || exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case=hc_post/odd_tokens
base=(--baseline-dir "$tmp/baselines")

expect 0 "1 passed" "$parity" run --case $case --cpu --no-color --json "$tmp/run.json"
expect 0 "wrote .*/baselines/hc_post.json" "$parity" baseline "${base[@]}" update --from "$tmp/run.json" \
  --why "scratch baseline" --who tester
grep -q '"why":"scratch baseline"' "$tmp/baselines/hc_post.json" || { echo "no update entry"; exit 1; }
expect 0 "gate: PASS \(exit 0\) on cpu" "$parity" gate --case $case --cpu --no-color "${base[@]}"

# An override applies on its arch in place of the case's policy, and the gate says so: bitwise fails, the case's own
# policy passes again (cpu:v1 rounds once, so only cpu:hf misses bitwise).
override() {  # POLICY, POLICY as a regex
  expect 0 "override cpu $case\|out: policy '$2' instead of 'naive_relative" "$parity" baseline "${base[@]}" override \
    --arch cpu --case $case --tensor out --policy "$1" --reason "scratch test" --worst "1 ulp" --who tester
}
override bitwise bitwise
expect 1 "FAIL $case  cpu:hf out vs ref:fp64  policy bitwise" "$parity" gate --case $case --cpu --no-color "${base[@]}"
override "naive_relative(k=2, floor=1)" "naive_relative\(k=2, floor=1\)"
expect 0 "override cpu $case out: policy 'naive_relative\(k=2, floor=1\)'" "$parity" gate --case $case --cpu \
  --no-color "${base[@]}"
expect 2 "case '$case' has no policy for 'nope'" "$parity" baseline "${base[@]}" override \
  --arch cpu --case $case --tensor nope --policy "ulp<=3" --reason r --worst w --who tester

# Every max_abs of the baseline shrunk: the same run now looks like numbers that grew.
sed -i 's/"max_abs":[0-9.e+-]*/"max_abs":0.0/g' "$tmp/baselines/hc_post.json"
expect 1 "REGRESSION $case \[cpu:v1\] fwd: out vs ref:fp64 max_abs" "$parity" gate --case $case --cpu --no-color \
  "${base[@]}"
echo "ok: baseline update, override and regression"
