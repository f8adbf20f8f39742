"""A results directory through its life: open (a fresh one, or this run's to resume), lock, record, finish.

    run_dir = RunDir(path, run_file)          # run_file: this run's identity, plan and shard (runner.results.runfile)
    run_dir.inspect(resume)                   # read-only: refuse another run's directory before the policy loads
    with run_dir.open(resume) as session:     # lock, run.json "running", ledger open
        todo = [key for key in keys if key not in session.done]
        session.record(record)                # appended (fsynced) by a background thread as each episode ends
        session.finish(eval_s)                # complete only if every planned episode has a record
    # leaving the block without finish() (an exception, a signal) writes state "interrupted" or "failed"

Resume: a directory that holds this run (same spec hash and shard) keeps its ok episodes; every other episode of
the plan (never run, lost in a kill, recorded as an error) runs again. Its ledger must obey the ledger rules
(runner.results.coverage): a record outside the plan or two different results for one episode are refused. A
directory of another spec or shard, or with a ledger and no run.json (origin unknown), is refused.

`fresh=True` (the default output directory): the directory is created at open, under a name no other run holds
(`<time>_<name>`, then `<time>-2_<name>`, ...), so runs started in the same second never share one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from runner.errors import ConfigError, EvaluationError, Interrupted, RunnerError
from runner.results.aggregate import build_eval_info, build_metrics
from runner.results.coverage import VIDEOS_DIR, Coverage, cover, describe_keys, refusals
from runner.results.ledger import LEDGER_NAME, Ledger, load_ledger
from runner.results.locations import claim, make_dirs
from runner.results.outputs import OutputError, write_outputs
from runner.results.records import EpisodeRecord
from runner.results.runfile import (
    COMPLETE,
    FAILED,
    INTERRUPTED,
    RUN_NAME,
    RUNNING,
    RunFile,
    Shard,
    read_run_file,
    spec_changes,
    write_run_file,
)
from runner.text import visible

LOCK_NAME = ".runner.lock"
RECORDS_PER_EPISODE = 20  # a ledger holding more records than this per planned episode is refused
PARTIAL_VIDEOS = "*/.*.partial.mp4"


def max_records(run: RunFile) -> int:
    """The most records a ledger of this run may hold (errors of many sessions included)."""
    return RECORDS_PER_EPISODE * run.plan.size + 100


@dataclass(frozen=True)
class Prior:
    """What a directory already holds of this run."""

    run: RunFile | None  # its run.json (None: a fresh directory)
    coverage: Coverage | None  # its ledger under the ledger rules, this shard's part of the plan
    torn_line: bool = False  # the ledger's last line was torn (a hard kill) and is ignored


class RunDir:
    def __init__(self, path: Path, run: RunFile, *, fresh: bool = False) -> None:
        if not str(path).strip():
            raise ConfigError("the output directory is an empty path; name a directory")
        self.path = Path(path)
        self.run = run
        self.fresh = fresh

    def inspect(self, resume: bool | None = None) -> Prior:
        """What the directory holds of this run; ConfigError for anything that may not be resumed. Writes nothing."""
        if self.fresh:
            return Prior(None, None)
        try:
            return self._inspect(resume)
        except OSError as exc:  # e.g. a name too long for the file system
            raise ConfigError(f"output directory {visible(self.path, 200)}: {exc.strerror or exc}") from None

    def _inspect(self, resume: bool | None) -> Prior:
        ledger = self.path / LEDGER_NAME
        has_ledger = ledger.is_file() and ledger.stat().st_size > 0
        previous = read_run_file(self.path)
        where = visible(self.path, 200)
        if previous is None:
            if has_ledger:
                raise ConfigError(f"{where} already holds results ({LEDGER_NAME}) but no {RUN_NAME}, so it is unknown "
                                  "which spec produced them; choose another --output-dir")
            if resume:
                raise ConfigError(f"--resume: {where} holds no run to resume (no {RUN_NAME})")
            return Prior(None, None)
        if resume is False:
            raise ConfigError(f"{where} already holds results of a run; choose another --output-dir "
                              "(or leave out --no-resume to resume it)")
        if previous.merged_from:
            raise ConfigError(f"{where} holds merged results (`runner merge`), which cannot be resumed; "
                              "resume the shard directories instead, then merge again")
        if previous.hash != self.run.hash:
            changes = spec_changes(previous.identity, self.run.identity)
            raise ConfigError(f"{where} holds results of another spec, so they cannot be resumed (changed since: "
                              f"{visible('; '.join(changes) or 'the spec hash', 500)}); use another --output-dir, "
                              f"or resume it as it was started: {previous.rerun_command(self.path)}")
        if previous.shard != self.run.shard:
            def name(shard: Shard | None) -> str:
                return "the whole plan" if shard is None else f"shard {shard}"
            raise ConfigError(f"{where} holds {name(previous.shard)}, not {name(self.run.shard)}; "
                              "use another --output-dir")
        if previous.tasks != self.run.tasks:  # same spec hash, other task list: the catalog changed
            raise ConfigError(f"{where} holds a run of this spec with other tasks or task texts (the simulator's "
                              "task list changed?); use another --output-dir")
        if not has_ledger:
            return Prior(previous, cover(self.run.plan, [], only=self.run.shard))
        contents = load_ledger(ledger, max_records=max_records(self.run))
        coverage = cover(self.run.plan, [contents.records], [contents.lines], shards=[self.run.shard],
                         only=self.run.shard)
        refused = refusals(coverage, [ledger])
        if refused:
            raise ConfigError(f"{ledger} does not obey the ledger rules, so it cannot be resumed:\n  "
                              + "\n  ".join(refused) + "\nuse another --output-dir")
        return Prior(previous, coverage, bool(contents.dropped_lines))

    @contextlib.contextmanager
    def open(self, resume: bool | None = None) -> Iterator[Session]:
        """Create (or claim) and lock the directory, check it again (now that it is ours), write run.json
        "running" and open the ledger. Leaving without `finish()` records the session as interrupted (a
        signal, Ctrl-C) or failed (anything else); every finished episode stays in the ledger."""
        if self.fresh:
            self.path = claim(self.path)
        else:
            make_dirs(self.path)
        with lock(self.path):
            prior = self.inspect(resume) if not self.fresh else Prior(None, None)
            run = self.run
            if prior.run is not None:  # a resumed run keeps its wall time so far and how it was first invoked
                run = replace(run, invocation=run.invocation or prior.run.invocation, state=RUNNING,
                              eval_s=prior.run.eval_s)
            write_run_file(self.path, run)  # first, before the ledger: a directory that cannot take it fails now
            if prior.run is not None:  # unfinished videos of episodes a hard kill interrupted; they run again
                for partial in (self.path / VIDEOS_DIR).glob(PARTIAL_VIDEOS):
                    with contextlib.suppress(OSError):
                        partial.unlink()
            try:
                session = Session(self.path, run, prior)
            except BaseException:
                with contextlib.suppress(Exception):
                    write_run_file(self.path, run.with_state(FAILED))
                raise
            try:
                yield session
            except BaseException as exc:
                session.abort(INTERRUPTED if isinstance(exc, Interrupted | KeyboardInterrupt) else FAILED)
                raise
            finally:
                session.close()


class Session:
    """One session of a run in its locked directory (see RunDir.open)."""

    def __init__(self, path: Path, run: RunFile, prior: Prior) -> None:
        self.path = path
        self.run = run
        self.prior_records = list(prior.coverage.records) if prior.coverage is not None else []
        self.done = prior.coverage.done if prior.coverage is not None else set()
        self.records: list[EpisodeRecord] = []  # recorded in this session
        self.all_records: list[EpisodeRecord] = []  # after finish(): one record per episode of the plan (or shard)
        self.finished = False
        self._t0 = time.perf_counter()
        self._ledger = Ledger(path / LEDGER_NAME)
        self._recorder = _Recorder(self._ledger)

    def record(self, record: EpisodeRecord) -> None:
        """Append a finished episode to the ledger (a background thread writes and fsyncs it)."""
        self._recorder.add(record)
        self.records.append(record)

    def finish(self, session_s: float) -> tuple[dict[str, Any], dict[str, Any]]:
        """Every planned episode (of this shard) has a record: write eval_info.json and metrics.json (not for a
        shard: `runner merge` writes them) and run.json "complete"; return (eval_info, metrics)."""
        self._recorder.close()
        run = self.run
        coverage = cover(run.plan, [self.prior_records, self.records], only=run.shard)
        total_s = run.eval_s + session_s
        if coverage.missing or coverage.foreign or coverage.conflicts:  # never report a run with gaps as complete
            missing = coverage.missing
            raise EvaluationError(f"{len(missing)} episode(s) of the plan were neither run nor recorded "
                                  f"({describe_keys(missing)}); the run is not complete")
        labels = run.labels
        try:
            if run.shard is None:
                eval_info, metrics = write_outputs(self.path, records=coverage.records, tasks=run.tasks,
                                                   eval_s=total_s, **labels)
            else:  # a shard's outputs come from `runner merge`; its partial summary is returned, not written
                eval_info = build_eval_info(coverage.records, run.tasks, total_s)
                metrics = build_metrics(eval_info, tasks=run.tasks, **labels)
            self.run = run.with_state(COMPLETE, total_s)
            write_run_file(self.path, self.run)
        except RunnerError as exc:  # e.g. a full disk: every episode is in the ledger already
            raise type(exc)(f"{exc}; all {len(coverage.records)} episodes are in {self.path / LEDGER_NAME}: resuming "
                            "writes the outputs") from None
        self.finished = True
        self.all_records = coverage.records
        return eval_info, metrics

    def abort(self, state: str) -> None:
        """Record why the session ended early (run.json), keeping what the ledger holds."""
        if self.finished:
            return
        with contextlib.suppress(Exception):  # never hide the real error (e.g. a full disk) behind this one
            self._recorder.close()
        with contextlib.suppress(Exception):
            write_run_file(self.path, self.run.with_state(state, self.run.eval_s + time.perf_counter() - self._t0))

    def close(self) -> None:
        """Release the ledger. A write error was raised already (by `record`, `finish`), never again here, where
        it would hide the error that ends the session."""
        with contextlib.suppress(Exception):
            self._recorder.close()
        self._ledger.close()


class _Recorder:
    """`add(record)` queues a record; a thread appends it (write, flush, fsync) in order, so fsync never holds up
    scheduling. `close()` drains the queue; a write error is raised by the next `add` or by `close`."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.error: BaseException | None = None
        self._queue: queue.SimpleQueue[EpisodeRecord | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="runner-ledger", daemon=True)
        self._thread.start()

    def add(self, record: EpisodeRecord) -> None:
        if self.error is not None:
            raise self.error
        self._queue.put(record)

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while (record := self._queue.get()) is not None:
            try:
                self.ledger.append(record)
            except BaseException as exc:  # reported to the main thread
                self.error = exc
                return


@contextlib.contextmanager
def lock(path: Path) -> Iterator[None]:
    """Hold the directory's lock (flock, released even by kill -9) so two runs or merges never write it at once.
    The lock file is removed on the way out, while still held; so a run that locked a file another has just removed
    (its inode no longer at the path) counts as finding the directory in use."""
    where = path / LOCK_NAME
    try:
        fd = os.open(where, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise OutputError(f"cannot create the output directory {visible(path, 200)}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise OutputError(f"cannot lock {visible(path, 200)}: {exc.strerror or exc}") from None
            raise _in_use(path) from None
        try:
            same = os.stat(where).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # removed (and perhaps created again) by the run that held it until now
            raise _in_use(path)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(where)  # still held: nobody can have locked this file in between
    finally:
        os.close(fd)


def _in_use(path: Path) -> ConfigError:
    return ConfigError(f"{visible(path, 200)} is in use by another `runner run` or `runner merge` (it holds "
                       f"{LOCK_NAME}); wait for it to end, or choose another --output-dir")


__all__ = ["LOCK_NAME", "Prior", "RunDir", "Session", "lock", "max_records"]
