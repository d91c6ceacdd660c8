#!/usr/bin/env bash
# bisect_commits.sh PARITY: a small repository whose check starts failing at one commit, with an unbuildable
# commit on the way; `parity bisect commits` must name the regressing commit, skip the broken build, and leave
# the repository exactly as it found it.
set -u
parity=$1
repo=$(mktemp -d)
trap 'rm -rf "$repo"' EXIT
cd "$repo" || exit 1
git init -q -b main . && git config user.email t@t && git config user.name t
for i in 0 1 2 3 4 5 6 7; do
  echo "$i" >value
  printf '#!/usr/bin/env bash\n[ "$(cat value)" -lt 5 ]\n' >check.sh
  if [ "$i" = 3 ]; then touch broken; else rm -f broken; fi
  git add -A && git commit -qm "step $i"
done
first_bad=$(git log --format=%H --grep='^step 5$')
head_before=$(git rev-parse HEAD)
out=$("$parity" bisect commits --repo "$repo" --good HEAD~7 --bad HEAD --build 'test ! -f broken' --run 'bash check.sh' 2>&1)
rc=$?
fail() { printf '%s\n--- output ---\n%s\n' "$1" "$out"; exit 1; }
[ "$rc" = 0 ] || fail "expected exit 0, got $rc"
grep -q "first bad commit: $first_bad" <<<"$out" || fail "did not name step 5 ($first_bad)"
[ "$(git rev-parse HEAD)" = "$head_before" ] || fail "HEAD moved"
[ -z "$(git status --porcelain)" ] || fail "working tree changed"
[ "$(git worktree list | wc -l)" = 1 ] || fail "a worktree was left behind"
[ -z "$(git for-each-ref refs/bisect)" ] || fail "bisect refs left behind"
# git bisect takes its ends on trust; Parity checks them: a --good that fails is refused before any search.
out=$("$parity" bisect commits --repo "$repo" --good HEAD~1 --bad HEAD --build 'test ! -f broken' --run 'bash check.sh' 2>&1)
[ $? = 2 ] && grep -qF "the good revision HEAD~1 does not pass (step exit 1)" <<<"$out" || fail "a failing --good was bisected"
[ "$(git worktree list | wc -l)" = 1 ] || fail "a worktree was left behind after refusing"
echo "ok: named $first_bad, repository unchanged"
