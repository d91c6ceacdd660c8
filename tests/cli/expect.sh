#!/usr/bin/env bash
# expect.sh CODE REGEX CMD...: runs CMD, requires exit code CODE and output (stdout+stderr) matching REGEX.
set -u
want=$1 regex=$2
shift 2
out=$("$@" 2>&1)
got=$?
if [ "$got" != "$want" ]; then
  printf 'expected exit %s, got %s from: %s\n%s\n' "$want" "$got" "$*" "$out"
  exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  printf 'exit %s as expected, but output does not match /%s/:\n%s\n' "$got" "$regex" "$out"
  exit 1
fi
echo "ok: exit $got, output matches /$regex/"
