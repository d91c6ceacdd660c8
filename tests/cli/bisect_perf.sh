#!/usr/bin/env bash
# bisect_perf.sh PARITY DATA: perf bisection in a small repository of eight commits that each time the same case
# (tests/data/slow: planted:slow does its work planted_repeats times). Commit 5 triples the work (the regression; the
# gate test holds the 2x line), commit 3 does not build, commit 6 is timed too briefly to judge (AMBIGUOUS), or only
# the first time where $BRIEF_ONCE names a file. `parity bisect commits --perf` must name commit 5 with its SLOWER
# numbers, time again a step it cannot judge (at most --attempts runs) and skip it after that, and leave the
# repository as it found it; and `parity bisect verdict`, the step judge, must map SLOWER to 1 and AMBIGUOUS to git
# bisect's skip code 125.
set -u
parity=$1 data=$2
repo=$(mktemp -d) once=$(mktemp -u)
trap 'rm -rf "$repo" "$once"' EXIT
cd "$repo" || exit 1
git init -q -b main . && git config user.email t@t && git config user.name t
mkdir cases
for i in 0 1 2 3 4 5 6 7; do
  repeats=1 cap=""
  [ "$i" -ge 5 ] && repeats=3
  [ "$i" = 6 ] && cap='$([ -e "${BRIEF_ONCE:-}" ] || echo --time-cap 0.001)'
  sed "s/^planted_repeats = 1$/planted_repeats = $repeats/" "$data/hc_post_slow.toml" >cases/hc_post_slow.toml
  {
    printf '"$PARITY" run --cases-dir cases --case hc_post/planted_slow --perf --cpu --no-color --json "$PARITY_BISECT_RESULTS" %s\n' \
      "$cap"
    [ "$i" = 6 ] && echo 'rc=$?; [ -z "${BRIEF_ONCE:-}" ] || touch "$BRIEF_ONCE"; exit $rc'
  } >run.sh
  echo "$i" >step
  if [ "$i" = 3 ]; then touch broken; else rm -f broken; fi
  git add -A && git commit -qm "step $i"
done
fail() { printf '%s\n--- output ---\n%s\n' "$1" "$out"; exit 1; }

# The judge alone, on documents of commits 0 (baseline), 6 (too few samples) and 7 (slowed down).
judge() {  # COMMIT OUTPUT
  git checkout -q "$(git log main --format=%H --grep="^step $1\$")" && PARITY_BISECT_RESULTS=$2 PARITY=$parity bash run.sh >/dev/null
}
# Under load from elsewhere (ctest -j on the GPU machine) the two timings can see the host at different speeds: the
# judge then says NOT-COMPARABLE or AMBIGUOUS (exit 125), and both are timed again, at most six times; SAME or
# FASTER fails at once.
judge 6 "$repo/.brief.json" || { out=""; fail "could not time the judge's inputs"; }
for attempt in 1 2 3 4 5 6; do
  judge 0 "$repo/.base.json" && judge 7 "$repo/.slow.json" && git checkout -q main ||
    { out=""; fail "could not time the judge's inputs"; }
  out=$("$parity" bisect verdict --baseline "$repo/.base.json" --candidate "$repo/.slow.json" 2>&1)
  rc=$?
  [ "$rc" = 125 ] && grep -Eq "planted:slow fwd: (NOT-COMPARABLE|AMBIGUOUS)" <<<"$out" || break
  echo "attempt $attempt: the judge could not decide ($(grep -o 'planted:slow fwd: [A-Z-]*' <<<"$out")); again"
done
[ "$rc" = 1 ] && grep -q "planted:slow fwd: SLOWER x" <<<"$out" || fail "verdict: a 3x slowdown is not SLOWER (exit 1)"
out=$("$parity" bisect verdict --baseline "$repo/.base.json" --candidate "$repo/.brief.json" 2>&1)
[ $? = 125 ] && grep -q "planted:slow fwd: AMBIGUOUS" <<<"$out" || fail "verdict: one sample is not AMBIGUOUS (exit 125)"
out=$("$parity" bisect verdict --baseline "$repo/.base.json" --candidate "$repo/.slow.json" --path cuda:v1 2>&1)
[ $? = 125 ] && grep -q "nothing to compare" <<<"$out" || fail "verdict: a path with no timing is not a skip"
rm -f .base.json .brief.json .slow.json

