"""Compare rendered files with the ones on disk: write them, or report drift as a unified diff."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.atomic import write_text_atomic
from runner.errors import ConfigError, OutputError
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


def blocked(root: Path, rel: str) -> str | None:
    """Why gen-ci cannot write `rel` under `root` (something else is in its place or its folder's), or None."""
    path = root / rel
    for parent in reversed(path.relative_to(root).parents[:-1]):  # docker, .github, .github/workflows, ...
        where = root / parent
        if where.is_symlink() or (where.exists() and not where.is_dir()):
            return f"{parent.as_posix()} is {_kind(where)}, not a folder: gen-ci writes {rel} in it"
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return f"{rel} is {_kind(path)}, not a file gen-ci can write: move it away"
    return None


def _kind(path: Path) -> str:
    if path.is_symlink():
        return "a symbolic link"
    if path.is_dir():
        return "a folder"
    if path.is_file():
        return "a file"
    return "a special file (a FIFO, socket or device)"


def changes(root: Path, files: Mapping[str, str], *, prune: bool) -> list[Change]:
    """What writing `files` under `root` would change; with `prune`, generated files no spec produces are removed.
    ConfigError, before anything is written, when a path is taken by something gen-ci must not write through."""
    problems = [why for rel in sorted(files) if (why := blocked(root, rel))]
    if problems:
        raise ConfigError("gen-ci: " + "; ".join(problems))
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
    """Write (atomically: a reader never sees half a file) or remove each changed file; OutputError on failure."""
    for change in found:
        path = root / change.path
        try:
            if change.new is None:
                path.unlink()
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(path, change.new)
        except OSError as exc:
            raise OutputError(f"gen-ci: cannot write {change.path}: {exc.strerror or exc}") from None
