#!/usr/bin/env bash
# tampered_golden.sh PARITY GOLDEN_DIR: copies the goldens, flips one byte of one file, and requires
# `parity golden verify` on the copy to exit 2 naming the file and the sha256 mismatch.
set -u
parity=$1 golden=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$golden"/. "$tmp"/
f=$tmp/hc/hc_post_tiny_fp32.h5
printf '\x55' | dd of="$f" bs=1 seek=4096 count=1 conv=notrunc status=none
exec bash "$(dirname "$0")/expect.sh" 2 "hc_post_tiny_fp32.h5: sha256 mismatch" "$parity" golden verify --golden-dir "$tmp"
