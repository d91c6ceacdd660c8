#!/usr/bin/env bash
# tampered_golden.sh PARITY GOLDEN_DIR: copies of the goldens that `parity golden verify` must refuse (exit 2, naming
# the file and what is wrong): one byte flipped, one byte appended, a file listed twice in the manifest (the stale
# entry last), a golden the manifest does not list, and (where the venv's h5py is there) a golden without one of its
# provenance attributes.
set -u
parity=$1 golden=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect() { bash "$(dirname "$0")/expect.sh" "$@" || exit 1; }
fresh() { rm -rf "$tmp/g" && mkdir "$tmp/g" && cp -r "$golden"/. "$tmp/g"/; }
f=hc/hc_post_tiny_fp32.h5

fresh
printf '\x55' | dd of="$tmp/g/$f" bs=1 seek=4096 count=1 conv=notrunc status=none
expect 2 "hc_post_tiny_fp32.h5: sha256 mismatch" "$parity" golden verify --golden-dir "$tmp/g"

fresh
printf '\x00' >>"$tmp/g/$f"
expect 2 "hc_post_tiny_fp32.h5: [0-9]+ bytes, the manifest says [0-9]+" "$parity" golden verify --golden-dir "$tmp/g"

fresh
# A stale entry first and the true one after it: JSON keeps the last, so the file would verify; listed twice, refused.
sed -i "s|^  \"files\": {|  \"files\": {\n    \"$f\": {\"bytes\": 1, \"sha256\": \"$(printf '0%.0s' {1..64})\"},|" "$tmp/g/MANIFEST.json"
expect 2 "MANIFEST.json: '$f' is listed twice" "$parity" golden verify --golden-dir "$tmp/g"

fresh
cp "$tmp/g/$f" "$tmp/g/hc/unlisted.h5"
expect 2 "hc/unlisted.h5: not listed in .*MANIFEST.json" "$parity" golden verify --golden-dir "$tmp/g"

python=${PARITY_PYTHON:-${PARITY_HOME:-$HOME/.cache/parity}/venv/bin/python}
if "$python" -c 'import h5py' 2>/dev/null; then
  fresh
  "$python" - "$tmp/g" "$f" <<'PY' || exit 1
import hashlib, json, pathlib, sys, h5py
root, rel = pathlib.Path(sys.argv[1]), sys.argv[2]
with h5py.File(root / rel, "r+") as h:
    del h.attrs["generator_sha256"]
manifest = json.loads((root / "MANIFEST.json").read_text())
data = (root / rel).read_bytes()
manifest["files"][rel] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
(root / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
PY
  expect 2 "hc_post_tiny_fp32.h5: missing root attr 'generator_sha256'" "$parity" golden verify --golden-dir "$tmp/g"
else
  echo "note: $python cannot import h5py: the provenance check is not run"
fi
echo "ok: tampered goldens refused"
