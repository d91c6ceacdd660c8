#!/usr/bin/env bash
# hc_seed_sweep.sh OUTDIR: a case file of hc_pre and hc_head at V4 width (hidden 4096, hc 4) over seeds 100-123 at 37
# and 256 tokens, with the policies of cases/hc.toml's v4_width cases, to see how far a fast path's error on the
# few-element gradients (grad/scale, grad/base) moves from draw to draw against its naive_relative yardstick.
#   bash reports/analysis/hc_seed_sweep.sh /tmp/sweep
#   parity run --cases-dir /tmp/sweep --suite sweep [--variant cuda:v1] --json sweep.json
#   python3 reports/analysis/hc_seed_sweep.py sweep.json [--csv out.csv]
set -euo pipefail
out=$1
mkdir -p "$out"
policies() {  # OP: the naive_relative policy of every output
  local outs="mixes pre post comb collapsed"
  [ "$1" = hc_head ] && outs="mixes pre out"
  for o in $outs; do echo "$o = \"naive_relative(k=2, floor=1)\""; done
  echo '"grad/x" = "naive_relative(k=2, floor=1)"'
  echo '"grad/fn" = "naive_relative(k=2, floor=1)"'
  echo '"grad/base" = "naive_relative(k=2, floor=4)"'
  echo '"grad/scale" = "naive_relative(k=2, floor=4)"'
}
{
  sed -n '/^family = "hc"/,/^post_mult/p' "$(dirname "$0")/../../cases/hc.toml"
  for op in hc_pre hc_head; do
    for tokens in 37 256; do
      for seed in $(seq 100 123); do
        printf '\n[[case]]\nid = "%s/sweep_t%s_s%s"\ncovers = "seed sweep"\nseed = %s\n' "$op" "$tokens" "$seed" "$seed"
        printf 'dims = { tokens = %s, hc = 4, hidden = 4096 }\ndtype = "bf16"\nsuites = ["sweep"]\n[case.policy]\n' "$tokens"
        policies "$op"
      done
    done
  done
} >"$out/hc_seed_sweep.toml"
