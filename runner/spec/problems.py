"""Positions in spec files and the problems reported against them."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from runner.errors import ConfigError
from runner.text import cut, escape

MAX_PATH_ECHO = 200  # characters of a dotted key in a message
MAX_MESSAGE = 600  # characters of a message: whatever value it echoes, a problem stays one readable line


@dataclass(frozen=True, order=True)
class Pos:
    """Where a value was written: a file with 1-based line and column, or an origin like `--set`."""

    file: str
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}" if self.line else self.file


@dataclass(frozen=True)
class Problem:
    pos: Pos
    path: str
    message: str
    hint: str | None = None

    def __str__(self) -> str:
        """One line, whatever the spec holds: hidden characters (line breaks, ESC, bidi controls) escaped."""
        path = cut(escape(self.path), MAX_PATH_ECHO)
        where = f"{escape(str(self.pos))}: {path}: " if self.path else f"{escape(str(self.pos))}: "
        suffix = f"; did you mean {cut(escape(repr(self.hint)), MAX_PATH_ECHO)}?" if self.hint else ""
        return f"{where}{cut(escape(self.message), MAX_MESSAGE)}{suffix}"


class SpecError(ConfigError):
    """One or more problems in one or more specs (exit 2), shown one `path:line:col: key: message` per line."""

    formatted = True

    def __init__(self, problems: Sequence[Problem]):
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def dotted(path: Iterable) -> str:
    """('ci', 'smoke', 0, 'run') -> 'ci.smoke[0].run'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The closest choice to a misspelled word, if one is close enough."""
    choices = [c for c in choices if isinstance(c, str)]
    matches = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if matches:
        return matches[0]
    lowered = {c.lower(): c for c in choices}
    return lowered.get(word.lower())
