"""This project's own pyproject.toml, as the specs see it: the extras `install.extras` may name.

Read from the checkout (what an image build and `runner install` install), else from the installed
distribution's metadata (which an editable install only refreshes on reinstall).
"""

from __future__ import annotations

import functools
import tomllib
from importlib import metadata
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@functools.cache
def extras() -> dict[str, tuple[str, ...]]:
    """Extra name -> its requirement strings (markers included)."""
    try:
        with PYPROJECT.open("rb") as f:
            table = tomllib.load(f)["project"]["optional-dependencies"]
        return {name: tuple(reqs) for name, reqs in sorted(table.items())}
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        pass
    try:
        meta = metadata.metadata("runner")
    except metadata.PackageNotFoundError:
        return {}
    out: dict[str, list[str]] = {name: [] for name in meta.get_all("Provides-Extra") or ()}
    for req in meta.get_all("Requires-Dist") or ():
        requirement, _, marker = req.partition(";")
        if "extra ==" in marker:
            name = marker.split("extra ==")[1].strip().strip("'\"")
            rest = " and ".join(p for p in marker.split(" and ") if "extra ==" not in p).strip()
            out.setdefault(name, []).append(requirement.strip() + (f"; {rest}" if rest else ""))
    return {name: tuple(reqs) for name, reqs in sorted(out.items())}


def extra_names() -> tuple[str, ...]:
    return tuple(extras())


__all__ = ["PYPROJECT", "extra_names", "extras"]