first_bad=$(git log --format=%H --grep='^step 5$')
head_before=$(git rev-parse HEAD)
# The bad end is commit 6, timed too briefly the first time: the step must be timed again and judged bad, not
# skipped (the search then names commit 5 between the ends, which git bisect does not test again). A burst of load
# from elsewhere can still leave a commit undecided after three runs: then git bisect cannot single out the first bad
# commit (it lists the candidates), or the bad end is undecidable, and the search is run again, at most six times.
# Naming a wrong commit fails at once.
for attempt in 1 2 3 4 5 6; do
  rm -f "$once"
  out=$(BRIEF_ONCE=$once PARITY=$parity "$parity" bisect commits --repo "$repo" --good HEAD~7 --bad HEAD~1 --perf \
    --build 'test ! -f broken' --run 'bash run.sh' 2>&1)
  rc=$?
  [ "$rc" = 2 ] && grep -Eq "possible first bad commit|is not bad \(undecidable" <<<"$out" || break
  echo "attempt $attempt: too noisy to single out one commit; again"
done
main_out=$out
[ "$rc" = 0 ] || fail "expected exit 0, got $rc"
grep -q "first bad commit: $first_bad" <<<"$out" || fail "did not name step 5 ($first_bad)"
grep -qF -- "--> undecided: timing again (run 2 of 3)" <<<"$out" || fail "the briefly timed bad end was not timed again"
sed -n '/^first bad commit:/,$p' <<<"$out" | grep -q "planted:slow fwd: SLOWER x" || fail "no numbers for the first bad commit"
[ "$(git rev-parse HEAD)" = "$head_before" ] || fail "HEAD moved"
[ -z "$(git status --porcelain)" ] || fail "working tree changed"
[ "$(git worktree list | wc -l)" = 1 ] || fail "a worktree was left behind"
[ -z "$(git for-each-ref refs/bisect)" ] || fail "bisect refs left behind"

# Ends that contradict the search are refused: a --bad that is not slower than --good. A noisy stretch can leave
# that end undecidable (AMBIGUOUS) instead: measured again, at most six times, as above.
for attempt in 1 2 3 4 5 6; do
  out=$(PARITY=$parity "$parity" bisect commits --repo "$repo" --good HEAD~7 --bad HEAD~5 --perf \
    --build 'test ! -f broken' --run 'bash run.sh' 2>&1)
  rc=$?
  [ "$rc" = 2 ] && grep -qF "the bad revision HEAD~5 is not bad (undecidable" <<<"$out" || break
  echo "attempt $attempt: the unslowed end was undecidable; again"
done
[ "$rc" = 2 ] && grep -qF "the bad revision HEAD~5 is not bad (it passes)" <<<"$out" || fail "an unslowed --bad was bisected"
# A step that stays undecidable is run --attempts times in all, then skipped: here the bad end, so nothing is bisected.
out=$(PARITY=$parity "$parity" bisect commits --repo "$repo" --good HEAD~7 --bad HEAD~1 --perf --attempts 2 \
  --build 'test ! -f broken' --run 'bash run.sh' 2>&1)
rc=$?
[ "$rc" = 2 ] && grep -qF "the bad revision HEAD~1 is not bad (undecidable" <<<"$out" ||
  fail "an end that is always timed too briefly was not reported undecidable"
[ "$(grep -c -- '--> undecided: timing again' <<<"$out")" = 1 ] && grep -qF -- "(run 2 of 2)" <<<"$out" ||
  fail "--attempts 2: expected exactly one more run of the undecided step"
printf "%s\n" "$main_out"
echo "ok: named $first_bad with its numbers, repository unchanged"
