#!/usr/bin/env bash
# The README's test command: set everything up, then run the whole test suite.
#   core suite:    .venv (Python 3.11) — spec, generate (with the real linters), engine on real Meta-World,
#                  LIBERO with the offline test assets, PushT and ALOHA
#   lerobot suite: .venv-lerobot (Python 3.12, LeRobot 0.6.1) — the LeRobot policy adapter, parity with the
#                  real lerobot-eval on Meta-World, LIBERO, PushT and ALOHA, and the spec tests again on 3.12
# Exits non-zero on any failure, and when a suite collected no tests (pytest exit 5).
set -uo pipefail
cd "$(dirname "$0")/.."
export MUJOCO_GL=egl PYOPENGL_PLATFORM=egl

bash .ci/setup.sh || { echo "test: setup failed" >&2; exit 1; }
bash .ci/setup-libero.sh || { echo "test: LIBERO setup failed" >&2; exit 1; }
bash .ci/setup-dist.sh || { echo "test: accelerate (dist extra) setup failed" >&2; exit 1; }
bash .ci/setup-openpi.sh || { echo "test: openpi-client setup failed" >&2; exit 1; }
bash .ci/setup-lerobot.sh || { echo "test: LeRobot setup failed" >&2; exit 1; }
bash .ci/setup-libero.sh --lerobot || { echo "test: LIBERO setup for LeRobot failed" >&2; exit 1; }

reports=$(mktemp -d)
status=0
run_suite() {  # name, python, pytest args...
  local name=$1 python=$2
  shift 2
  echo "=== $name: $python -m pytest $*"
  "$python" -m pytest -q -p no:cacheprovider --junitxml="$reports/$name.xml" "$@"
  local rc=$?
  if [ "$rc" -eq 5 ]; then echo "test: $name collected no tests" >&2; rc=1; fi
  [ "$rc" -eq 0 ] || status=1
}

run_suite core .venv/bin/python tests --ignore=tests/lerobot
run_suite lerobot .venv-lerobot/bin/python tests/lerobot tests/test_spec_fixtures.py tests/test_spec_model.py

# One closing line over all suites.
.venv/bin/python - "$reports" <<'PY'
import sys, pathlib, xml.etree.ElementTree as ET
totals = dict(tests=0, failures=0, errors=0, skipped=0)
for report in sorted(pathlib.Path(sys.argv[1]).glob("*.xml")):
    for suite in ET.parse(report).getroot().iter("testsuite"):
        for key in totals:
            totals[key] += int(suite.get(key, 0))
failed = totals["failures"] + totals["errors"]
passed = totals["tests"] - failed - totals["skipped"]
print(f"all suites: {passed} passed, {failed} failed, {totals['skipped']} skipped")
PY
rm -rf "$reports"
exit "$status"
