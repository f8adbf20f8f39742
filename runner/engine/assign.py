"""The scheduler's decisions, as plain data and pure functions (no processes): which episode a free slot runs
next, and what a failed attempt of an episode means.

Which task a free slot takes (`SCHEDULES`; the spec's `eval.schedule`, or `runner run --schedule`):
- "task-major": the first task with pending episodes, in plan order. All slots work on one task; around a
  task boundary the slots that run out move on while the others finish. Every slot builds every task's env.
- "spread" (the default): the slot keeps its task while that task has pending episodes; then it takes the
  first pending task no other slot is on, else joins the task with the most pending episodes per slot.
  Each task's env is built about once instead of once per slot; still at most one simulator per slot.
Results never depend on the schedule: an episode is decided by its task and seed alone.

Attempts: an episode whose worker crashed, hung or whose simulator raised (or whose remote policy server could
not be reached) is retried up to `max_retries` times, then recorded as an error. When the first
FAIL_FAST_EPISODES episodes to run out of attempts come before any episode succeeded (in a run with no earlier
successes), the setup is broken, not an episode; when the last FAIL_FAST_EPISODES did because the policy server
was unreachable, the server is down: both stop the run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

SCHEDULES = ("task-major", "spread")
FAIL_FAST_EPISODES = 3


class Pending:
    """Episodes not started yet, per task, tasks in plan order."""

    def __init__(self, jobs: Iterable[Any] = ()) -> None:
        self._queues: dict[Any, deque[Any]] = {}
        for job in jobs:
            self._queues.setdefault(job.task, deque()).append(job)

    def __bool__(self) -> bool:
        return bool(self._queues)

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def __contains__(self, task: Any) -> bool:
        return task in self._queues

    def tasks(self) -> Iterator[Any]:
        return iter(self._queues)

    def count(self, task: Any) -> int:
        return len(self._queues.get(task, ()))

    def take(self, task: Any) -> Any:
        """The next episode of `task` (which must have one)."""
        queue = self._queues[task]
        job = queue.popleft()
        if not queue:
            del self._queues[task]
        return job

    def put_back(self, job: Any) -> None:
        """Return an episode to the front of its task's queue (a retry, or an episode a stop interrupted)."""
        self._queues.setdefault(job.task, deque()).appendleft(job)


def next_task(pending: Pending, schedule: str, current: Any, running: Mapping[Any, int]) -> Any | None:
    """The task a free slot runs next (None: nothing pending). `current`: the task of the slot's env;
    `running`: how many *other* slots are on each task."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} (known: {', '.join(SCHEDULES)})")
    if not pending:
        return None
    if schedule == "task-major":
        return next(pending.tasks())
    if current in pending:
        return current
    for task in pending.tasks():
        if task not in running:
            return task
    return max(pending.tasks(), key=lambda t: pending.count(t) / (running.get(t, 0) + 1))


@dataclass(frozen=True)
class Verdict:
    """What to do with an episode after a failed attempt."""

    retry: bool
    attempt: int  # the attempt that failed (1-based)
    total: int  # attempts allowed


class Attempts:
    """Failed attempts per episode, and successes and errors of the session (see the module docstring)."""

    def __init__(self, max_retries: int, *, fail_fast: bool = True) -> None:
        self.max_retries = max_retries
        self.fail_fast = fail_fast  # False when earlier sessions already had successes (a resume)
        self.failures: dict[Any, int] = {}
        self.n_ok = 0
        self.n_errors = 0
        self.unavailable_streak = 0  # episodes in a row out of attempts with the policy server unreachable

    def failed(self, key: Any, *, unavailable: bool = False) -> Verdict:
        """Count a failed attempt of episode `key`; a verdict that does not retry counts it as an error.
        `unavailable`: the attempt failed because a policy server could not be reached."""
        attempt = self.failures[key] = self.failures.get(key, 0) + 1
        total = self.max_retries + 1
        if attempt < total:
            return Verdict(True, attempt, total)
        self.n_errors += 1
        self.unavailable_streak = self.unavailable_streak + 1 if unavailable else 0
        return Verdict(False, attempt, total)

    def succeeded(self) -> None:
        self.n_ok += 1
        self.unavailable_streak = 0

    @property
    def service_down(self) -> bool:
        """The last episodes in a row ran out of attempts because the policy server was unreachable: the rest
        would too, so the run stops (they stay pending, for a resume) instead of recording each as an error."""
        return self.unavailable_streak >= FAIL_FAST_EPISODES

    @property
    def setup_broken(self) -> bool:
        """The first episodes to run all failed: the setup, not an episode, is broken."""
        return self.fail_fast and self.n_ok == 0 and self.n_errors >= FAIL_FAST_EPISODES


__all__ = ["FAIL_FAST_EPISODES", "SCHEDULES", "Attempts", "Pending", "Verdict", "next_task"]
