"""Installed Python distributions, read from their metadata (nothing is imported)."""

from __future__ import annotations

from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name


# Distributions that install the same import package (they clash in one venv; either one meets a need for the other).
SAME_PACKAGE = (frozenset({"pygame", "pygame-ce"}),)


def alternatives(name: str) -> frozenset[str]:
    """The canonical names that meet a need for distribution `name`: itself, and those installing the same package."""
    canonical = canonicalize_name(name)
    return frozenset().union({canonical}, *(group for group in SAME_PACKAGE if canonical in group))


def installed(name: str) -> bool:
    """Whether `name`, or a distribution of the same package (pygame for pygame-ce), is installed here."""
    for candidate in sorted(alternatives(name)):
        try:
            metadata.version(candidate)
            return True
        except metadata.PackageNotFoundError:
            continue
    return False


def requirements(name: str) -> list[str]:
    """The canonical names an installed distribution requires directly (markers evaluated here, extras left out);
    [] when it is not installed."""
    try:
        lines = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            out.append(canonicalize_name(requirement.name))
    return out


def depends_on(name: str, target: str) -> bool:
    """Whether the installed distribution `name` requires `target`, directly or through its dependencies."""
    seen: set[str] = set()
    todo = [canonicalize_name(name)]
    while todo:
        current = todo.pop()
        if current == canonicalize_name(target):
            return True
        if current not in seen:
            seen.add(current)
            todo.extend(requirements(current))
    return False


__all__ = ["SAME_PACKAGE", "alternatives", "depends_on", "installed", "requirements"]
