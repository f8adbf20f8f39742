"""`runner install`: a spec's install plan (runner.install.plan) rendered as a local virtual environment.

The same steps, in the same order and with the same pins, as the benchmark's Dockerfile, the other rendering:

  apt      missing Debian packages are installed with apt-get when this process may (root, or sudo without a
           password); otherwise the command to run is printed and installation goes on
  python   an interpreter of install.python: this one, `pythonX.Y` on PATH, pyenv's, or uv's (found or
           installed); `--python PATH` names one
  venv     created (or reused when it already has that Python)
  deps     this project (editable) with the spec's extras and pins, resolved together (uv when it is on PATH
           or in this environment, else pip)
  code     the spec's install.code directories
  setup    install.setup commands, run from the project root with the venv first on PATH and install.env set
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.errors import ConfigError, MissingDependencyError, RunnerError
from runner.install.plan import InstallPlan, python_tuple

PYENV = Path.home() / ".pyenv" / "versions"


class InstallError(RunnerError):
    """A step of `runner install` failed (exit 1); the message names the step and its command."""


@dataclass(frozen=True)
class Action:
    step: str  # apt, python, venv, deps, code, setup
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)  # added to the environment
    cwd: str | None = None

    def shown(self) -> str:
        import shlex

        return shlex.join(self.argv)


def find_python(version: str, given: str | None = None) -> Path | None:
    """An interpreter of `version` ("3.12"): `given`, this one, `python3.12` on PATH, pyenv's newest, uv's."""
    want = python_tuple(version)
    candidates: list[str | Path] = []
    if given:
        candidates.append(given)
    candidates += [sys.executable, f"python{version}"]
    if PYENV.is_dir():
        candidates += sorted(PYENV.glob(f"{version}.*/bin/python{version}"), key=_patch, reverse=True)
    for candidate in candidates:
        path = shutil.which(str(candidate)) if not Path(candidate).is_absolute() else str(candidate)
        if path and _version_of(path) == want:
            return Path(path)
    uv = uv_command()
    if uv is not None:
        found = subprocess.run([*uv, "python", "find", version], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            return Path(found.stdout.strip())
    return None


def _patch(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", path.parent.parent.name))


def _version_of(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return python_tuple(out.stdout.strip()) if out.returncode == 0 else None


def uv_command() -> list[str] | None:
    """How to run uv here: `uv` on PATH, or the one installed in this Python environment."""
    found = shutil.which("uv")
    if found:
        return [found]
    beside = Path(sys.executable).with_name("uv")
    return [str(beside)] if beside.is_file() else None


def missing_apt(packages: Sequence[str]) -> list[str]:
    """The Debian packages (name or name=version) that dpkg does not report installed; [] where there is no dpkg."""
    if shutil.which("dpkg-query") is None:
        return []
    absent = []
    for package in packages:
        name = package.split("=")[0]
        out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True)
        if "install ok installed" not in out.stdout:
            absent.append(package)
    return absent


def apt_prefix() -> list[str] | None:
    """How this process may run apt-get: directly (root), with `sudo -n`, or not at all (None)."""
    if shutil.which("apt-get") is None:
        return None
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    return None


def plan_actions(plan: InstallPlan, venv: Path, root: Path, python: Path, *, uv: list[str] | None,
                 apt: list[str] | None, apt_missing: Sequence[str], spec_root: Path | None = None) -> list[Action]:
    """What installing `plan` into `venv` runs, in order (pure: for --dry-run, tests and the real run). `root`:
    runner's checkout; `spec_root`: the project the specs belong to (install.code and setup are relative to it)."""
    spec_root = spec_root or root
    actions: list[Action] = []
    if apt_missing and apt is not None:
        noninteractive = {"DEBIAN_FRONTEND": "noninteractive"}
        actions.append(Action("apt", (*apt, "apt-get", "update", "-qq"), noninteractive))
        actions.append(Action("apt", (*apt, "apt-get", "install", "-y", "-qq", "--no-install-recommends",
                                      *apt_missing), noninteractive))
    venv_python = str(venv / "bin" / "python")
    if uv is not None:
        actions.append(Action("venv", (*uv, "venv", "--python", str(python), str(venv))))
        pip = (*uv, "pip", "install", "--python", venv_python)
    else:
        actions.append(Action("venv", (str(python), "-m", "venv", str(venv))))
        actions.append(Action("venv", (venv_python, "-m", "pip", "install", "-q", "--upgrade", "pip")))
        pip = (venv_python, "-m", "pip", "install", "-q")
    project = str(root) + (f"[{','.join(plan.extras)}]" if plan.extras else "")
    actions.append(Action("deps", (*pip, "--editable", project, *plan.pip)))
    if plan.code:
        actions.append(Action("code", (*pip, *(str(spec_root / p) for p in plan.code))))
    bin_dir = str(venv / "bin")
    for step in plan.setup:
        env = {**dict(plan.env), "VIRTUAL_ENV": str(venv), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        actions.append(Action("setup", step.run, env, str(spec_root)))
    return actions


def install(plan: InstallPlan, venv: Path, root: Path, *, spec_root: Path | None = None, python: str | None = None,
            use_apt: bool = True, dry_run: bool = False, say: Callable[[str], None] = print) -> list[Action]:
    """Install `plan` into `venv` (see the module docstring); returns what was (or, dry, would be) run."""
    start = time.perf_counter()
    interpreter = find_python(plan.python, python)
    if interpreter is None:
        uv = uv_command()
        if uv is None or dry_run:
            raise MissingDependencyError(
                f"Python {plan.python} (install.python) is not installed here: install it (e.g. `uv python install "
                f"{plan.python}` or `pyenv install {plan.python}`) or pass --python PATH")
        say(f"install: Python {plan.python} not found; installing it with uv")
        _run(Action("python", (*uv, "python", "install", plan.python)), say)
        interpreter = find_python(plan.python, python)
        if interpreter is None:
            raise MissingDependencyError(f"uv installed Python {plan.python} but it cannot be found; "
                                         "pass --python PATH")
    existing = venv / "bin" / "python"
    if existing.exists() and _version_of(str(existing)) != python_tuple(plan.python):
        raise ConfigError(f"{venv} holds a venv of another Python than install.python {plan.python}; choose another "
                          "--venv or remove it")
    absent = missing_apt(plan.apt) if use_apt else []
    apt = apt_prefix() if absent else None
    if absent and apt is None:
        say(f"install: these system packages are missing and this process cannot install them; run:\n"
            f"    sudo apt-get install --no-install-recommends {' '.join(absent)}")
    actions = plan_actions(plan, venv, root, interpreter, uv=uv_command(), apt=apt, apt_missing=absent,
                           spec_root=spec_root)
    if existing.exists():  # reuse it: skip creating it again
        actions = [a for a in actions if a.step != "venv" or "pip" in a.argv]
    for i, action in enumerate(actions, 1):
        say(f"install: [{i}/{len(actions)}] {action.step}: {action.shown()}")
        if not dry_run:
            _run(action, say)
    if not dry_run:
        size = sum(p.stat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink())
        say(f"install: {venv} ready in {time.perf_counter() - start:.0f} s ({size / 2**20:,.0f} MiB)")
    return actions


def _run(action: Action, say: Callable[[str], None]) -> None:
    env = {**os.environ, **action.env}
    try:
        proc = subprocess.run(list(action.argv), cwd=action.cwd, env=env)
    except OSError as exc:
        raise InstallError(f"install: {action.step}: cannot run {action.argv[0]}: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        raise InstallError(f"install: {action.step} failed (exit {proc.returncode}): {action.shown()}")


__all__ = ["Action", "InstallError", "apt_prefix", "find_python", "install", "missing_apt", "plan_actions",
           "uv_command"]
