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
      libgtest-dev libgmock-dev libbenchmark-dev cmake ninja-build g++ python3-venv ccache
      chromium)  # chromium: tests/report/check_report.sh opens the HTML report in it
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[bootstrap] installing Debian packages: ${missing[*]}"
  sudo_=""; [ "$(id -u)" = 0 ] || sudo_=sudo
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The venv is reused while its recorded requirements match golden/requirements.txt.
stamp=$venv/.parity-requirements
if ! cmp -s "$req" "$stamp" 2>/dev/null; then
  echo "[bootstrap] preparing Python venv at $venv"
  mkdir -p "$PARITY_HOME"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install -q -r "$req"
  cp "$req" "$stamp"
fi
