#!/usr/bin/env bash
# compare_roundtrip.sh PARITY SOURCE_DIR: bring-your-own outputs end to end. Export a case's inputs, compute hc_post
# outside Parity (examples/capture_hc_post.py), and check the candidate: it passes (exit 0); tampered, it fails
# naming the check (exit 1); without its output dataset, it is refused naming the dataset (exit 2).
set -u
parity=$1 src=$2
expect() { bash "$(dirname "$0")/expect.sh" "$@" || exit 1; }
python=${PARITY_PYTHON:-${PARITY_HOME:-$HOME/.cache/parity}/venv/bin/python}
[ -x "$python" ] || python=$(command -v python3 || echo python3)
if ! "$python" -c 'import torch, h5py' 2>/dev/null; then
  echo "SKIP: $python cannot import torch and h5py (scripts/bootstrap.sh installs them); compare round trip not run"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case=hc_post/hf_tiny_bf16
compare=("$parity" compare --case $case --no-color)

expect 0 "wrote .*in.h5 \($case\): /grad_outputs/out .*/inputs/comb" "${compare[@]}" --export-inputs "$tmp/in.h5"
"$python" "$src/examples/capture_hc_post.py" "$tmp/in.h5" "$tmp/candidate.h5" || exit 1
expect 0 "parity compare: PASS $case" "${compare[@]}" --candidate "$tmp/candidate.h5"

# One output element pushed far off: the candidate fails its policy, against the reference and the golden.
cp "$tmp/candidate.h5" "$tmp/tampered.h5"
"$python" - "$tmp/tampered.h5" <<'PY' || exit 1
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    out = f["outputs/out"]
    bits = out[()]
    bits.flat[0] ^= 0x4000  # an exponent bit of the bf16 value
    out[...] = bits
PY
expect 1 "FAIL $case +candidate out vs ref:fp64" "${compare[@]}" --candidate "$tmp/tampered.h5"

"$python" - "$tmp/candidate.h5" "$tmp/no_out.h5" <<'PY' || exit 1
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    del f["outputs/out"]
PY
expect 2 "no_out.h5: dataset '/outputs/out': missing" "${compare[@]}" --candidate "$tmp/no_out.h5"
echo "ok: compare round trip"
