"""Where a result came from (run.json "provenance"): runner's version and git commit, Python, the versions of the
distributions the spec's env and policy need (runner.install.needs.result_distributions), the host, when, and the
policy's identity (with a policy server's whole metadata as bounded JSON: runner.policies.remote.metadata).
Collected once per session, in the main process, without importing any simulator (installed versions are read
from package metadata)."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import runner
from runner.errors import RunnerError
from runner.spec import Spec
from runner.spec.model import thaw

WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.pt")  # a policy directory's weights, first found
HASH_LIMIT_BYTES = 8 << 30  # a larger weights file is named, not hashed
GIT_TIMEOUT_S = 5.0


MAX_LISTED = 64  # uncommitted spec files named in run.json


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def collect(spec: Spec, served: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The provenance of a session about to start (`ended_at` is filled in when it ends). `served`: what a policy
    server said of the policy it serves (runner.policies.preflight_policy), added to the policy's identity."""
    from runner.install.needs import result_distributions

    policy = thaw(spec.policy)
    return {
        "runner": {"version": runner.__version__,
                   **git_state(Path(runner.__file__).resolve().parent.parent, spec_files(spec))},
        "python": platform.python_version(),
        "packages": package_versions(result_distributions(spec)),
        "host": host(),
        "started_at": now(),
        "ended_at": None,
        "policy": {**policy_identity(policy), **(served or {})},
    }


def spec_files(spec: Spec) -> tuple[Path, ...]:
    """The spec's file and the partials it extends (what a commit must hold to reproduce the run)."""
    if spec.source is None:
        return ()
    from runner.spec import SpecError, resolve

    try:
        doc = resolve(spec.source)
    except SpecError:  # loaded a moment ago; changed since: the spec file alone
        return (Path(spec.source).resolve(),)
    return tuple(sorted({Path(p.file).resolve() for p in doc.values.values() if p.line}))


def git_state(root: Path, specs: tuple[Path, ...] = ()) -> dict[str, Any]:
    """{"commit", "dirty"} when runner runs from a git checkout (not an installed wheel), else {}. "dirty": runner's
    own files or `specs` (the spec and its partials, when inside the checkout) differ from the commit, untracked
    spec files included; those are listed in "uncommitted_specs"."""
    if not (root / ".git").exists() or not (root / "pyproject.toml").is_file():
        return {}
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=GIT_TIMEOUT_S, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=True).stdout
        inside = [str(p.relative_to(root)) for p in specs if p.is_relative_to(root)]
        spec_status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all", "--",
                                      *inside], capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                                     check=True).stdout if inside else ""
    except (OSError, subprocess.SubprocessError):
        return {}
    uncommitted = sorted(line[3:] for line in spec_status.splitlines() if len(line) > 3)[:MAX_LISTED]
    return {"commit": commit[:40], "dirty": bool(status.strip() or uncommitted),
            **({"uncommitted_specs": uncommitted} if uncommitted else {})}


def package_versions(names: Sequence[str]) -> dict[str, str]:
    """Installed versions of `names` (those not installed are left out)."""
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def host() -> dict[str, Any]:
    return {"os": platform.platform(terse=True), "machine": platform.machine(), "cpu": cpu_model(),
            "cores": os.cpu_count() or 0, "gpus": gpus()}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()[:200]
    except OSError:
        pass
    return platform.processor()[:200]


def gpus() -> list[dict[str, str]]:
    """NVIDIA GPUs (name, driver) from nvidia-smi, when it is there."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.splitlines()[:64]:
        name, _, driver = line.partition(",")
        if name.strip():
            found.append({"name": name.strip()[:200], "driver": driver.strip()[:50]})
    return found


def policy_identity(policy: Mapping[str, Any]) -> dict[str, Any]:
    """Which policy ran: a local directory with the sha256 of its weights, a hub id with the revision found in
    the local hub cache, or a python policy's module file with its sha256."""
    from runner.adapters import policy_type

    kind, path = str(policy.get("type", "")), policy.get("path")
    identity: dict[str, Any] = {"type": kind}
    try:
        takes_path = policy_type(kind).path is not None
    except RunnerError:
        takes_path = False
    if not path or not takes_path:
        return identity
    path = str(path)
    identity["path"] = path
    if kind == "python":
        identity.update(_module_file(path.partition(":")[0]))
    elif Path(path).is_dir():
        identity.update(_weights(Path(path)))
    elif kind == "lerobot":
        revision = _cached_revision(path)
        if revision:
            identity["revision"] = revision
    return identity


def _weights(directory: Path) -> dict[str, Any]:
    for name in WEIGHTS:
        file = directory / name
        if file.is_file():
            return {"weights": name, **_file_hash(file)}
    return {}


def _module_file(module: str) -> dict[str, Any]:
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return {}
    origin = getattr(spec, "origin", None)
    if not origin or not Path(origin).is_file():
        return {}
    return {"file": str(origin), **_file_hash(Path(origin))}


def _file_hash(file: Path) -> dict[str, Any]:
    try:
        if file.stat().st_size > HASH_LIMIT_BYTES:
            return {}
        digest = hashlib.sha256()
        with file.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return {}
    return {"sha256": digest.hexdigest()}


def _cached_revision(repo_id: str) -> str | None:
    """The commit the local hub cache resolves `repo_id`'s main branch to (what an offline load uses)."""
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        return None
    ref = Path(HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}" / "refs" / "main"
    try:
        text = ref.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return text[:64] if text and all(c in "0123456789abcdef" for c in text) else None


def described(provenance: Mapping[str, Any]) -> dict[str, str]:
    """How reports show a provenance: runner (version, commit), python, packages, host; plain text."""
    runner_ = provenance.get("runner") or {}
    version = str(runner_.get("version", "?"))
    if runner_.get("commit"):
        version += f" (git {str(runner_['commit'])[:12]}{', uncommitted changes' if runner_.get('dirty') else ''})"
    host = provenance.get("host") or {}
    gpus = "; ".join(f"{g.get('name', '')} (driver {g.get('driver', '')})" for g in host.get("gpus") or [])
    return {
        "runner": version,
        "python": str(provenance.get("python", "?")),
        "packages": ", ".join(f"{k} {v}" for k, v in (provenance.get("packages") or {}).items()) or "-",
        "host": f"{host.get('cpu', '?')}, {host.get('cores', '?')} cores, {host.get('os', '')}"
                + (f"; GPU {gpus}" if gpus else ""),
    }


def finished(provenance: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The same provenance with the session's end time."""
    return None if provenance is None else {**provenance, "ended_at": now()}


__all__ = ["collect", "described", "finished", "policy_identity"]
