"""Compare rendered files with the ones on disk: write them, or report drift as a unified diff."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.generate.render import DOCKERFILE_PREFIX, HEADER_MARK, WORKFLOW_PREFIX


@dataclass(frozen=True)
class Change:
    path: str  # relative to the root, posix
    kind: str  # "create", "update" or "remove"
    old: str | None
    new: str | None

    def diff(self) -> str:
        old = [] if self.old is None else self.old.splitlines(keepends=True)
        new = [] if self.new is None else self.new.splitlines(keepends=True)
        lines = difflib.unified_diff(
            old, new,
            fromfile="/dev/null" if self.old is None else f"a/{self.path}",
            tofile="/dev/null" if self.new is None else f"b/{self.path}",
        )
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def generated_on_disk(root: Path) -> list[str]:
    """Files under `root` that gen-ci owns: the benchmark Dockerfiles and workflows carrying its header."""
    candidates = sorted((root / "docker").glob(Path(DOCKERFILE_PREFIX).name + "*"))
    candidates += sorted((root / Path(WORKFLOW_PREFIX).parent).glob(Path(WORKFLOW_PREFIX).name + "*.yml"))
    return [p.relative_to(root).as_posix() for p in candidates if p.is_file() and _is_generated(p)]


def _is_generated(path: Path) -> bool:
    with path.open("rb") as stream:
        return stream.read(len(HEADER_MARK)).decode("utf-8", "replace") == HEADER_MARK


def changes(root: Path, files: Mapping[str, str], *, prune: bool) -> list[Change]:
    """What writing `files` under `root` would change; with `prune`, generated files no spec produces are removed."""
    found = []
    for rel, text in sorted(files.items()):
        path = root / rel
        old = path.read_bytes().decode("utf-8", "replace") if path.is_file() else None
        if old != text:
            found.append(Change(rel, "create" if old is None else "update", old, text))
    if prune:
        for rel in generated_on_disk(root):
            if rel not in files:
                old = (root / rel).read_bytes().decode("utf-8", "replace")
                found.append(Change(rel, "remove", old, None))
    return sorted(found, key=lambda c: c.path)


def apply(root: Path, found: list[Change]) -> None:
    for change in found:
        path = root / change.path
        if change.new is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(change.new.encode("utf-8"))
