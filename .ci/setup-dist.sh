#!/usr/bin/env bash
# Install the project's `dist` extra (accelerate, for `accelerate launch` of `runner run`) into .venv.
#
#   .ci/setup-dist.sh            # skips work when up to date
#   .ci/setup-dist.sh --force    # reinstall even if the stamp matches
#
# Run after .ci/setup.sh (and after .ci/setup-libero.sh, which installs the CPU torch). accelerate depends
# on torch, and PyPI's Linux torch wheel is a CUDA build: torch is pinned in the same pip command
# (TORCH_REQ, default torch==2.13.0, this machine's CPU wheel), so pip never swaps it for another build.
# Environment: VENV (default <repo>/.venv), TORCH_REQ.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$repo_root/.venv}"
torch_req="${TORCH_REQ:-torch==2.13.0}"
force=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        -h|--help) sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup-dist: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

log() { printf 'setup-dist: %s\n' "$*"; }
[ -x "$venv/bin/python" ] || { echo "setup-dist: error: $venv does not exist; run .ci/setup.sh first" >&2; exit 1; }

# The `dist` extra, read from pyproject.toml (one source of truth for the pin).
mapfile -t dist_reqs < <("$venv/bin/python" - "$repo_root/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["dist"]))
PY
)
reqs=("$torch_req" "${dist_reqs[@]}")
stamp="$venv/.runner-dist-stamp"
key=$(printf '%s\n' "${reqs[@]}" | sha256sum | cut -d' ' -f1)
if [ "$force" = 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] \
    && "$venv/bin/python" -c 'import accelerate' 2>/dev/null; then
    log "$venv is up to date (stamp matches): ${reqs[*]}"
    exit 0
fi
log "pip install ${reqs[*]}  (into $venv)"
out=$(mktemp)
status=0
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${reqs[@]}" >"$out" 2>&1 || status=$?
grep -v -e "^WARNING: Location" -e "^Requirement already satisfied" "$out" | tail -n 25 >&2 || true
rm -f "$out"
[ "$status" = 0 ] || exit "$status"
"$venv/bin/python" -c 'import accelerate, torch; print("setup-dist: accelerate", accelerate.__version__, "| torch", torch.__version__)'
printf '%s\n' "$key" >"$stamp"
