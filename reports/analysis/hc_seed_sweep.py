"""Summarise a seed sweep (hc_seed_sweep.sh): per op, tokens, variant and few-element tensor, the ratio of the fast
path's max abs error to the naive composition's over the seeds, and how many draws fail naive_relative(k, floor)
for a few (k, floor). --csv writes the numbers behind it (case, variant, tensor, err, naive, ulp) for the record.

    python3 reports/analysis/hc_seed_sweep.py gpu.json cpu.json --csv sweep.csv
"""
import argparse
import csv
import json
import re
import statistics
from collections import defaultdict

SUMMARY = re.compile(r"max abs ([0-9.e+-]+) \(<= [0-9.e+-]+ allowed = [0-9.]+ x naive ([0-9.e+-]+) \+ "
                     r"[0-9.]+ x ulp ([0-9.e+-]+)")
TENSORS = ("grad/scale", "grad/base", "mixes")
POLICIES = ((2, 4), (2, 16), (4, 4))


def rows(path):
    for case in json.load(open(path))["cases"]:
        m = re.match(r"(\w+)/sweep_t(\d+)_s(\d+)$", case["case"])
        for check in case["checks"] if m else ():
            s = SUMMARY.search(check["summary"])
            if check["against"] == "ref:fp64" and check["tensor"] in TENSORS and s:
                err, naive, ulp = map(float, s.groups())
                yield dict(case=case["case"], op=m[1], tokens=int(m[2]), variant=check["variant"],
                           tensor=check["tensor"], err=err, naive=naive, ulp=ulp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--csv")
    args = ap.parse_args()
    data = [r for p in args.results for r in rows(p)]
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["case", "variant", "tensor", "err", "naive", "ulp"], extrasaction="ignore")
            w.writeheader()
            w.writerows(data)
    groups = defaultdict(list)
    for r in data:
        groups[(r["op"], r["tokens"], r["variant"], r["tensor"])].append(r)
    print("op       tokens variant  tensor       n  err/naive: median   p90    max  | ulp of err: median max | "
          + " ".join(f"fail k={k},floor={f}" for k, f in POLICIES))
    for key, rs in sorted(groups.items()):
        ratio = sorted(r["err"] / r["naive"] if r["naive"] else float("inf") for r in rs)
        ulps = sorted(r["err"] / r["ulp"] for r in rs)
        fails = [sum(r["err"] > k * r["naive"] + f * r["ulp"] for r in rs) for k, f in POLICIES]
        print(f"{key[0]:8} {key[1]:6} {key[2]:8} {key[3]:11} {len(rs):2}  {statistics.median(ratio):14.2f} "
              f"{ratio[int(0.9 * len(ratio))]:6.2f} {ratio[-1]:6.2f}  | {statistics.median(ulps):10.1f} {ulps[-1]:6.1f} | "
              + " ".join(f"{n:15d}" for n in fails))


if __name__ == "__main__":
    main()
