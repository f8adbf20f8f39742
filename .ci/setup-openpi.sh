#!/usr/bin/env bash
# Create .venv-openpi with the real packages of the field's two policy-server protocols, for the interop tests
# (tests/test_remote_openpi.py and tests/test_remote_vlaeval.py run tests/openpi_peer.py and tests/vlaeval_peer.py
# with it): openpi's client and server (PyPI's openpi-client and openpi-server; the client pins numpy < 2, so both
# go in with --no-deps beside the packages their modules import) and allenai's vla-evaluation-harness (vla-eval).
# The peers serve runner's own Meta-World scripted experts, so this venv also sees the core venv's packages (runner,
# metaworld, mujoco, dm-tree, ...): a .pth file adds .venv's site-packages after its own, and pip installs only
# what the core lacks. Run after .ci/setup.sh (same Python). Idempotent; prints one line.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-openpi
core=.venv
# the core's versions (already there through the .pth; pinned here so the peers never see others)
shared=(websockets==17.4 msgpack==1.2.4 numpy==2.4.6 pillow==13.0.0 typing_extensions==4.16.0)
# what vla-eval 0.8.0 needs beyond the core's packages (jsonargparse[signatures], lazyregistry), as resolved
vlaeval=(vla-eval==0.8.0 jsonargparse==4.53.0 docstring-parser==0.18.0 typeshed-client==2.15.0 lazyregistry==0.4.0)
ready='import openpi_client.websocket_client_policy, openpi_client.action_chunk_broker, openpi_server
import vla_eval.connection, vla_eval.model_servers.serve, runner, metaworld'
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$ready" 2>/dev/null; then
  echo "setup-openpi: $venv is ready"
  exit 0
fi
if [ ! -x "$core/bin/python" ]; then
  echo "setup-openpi: $core is missing: run .ci/setup.sh first" >&2
  exit 1
fi
core_python=$("$core/bin/python" -c 'import sys; print(sys._base_executable)')
core_site=$("$core/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"${PYTHON:-$core_python}" -m venv "$venv"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ "$(basename "$(dirname "$site")")" != "$(basename "$(dirname "$core_site")")" ]; then
  echo "setup-openpi: $venv ($site) and $core ($core_site) must have the same Python" >&2
  exit 1
fi
# after the venv's own site-packages; also runs the core's .pth files (runner's editable install)
echo "import site; site.addsitedir('$(cd "$core_site" && pwd)')" >"$site/zz_runner_core.pth"
log=$(mktemp)
if ! { "$venv/bin/python" -m pip install -q "${shared[@]}" "${vlaeval[@]}" \
       && "$venv/bin/python" -m pip install -q --no-deps openpi-client==0.1.2 openpi-server==0.1.0 \
       && "$venv/bin/python" -c "$ready"; } >"$log" 2>&1; then
  grep -v "^WARNING: Location" "$log" >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
"$venv/bin/python" -c 'import numpy, vla_eval; print("setup-openpi: openpi-client 0.1.2, openpi-server 0.1.0, vla-eval",
  vla_eval.__version__, "with numpy", numpy.__version__, "and the core venv'"'"'s runner, metaworld, mujoco")'
