#!/usr/bin/env bash
# Create .venv-openpi with openpi's own client library (PyPI's openpi-client), for the wire-format interop tests
# (tests/test_remote_openpi.py runs tests/openpi_peer.py with it). openpi-client pins numpy < 2, so it is installed
# with --no-deps into a venv of its own, beside the packages its modules import. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-openpi
requirements=(websockets==17.4 msgpack==1.2.4 numpy==2.4.6 pillow==13.0.0 typing_extensions==4.16.0)
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import openpi_client.websocket_client_policy' 2>/dev/null; then
  echo "setup-openpi: $venv is ready"
  exit 0
fi
python_bin="${PYTHON:-$(command -v python3.11 || command -v python3)}"
"$python_bin" -m venv "$venv"
log=$(mktemp)
if ! { "$venv/bin/python" -m pip install -q "${requirements[@]}" \
       && "$venv/bin/python" -m pip install -q --no-deps openpi-client==0.1.2; } >"$log" 2>&1; then
  grep -v "^WARNING: Location" "$log" >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
"$venv/bin/python" -c 'import openpi_client, numpy; print("setup-openpi: openpi-client 0.1.2 with numpy", numpy.__version__)'
