#!/usr/bin/env bash
# golden_regenerate.sh PARITY: `parity golden verify --regenerate` re-runs golden/generate.py. On the CPU platform
# that made the goldens it must find them bitwise (exit 0); on another, LibTorch's fp32 sums run in another order and
# it must report the drift (exit 1) with each dataset's size of it and both platforms named (results.hpp
# cpu_platform). Anything else fails.
# Skipped (77) where the generator's Python (as the CLI picks it) lacks h5py or transformers, as on the GPU machines.
set -u
parity=$1
py=${PARITY_PYTHON:-${PARITY_HOME:-${HOME:-/root}/.cache/parity}/venv/bin/python}
[ -n "${PARITY_PYTHON:-}" ] || [ -x "$py" ] || py=python3
"$py" -c "import h5py, transformers, torch" 2>/dev/null || { echo "skipped: $py cannot import h5py, transformers, torch"; exit 77; }
out=$("$parity" golden verify --regenerate 2>&1)
rc=$?
fail() { printf '%s\n--- output ---\n%s\n' "$1" "$out"; exit 1; }
case $rc in
  0) grep -q "^golden: regenerated bitwise identical$" <<<"$out" || fail "exit 0 without 'regenerated bitwise identical'"
     grep -q "^DRIFT" <<<"$out" && fail "exit 0 with DRIFT lines" ;;
  1) grep -q "^DRIFT" <<<"$out" || fail "exit 1 without a DRIFT line"
     bad=$(grep "^DRIFT .* elements differ" <<<"$out" | grep -Ev "elements differ, max [0-9]+ ULP, max abs [0-9.e+-]+$")
     [ -z "$bad" ] || fail "DRIFT lines without the drift's size: $bad"
     grep -q "^golden: the committed files were made on " <<<"$out" || fail "the goldens' platform is not named"
     grep -q "^golden: regenerated on cpu " <<<"$out" || fail "this machine's platform is not named" ;;
  *) fail "exit $rc" ;;
esac
echo "ok: exit $rc"
