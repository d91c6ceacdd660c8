#!/usr/bin/env bash
# Installs what Parity needs and is missing; a no-op (a few seconds) when all is there.
#   Debian dev packages (HDF5, CLI11, toml++, nlohmann-json, GoogleTest, Google Benchmark),
#   and a Python venv outside the clone holding the pinned torch (LibTorch for the C++ build)
#   and transformers/h5py for golden generation.
# PARITY_HOME (default ~/.cache/parity) holds the venv and the build tree.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PARITY_HOME=${PARITY_HOME:-$HOME/.cache/parity}
venv=$PARITY_HOME/venv
req=$here/golden/requirements.txt

debs=(libhdf5-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
      libgtest-dev libgmock-dev libbenchmark-dev cmake ninja-build g++ python3-venv ccache)
# chromium: tests/report/check_report.sh opens the HTML report in it, and skips where it is not installed, so a
# distribution without the package (Ubuntu ships it as a snap) still bootstraps.
optional=(chromium)
missing() {
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"; done
}
mapfile -t missing_debs < <(missing "${debs[@]}")
# An optional package is tried once per PARITY_HOME: where the distribution has none, later runs stay a no-op.
mapfile -t missing_optional < <(for p in $(missing "${optional[@]}"); do [ -e "$PARITY_HOME/.tried-$p" ] || echo "$p"; done)
if ((${#missing_debs[@]} + ${#missing_optional[@]})); then
  sudo_=""; [ "$(id -u)" = 0 ] || sudo_=sudo
  $sudo_ apt-get update -qq
  if ((${#missing_debs[@]})); then
    echo "[bootstrap] installing Debian packages: ${missing_debs[*]}"
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${missing_debs[@]}" >/dev/null
  fi
  for p in "${missing_optional[@]}"; do
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "$p" >/dev/null 2>&1 || {
      echo "[bootstrap] optional package $p not installed (its test skips)"
      mkdir -p "$PARITY_HOME" && touch "$PARITY_HOME/.tried-$p"
    }
  done
fi

# The venv is reused while its recorded requirements match golden/requirements.txt and what it holds matches their
# pins (a `pip install -U` inside it, or a half-finished install, is caught here; importlib.metadata reads the
# installed versions without importing torch).
pins_hold() {
  "$venv/bin/python" - "$req" 2>/dev/null <<'PY'
import importlib.metadata as md, sys
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if "==" in line:
        name, want = (s.strip() for s in line.split("==", 1))
        got = md.version(name)
        if got != want and not got.startswith(want + "+"):  # torch 2.11.0+cu130 holds the pin 2.11.0
            sys.exit(1)
PY
}
stamp=$venv/.parity-requirements
if ! cmp -s "$req" "$stamp" 2>/dev/null || ! pins_hold; then
  echo "[bootstrap] preparing Python venv at $venv"
  mkdir -p "$PARITY_HOME"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install -q -r "$req"
  cp "$req" "$stamp"
fi
