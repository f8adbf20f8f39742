"""Atomic file writes: a reader sees the old file or the complete new one, never a mix (standard library only, so
that every layer may write this way)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from runner.errors import OutputError


def write_text_atomic(path: Path, text: str) -> None:
    """Write text so that `path` holds either its old content or the complete new one, never a mix.

    Temp file in the same directory, fsync, os.replace, then fsync of the directory (best effort).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide results from other users and CI artifact readers
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["write_text_atomic"]
