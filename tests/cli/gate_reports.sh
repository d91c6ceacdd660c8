#!/usr/bin/env bash
# gate_reports.sh CODE OUTPUT_REGEX JUNIT_REGEX PARITY ARGS...: runs `PARITY gate ARGS` writing every report, requires
# exit CODE and output matching OUTPUT_REGEX, a JUnit file that an XML parser accepts and that matches JUNIT_REGEX,
# a Markdown summary and a JSON document whose gate section holds the same exit code.
set -u
want=$1 out_regex=$2 junit_regex=$3 parity=$4
shift 4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash "$(dirname "$0")/expect.sh" "$want" "$out_regex" "$parity" gate "$@" --no-color \
  --junit "$tmp/gate.xml" --markdown "$tmp/gate.md" --json "$tmp/gate.json" || exit 1
for f in gate.xml gate.md gate.json; do
  [ -s "$tmp/$f" ] || { echo "gate wrote no $f"; exit 1; }
done
python=$(command -v python3 || echo "${PARITY_HOME:-$HOME/.cache/parity}/venv/bin/python")
if "$python" -c 'import xml' 2>/dev/null; then
  "$python" - "$tmp/gate.xml" "$tmp/gate.json" "$want" <<'PY' || exit 1
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "testsuites", root.tag
assert root.findall("testsuite/testcase"), "no testcase"
gate = json.load(open(sys.argv[2]))["gate"]
assert gate["exit_code"] == int(sys.argv[3]), gate
print(f"JUnit parses: {len(root.findall('testsuite/testcase'))} testcases; JSON gate exit {gate['exit_code']}")
PY
else
  echo "note: no python to parse the XML; checked by pattern only"
fi
grep -Ezq -- "$junit_regex" "$tmp/gate.xml" || { printf 'JUnit lacks /%s/:\n' "$junit_regex"; cat "$tmp/gate.xml"; exit 1; }
echo "ok: JUnit matches /$junit_regex/"
