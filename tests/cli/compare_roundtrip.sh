#!/usr/bin/env bash
# compare_roundtrip.sh PARITY SOURCE_DIR: bring-your-own outputs end to end. Export a case's inputs, compute hc_post
# outside Parity (examples/capture_hc_post.py), and check the candidate: it passes (exit 0); tampered, it fails
# naming the check (exit 1); without its output dataset, or with inputs, upstream gradients or stages that are not the
# case's, it is refused naming the dataset (exit 2).
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

# What a candidate hands back beyond its outputs must be the case's own, or is refused rather than left unread.
"$python" - "$tmp/candidate.h5" "$tmp" <<'PY' || exit 1
import shutil, sys, h5py, numpy as np
src, tmp = sys.argv[1], sys.argv[2]
def other_gout(f):  # the exported upstream gradient, one bit off
    with h5py.File(f"{tmp}/in.h5") as exported:
        exported.copy("grad_outputs", f)
    g = f["grad_outputs/out"]
    bits = g[()]
    bits.flat[0] ^= 1
    g[...] = bits
def fp32(f, name, values):
    f.create_dataset(name, data=values).attrs["dtype"] = "fp32"
for name, edit in [("extra_input", lambda f: fp32(f, "inputs/bogus", np.zeros(3, np.float32))),
                   ("other_gout", other_gout),
                   ("stages", lambda f: fp32(f, "stages/mix", np.full(3, np.nan, np.float32)))]:
    shutil.copy(src, f"{tmp}/{name}.h5")
    with h5py.File(f"{tmp}/{name}.h5", "r+") as f:
        edit(f)
PY
expect 2 "extra_input.h5: dataset '/inputs/bogus': the case has no such tensor" "${compare[@]}" --candidate "$tmp/extra_input.h5"
expect 2 "other_gout.h5: dataset '/grad_outputs/out': differs from the case's" "${compare[@]}" --candidate "$tmp/other_gout.h5"
expect 2 "stages.h5: group '/stages': not read by parity compare" "${compare[@]}" --candidate "$tmp/stages.h5"
echo "ok: compare round trip"
