#!/usr/bin/env bash
# check_report.sh PARITY WORKDIR: the HTML report of a real CPU smoke run plus a synthetic history, opened in
# headless Chromium: it must render (screenshot of real size), hold its key elements once the page has run
# (DOM dump), and log nothing to the console (no script error, no Content-Security-Policy violation, which
# any load from outside the file would be).
# Prints "SKIPPED: chromium not installed" (CTest SKIP_REGULAR_EXPRESSION) when there is no Chromium.
set -euo pipefail
parity=$1 work=$2

browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "SKIPPED: chromium not installed (Debian package chromium; scripts/bootstrap.sh installs it)"
  exit 0
fi

rm -rf "$work"
mkdir -p "$work/history"
fail() { echo "FAIL: $*"; exit 1; }

# A real run: every check's histogram, heatmap and stage row come from it. Its own verdict is the case tests'
# business; a failing or erroring case still belongs in a report.
rc=0
"$parity" run --suite smoke --cpu --no-color --json "$work/smoke.json" >"$work/run.log" 2>&1 || rc=$?
[ -s "$work/smoke.json" ] || { cat "$work/run.log"; fail "parity run --suite smoke (exit $rc) wrote no results"; }
[ "$rc" = 0 ] || echo "note: parity run --suite smoke exited $rc; reporting its results anyway"

# Twelve records of one timed path of a smoke case, the last four 50% slower (beyond the CPU threshold, 25%): a
# step and a SLOWER verdict; their numerics (max_ulp 1, max_abs 1e-7 on out) are below the fp32 run's, so the run
# shows as a numeric regression. Numbers are compared only with numbers from the same platform: the history is
# stamped with the run's own CPU platform.
platform=$(grep -o '"cpu": *"[^"]*"' "$work/smoke.json" | head -1 | sed 's/.*: *"//; s/"$//')
[ -n "$platform" ] || fail "smoke.json names no CPU platform"
awk -v platform="$platform" 'BEGIN {
  for (i = 0; i < 12; ++i) {
    m = i < 8 ? 0.100 : 0.150
    samples = ""
    for (k = 0; k < 16; ++k) samples = samples (k ? "," : "") sprintf("%.6f", m * (1 + 0.002 * (k % 5 - 2)))
    printf "{\"schema\":\"parity.history/1\",\"case\":\"hc_post/hf_tiny_fp32\",\"path\":\"cpu:v1\","
    printf "\"direction\":\"fwd\",\"device\":\"%s\",\"driver\":\"\",\"commit\":\"c0ffee%02d\",", platform, i
    printf "\"build_type\":\"release\",\"source_hash\":\"s1\",\"date\":\"2025-01-%02dT00:00:00Z\",", i + 1
    printf "\"timing\":{\"mode\":\"cpu\",\"median_ms\":%.6f,\"q1_ms\":%.6f,\"q3_ms\":%.6f,\"min_ms\":%.6f,\"n\":16,", m, m * 0.998, m * 1.002, m * 0.996
    printf "\"rel_noise\":0.004,\"sm_clock_mhz\":0,\"dropped_throttled\":0,\"samples_ms\":[%s]},", samples
    printf "\"numerics\":{\"out vs ref:fp64\":{\"max_ulp\":1,\"max_abs\":1e-7,\"mean_abs\":1e-8}}}\n"
  }
}' >"$work/history/hc_post.jsonl"

# parity run --html draws the same page from its own results.
"$parity" run --case hc_post/hf_parity_bf16 --cpu --no-color --html "$work/run.html" >/dev/null 2>&1 || true
grep -q '<table id="cases" class="sortable">' "$work/run.html" 2>/dev/null || fail "parity run --html wrote no report"

"$parity" report --results "$work/smoke.json" --history "$work/history" --out "$work/report.html" \
  || fail "parity report failed"

chrome() {
  timeout 120 "$browser" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --user-data-dir="$(mktemp -d /tmp/parity-chromium.XXXXXX)" --enable-logging=stderr --v=0 "$@"
}
url="file://$work/report.html"
chrome --window-size=1400,2200 --screenshot="$work/report.png" "$url" >/dev/null 2>"$work/screenshot.log" \
  || { cat "$work/screenshot.log"; fail "chromium --screenshot failed"; }
chrome --dump-dom "$url" >"$work/dom.html" 2>"$work/dom.log" || { cat "$work/dom.log"; fail "chromium --dump-dom failed"; }

png_bytes=$(stat -c %s "$work/report.png" 2>/dev/null || echo 0)
[ "$png_bytes" -gt 50000 ] || fail "screenshot $work/report.png is $png_bytes bytes: nothing rendered"

# Console: the page logs nothing, so any console line (an uncaught error, a blocked load) is a failure.
if grep -hE ':CONSOLE|Uncaught' "$work/screenshot.log" "$work/dom.log"; then
  fail "the browser console logged the lines above"
fi

dom=$work/dom.html
need() {  # need DESCRIPTION REGEX: the rendered DOM holds a match
  grep -Eq -- "$2" "$dom" || fail "no $1 in the rendered DOM (/$2/)"
  echo "ok: $1"
}
need "summary" '<section id="summary">'
need "environment table" '<table id="environment">'
need "cases table" '<table id="cases" class="sortable">'
need "sorting script run" 'title="sort by this column"'
need "histogram bar" '<svg class="hist"[^>]*>(<[^>]*>)*<rect [^>]*class="bar'
need "heatmap cells" '<svg class="heat"[^>]*>(<title>[^<]*</title>)?<path class="h[0-9a-z]+" d="M[0-9]+ [0-9]+h'
need "stage table" '<table class="stages">'
need "trend line" '<svg class="trend"[^>]*>.*<polyline points="[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+'
need "detected step" 'class="step up"'
need "regression verdict" 'class="pt v-slower"'
need "regressions list" '<ul class="regressions"><li class="v-slower">'
echo "ok: report $work/report.html, screenshot $work/report.png ($png_bytes bytes), no console output"
