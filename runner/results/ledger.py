"""The ledger: `episodes.jsonl`, one JSON object per finished episode, appended and fsynced as each finishes.

A hard kill can leave a partial last line; readers drop it (and say so), and reopening the ledger for
append cuts it off first, so a resumed run never glues a new record onto a torn one. Anything unreadable
before the last line is corruption and is refused with `file:line`.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from runner.errors import RunnerError
from runner.results.records import STATUSES, EpisodeRecord
from runner.text import visible

LEDGER_NAME = "episodes.jsonl"


class LedgerError(RunnerError):
    """The ledger cannot be read or written (corrupt line, unwritable file)."""


MAX_LINE_BYTES = 1 << 20  # a record takes a few hundred bytes (an error message a few KiB more)


@dataclass(frozen=True)
class LedgerContents:
    """What a ledger file holds."""

    path: Path
    records: list[EpisodeRecord] = field(default_factory=list)
    dropped_lines: int = 0  # 0, or 1 when the last line was torn (hard kill) and ignored
    dropped_text: str | None = None  # that line, for messages
    valid_bytes: int = 0  # file offset just after the last good line
    lines: list[int] = field(default_factory=list)  # the line number of each record


# (field, accepted types, may be null, required)
_FIELDS: tuple[tuple[str, tuple[type, ...], bool, bool], ...] = (
    ("task_group", (str,), False, True),
    ("task_id", (int,), False, True),
    ("task", (str,), False, True),
    ("episode_index", (int,), False, True),
    ("seed", (int,), False, True),
    ("steps", (int,), False, True),
    ("sum_reward", (int, float), True, True),
    ("max_reward", (int, float), True, True),
    ("success", (bool,), False, True),
    ("wall_s", (int, float), True, True),
    ("video_path", (str,), True, False),
    ("status", (str,), False, False),
    ("error", (str,), True, False),
    ("success_reported", (bool,), False, False),
)


def parse_record(data: Any) -> EpisodeRecord:
    """An `EpisodeRecord` from one decoded ledger line; ValueError says what is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    for name, types, nullable, required in _FIELDS:
        if name not in data:
            if required:
                raise ValueError(f"missing field {name!r}")
            continue
        value = data[name]
        if value is None and nullable:
            continue
        is_bool_for_number = isinstance(value, bool) and bool not in types  # JSON true is not a number here
        if is_bool_for_number or not isinstance(value, types):
            raise ValueError(f"field {name!r} has a wrong type ({type(value).__name__}: {value!r})")
    if data.get("status", "ok") not in STATUSES:
        raise ValueError(f"field 'status' must be one of {', '.join(STATUSES)}, got {data['status']!r}")
    for name in ("task_id", "episode_index", "steps"):
        if data[name] < 0:
            raise ValueError(f"field {name!r} must be >= 0, got {data[name]}")
    return EpisodeRecord.from_json(data)


def load_ledger(path: Path, *, max_records: int | None = None) -> LedgerContents:
    """Read a ledger line by line; a torn last line is dropped and counted; a bad line elsewhere, a line longer
    than MAX_LINE_BYTES or more than `max_records` records raise LedgerError (results files may come from anyone)."""
    path = Path(path)
    try:
        stream = path.open("rb")
    except FileNotFoundError:
        raise LedgerError(f"{path}: no such ledger") from None
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the ledger: {exc.strerror or exc}") from None
    records: list[EpisodeRecord] = []
    numbers: list[int] = []
    bad: tuple[int, str, str] | None = None  # (line number, reason, text) of a line that is not a record
    offset = valid_bytes = number = 0
    with stream:
        while line := _read_line(stream, path, number + 1):
            number += 1
            offset += len(line)
            if not line.strip():
                continue
            if bad is not None:  # a bad line followed by more records: not a torn tail but corruption
                raise LedgerError(f"{path}:{bad[0]}: not a valid episode record ({bad[1]}); only a torn last line is "
                                  "tolerated. Fix or remove this line, or start a fresh output directory.")
            try:
                records.append(parse_record(json.loads(line.decode("utf-8"))))
            except (ValueError, UnicodeDecodeError, TypeError, RecursionError) as exc:
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                bad = (number, visible(reason, 200), line.decode("utf-8", errors="replace"))
                continue
            numbers.append(number)
            valid_bytes = offset
            if max_records is not None and len(records) > max_records:
                raise LedgerError(f"{path}: more than {max_records:,} records, more than this run's plan can have "
                                  "made; start a fresh output directory")
    if bad is not None:
        return LedgerContents(path, records, 1, bad[2], valid_bytes, numbers)
    return LedgerContents(path, records, 0, None, valid_bytes, numbers)


def _read_line(stream: Any, path: Path, number: int) -> bytes:
    line = stream.readline(MAX_LINE_BYTES + 1)
    if len(line) > MAX_LINE_BYTES:
        raise LedgerError(f"{path}:{number}: a line longer than {MAX_LINE_BYTES >> 20} MiB is not an episode record; "
                          "start a fresh output directory")
    return line


def read_ledger(path: Path) -> list[EpisodeRecord]:
    """The records of a ledger (a torn last line is ignored; `load_ledger` says whether there was one)."""
    return load_ledger(path).records


class Ledger:
    """Append-only `episodes.jsonl`: each record is one line, written, flushed and fsynced at once.

    Opening an existing ledger validates it (LedgerError on corruption), keeps what it held in `existing`,
    and cuts off a torn last line so new records start on a fresh line.
    """

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self._fsync = fsync
        self._fd: int | None = None
        self.existing = LedgerContents(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists() and self.path.stat().st_size > 0:
                self.existing = load_ledger(self.path)
                self._repair_tail(self.existing)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot open the ledger for writing: {exc.strerror or exc}") from None

    def _repair_tail(self, contents: LedgerContents) -> None:
        size = self.path.stat().st_size
        with open(self.path, "r+b") as f:
            if contents.dropped_lines or size > contents.valid_bytes:
                f.truncate(contents.valid_bytes)  # a torn line from a hard kill (or trailing blanks)
            if contents.valid_bytes > 0:
                f.seek(contents.valid_bytes - 1)
                if f.read(1) != b"\n":
                    f.seek(0, os.SEEK_END)
                    f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())

    def append(self, record: EpisodeRecord) -> None:
        """Write one line, unbuffered, then fsync. A failed write (disk full, file too large) is undone:
        the file is cut back to its previous end, so the ledger never holds half a record."""
        if self._fd is None:
            raise ValueError(f"{self.path}: ledger is closed")
        data = (json.dumps(record.to_json(), allow_nan=False, ensure_ascii=False) + "\n").encode("utf-8")
        start = os.fstat(self._fd).st_size
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if self._fsync:
                os.fsync(self._fd)
        except OSError as exc:
            with contextlib.suppress(OSError):  # if even this fails, a torn last line is tolerated by readers
                os.ftruncate(self._fd, start)
            raise LedgerError(f"{self.path}: cannot write to the ledger: {exc.strerror or exc}") from None

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
