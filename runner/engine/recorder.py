"""Appends finished episodes to the ledger from a background thread, so fsync never holds up scheduling."""

from __future__ import annotations

import queue
import threading

from runner.results import EpisodeRecord, Ledger


class Recorder:
    """`add(record)` queues a record; a thread appends (write, flush, fsync) in order. `close()` drains the
    queue, so every record added before it is in the ledger; a write error is raised by the next `add`
    or by `close`."""

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
