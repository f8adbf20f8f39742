"""A spec's install plan: everything an environment needs to run the spec, in the order it is installed.

One plan, two renderings, so they cannot drift: the benchmark's Dockerfile (runner.generate renders it
from `InstallPlan`) and a local virtual environment (`runner install`, runner.install.local, runs the same
steps with pip). The steps, in order:

  1. system packages (`apt`: the spec's `install.apt` and what every image needs);
  2. a virtual environment with Python `python`;
  3. this project's dependencies with the spec's `extras`, and the pinned `pip` requirements;
  4. this project itself (editable), then the spec's own `code` (local directories of user code, e.g.
     the module a `python` policy names), each installed from its directory;
  5. `env`: environment variables of the image (`runner run` sets the same for itself and its workers);
  6. `setup`: commands run once installation is done (e.g. `runner prepare specs/libero.yaml`).

Pure data from a validated spec and this project's pyproject.toml; imports no simulator.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from runner.errors import ConfigError
from runner.spec import Spec
from runner.spec.project import extras as project_extras

BASE_APT = ("ca-certificates",)  # every image (HTTPS to PyPI and the hub)
# Runner's own dependencies (pyproject [project].dependencies): always installed.
CORE = ("pyyaml", "jsonschema", "jinja2", "numpy", "gymnasium", "imageio", "imageio-ffmpeg", "tqdm", "packaging")


@dataclass(frozen=True)
class Step:
    name: str
    run: tuple[str, ...]


@dataclass(frozen=True)
class InstallPlan:
    spec_name: str
    python: str  # "3.12"
    apt: tuple[str, ...]  # sorted, BASE_APT included
    extras: tuple[str, ...]  # sorted
    pip: tuple[str, ...]  # sorted pinned requirements
    code: tuple[str, ...]  # local package directories, relative to the project root, in spec order
    env: tuple[tuple[str, str], ...]  # sorted
    setup: tuple[Step, ...]  # in spec order

    @classmethod
    def of(cls, spec: Spec) -> InstallPlan:
        install = spec.install
        return cls(
            spec_name=spec.name,
            python=install.python,
            apt=tuple(sorted(set(BASE_APT) | set(install.apt))),
            extras=tuple(sorted(install.extras)),
            pip=tuple(sorted(install.pip)),
            code=tuple(install.code),
            env=tuple(sorted(install.env.items())),
            setup=tuple(Step(s.name, tuple(s.run)) for s in install.setup),
        )

    @classmethod
    def union(cls, plans: Sequence[InstallPlan]) -> InstallPlan:
        """One environment for several specs (`runner install A B`): everything each needs; one Python."""
        pythons = sorted({p.python for p in plans})
        if len(pythons) > 1:
            raise ConfigError(f"the specs want different Pythons ({', '.join(pythons)}): install them into "
                              "separate venvs")
        env: dict[str, str] = {}
        for plan in plans:
            for key, value in plan.env:
                if env.setdefault(key, value) != value:
                    raise ConfigError(f"the specs set install.env.{key} differently ({env[key]!r}, {value!r}): "
                                      "install them into separate venvs")
        return cls(
            spec_name="+".join(p.spec_name for p in plans),
            python=pythons[0],
            apt=tuple(sorted({a for p in plans for a in p.apt})),
            extras=tuple(sorted({e for p in plans for e in p.extras})),
            pip=tuple(sorted({r for p in plans for r in p.pip})),
            code=tuple(dict.fromkeys(c for p in plans for c in p.code)),
            env=tuple(sorted(env.items())),
            setup=tuple(s for p in plans for s in p.setup),
        )

    def requirements(self) -> list[Requirement]:
        """What step 3 installs, as requirements: the extras' (with markers) and the pins."""
        extras = project_extras()
        out = []
        for text in [*(r for name in self.extras for r in extras.get(name, ())), *self.pip]:
            try:
                out.append(Requirement(text))
            except InvalidRequirement:
                continue
        return out

    def distributions(self) -> dict[str, str]:
        """Distribution name (canonical) -> the requirement that brings it, for this plan's Python version;
        runner's own dependencies included. Requirements whose marker excludes this Python are left out."""
        env = {**default_environment(), "python_version": self.python, "python_full_version": f"{self.python}.0"}
        found = {name: "runner" for name in CORE}
        for requirement in self.requirements():
            if requirement.marker is None or requirement.marker.evaluate(env):
                found.setdefault(canonicalize_name(requirement.name), str(requirement))
        return found

    def excluded(self) -> dict[str, str]:
        """Distributions the extras name but whose marker excludes this plan's Python: name -> requirement."""
        env = {**default_environment(), "python_version": self.python, "python_full_version": f"{self.python}.0"}
        return {canonicalize_name(r.name): str(r) for r in self.requirements()
                if r.marker is not None and not r.marker.evaluate(env)}


def python_tuple(version: str) -> tuple[int, int]:
    match = re.match(r"^(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


__all__ = ["BASE_APT", "InstallPlan", "Step", "python_tuple"]
