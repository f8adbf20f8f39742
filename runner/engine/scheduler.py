"""Continuous episode scheduling over slots, with batched policy inference across the active slots.

Every slot runs one episode at a time. When its episode ends, the slot at once starts another
pending episode (LeRobot instead waits for the whole batch, and for every env of a task, before going
on). A slot that changes task closes its env before building the next task's, so a run never holds
more than `batch_size` simulators, one per slot. Which episode a free slot takes (`SCHEDULES`; the
spec's `eval.schedule`, or `runner run --schedule`):

- "task-major": the next pending episode in plan order. All slots work on one task; around a task
  boundary the slots that run out move on while the others finish, so two tasks coexist briefly.
  Every slot builds an env for every task.
- "spread" (the default): the slot keeps its task while that task has pending episodes; then it
  takes the first pending task no other slot is on, else joins the task with the most pending
  episodes per slot. Slots work on different tasks, and each task's env is built about once instead
  of once per slot: much less env-building when builds are costly (LIBERO: seconds) or episodes per
  task are few. Still at most `batch_size` simulators, as with "task-major".

Results never depend on the schedule: an episode is decided by its task and seed alone.

Policy in the main process: a step round waits for the slots whose *step* is in flight, then asks
the policy once for all slots holding an observation (slots still resetting or building an env do
not hold the round back), and sends each its action. Observations are stacked per group of slots
with identical observation and action shapes, taken from each episode's first observation (normally
one group). Policy in the workers: each slot runs whole episodes and only reports results.

Faults: a worker that dies (EOF on its pipe or its process sentinel: segfault, `os._exit`, OOM kill),
a worker past its episode's timeout, and an exception raised by the simulator (a retryable `ErrorInfo`)
all end in `on_worker_lost`: the worker is replaced by a fresh one (an in-process slot drops its env),
and the episode goes back to the front of its task's queue, up to `max_retries` times; then it is
reported to `on_error` (recorded with status "error", not as a failure) and the run goes on. Bounded:
each failure uses one attempt of one episode. When the first `FAIL_FAST_EPISODES` episodes to run out of
attempts come before any episode succeeded (`fail_fast`: a run with no earlier successes), the setup is
broken rather than an episode: the run stops. While stopping, a lost worker is not replaced.
The timeout counts the time a worker owes a reply (env build, reset, steps; for policies in the workers,
the whole episode), not the time a slot waits for the batched policy; in-process slots have none.

Stopping (`StopControl`, set by SIGINT/SIGTERM): no new episode starts; episodes in flight may finish
for `grace_s` seconds (and are recorded), then the rest are abandoned; `Interrupted` is raised.
"""

from __future__ import annotations

import select
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runner.engine.plan import EpisodeJob
from runner.engine.pool import InlineSlot, Poller, ProcessSlot, Slot, WorkerLost, wait_ready
from runner.engine.worker import (
    DONE,
    ERROR,
    OBS,
    START,
    STARTED,
    STEP,
    Abandoned,
    EpisodeResult,
    ErrorInfo,
    check_action,
)
from runner.errors import EvaluationError, Interrupted, RunnerError

POLL_S = 0.25  # how often a blocked wait looks at the stop flag and the timeouts
SCHEDULES = ("task-major", "spread")
FAIL_FAST_EPISODES = 3
STOP_GRACE_S = 10.0


class StopControl:
    """What SIGINT/SIGTERM asked for: the first signal stops scheduling (episodes in flight may finish within
    `grace_s`), a second one abandons them at once."""

    def __init__(self, grace_s: float = STOP_GRACE_S) -> None:
        self.grace_s = grace_s
        self.signum: int | None = None
        self._at: float | None = None
        self._hard = False

    def request(self, signum: int) -> None:
        if self._at is None:
            self.signum, self._at = signum, time.monotonic()
        else:
            self._hard = True

    @property
    def requested(self) -> bool:
        return self._at is not None

    @property
    def hard(self) -> bool:
        """A second signal came: abandon everything at once."""
        return self._hard

    def abandon(self) -> bool:
        """Whether episodes in flight must be dropped now."""
        return self._hard or (self._at is not None and time.monotonic() - self._at > self.grace_s)


@dataclass(frozen=True)
class TraceEvent:
    """When a slot started and finished an episode (for tests and diagnostics)."""

    slot: int
    key: tuple[str, int, int]
    start_s: float
    end_s: float


@dataclass
class SlotState:
    slot: Slot
    job: EpisodeJob | None = None
    request: str | None = None  # START or STEP while a reply is due
    observation: Any = None  # a pending observation, waiting for an action
    has_observation: bool = False
    action_space: Any = None
    batch_key: Any = None  # observation shapes and action shape: slots with equal keys are batched together
    started_s: float = 0.0
    task: Any = None  # the task of the slot's env (kept between episodes)
    sent_s: float = 0.0  # when the request in flight was sent
    busy_s: float = 0.0  # time the worker owed replies during this episode, before the request in flight


class Scheduler:
    def __init__(self, slots: Sequence[Slot], jobs: Sequence[EpisodeJob], *,
                 on_done: Callable[[EpisodeJob, EpisodeResult], None],
                 on_error: Callable[[EpisodeJob, str, float], None] | None = None,
                 policy: Any = None, policy_name: str = "policy",
                 stop: StopControl | None = None,
                 episode_timeout_s: float | Callable[[EpisodeJob], float | None] | None = None,
                 max_retries: int = 0, warn: Callable[[str], None] | None = None,
                 schedule: str = "task-major", fail_fast: bool = True) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {schedule!r} (known: {', '.join(SCHEDULES)})")
        self.states = [SlotState(slot) for slot in slots]
        self.pending: dict[Any, deque[EpisodeJob]] = {}  # task -> its pending episodes, tasks in plan order
        for job in jobs:
            self.pending.setdefault(job.task, deque()).append(job)
        self.schedule = schedule
        self.on_done = on_done
        self.on_error = on_error
        self.policy = policy  # None: the policy runs inside the workers
        self.policy_name = policy_name
        self.stop = stop or StopControl()
        if episode_timeout_s is None or callable(episode_timeout_s):
            self.timeout_for = episode_timeout_s
        else:
            self.timeout_for = lambda job, limit=float(episode_timeout_s): limit
        self.max_retries = max_retries
        self.fail_fast = fail_fast  # False when earlier sessions already had successes (a resume)
        self.warn = warn or (lambda text: None)
        self.attempts: dict[tuple[str, int, int], int] = {}
        self.n_ok = 0
        self.n_errors = 0
        self.n_replaced = 0  # workers replaced after a failure
        self.trace: list[TraceEvent] = []
        procs = [slot for slot in slots if isinstance(slot, ProcessSlot)]
        self.poller = Poller(procs) if procs and hasattr(select, "poll") else None
        self._t0 = time.perf_counter()
        self._starts: list[Any] = []

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> None:
        while True:
            if self.stop.requested:
                idle = all(state.job is None for state in self.states)
                if idle and not self.pending:
                    return
                if idle or self.stop.abandon():
                    raise Interrupted("interrupted")
            else:
                for state in self.states:
                    if state.job is None and self.pending:
                        self._assign(state)
                if all(state.job is None for state in self.states):
                    if not self.pending:
                        return
                    continue
            if self.policy is not None:
                self._act()
            for state in self._ready():
                if state.request is not None:  # not freed meanwhile by a failure handled in this round
                    self._receive(state)

    def next_job(self, state: SlotState) -> EpisodeJob | None:
        """The episode a free slot runs next (see SCHEDULES), or None when nothing is pending."""
        task = self._next_task(state)
        if task is None:
            return None
        queue = self.pending[task]
        job = queue.popleft()
        if not queue:
            del self.pending[task]
        return job

    def requeue(self, job: EpisodeJob) -> None:
        """Put an episode back at the front of its task's queue (for retries)."""
        self.pending.setdefault(job.task, deque()).appendleft(job)

    def _next_task(self, state: SlotState) -> Any:
        if not self.pending:
            return None
        if self.schedule == "task-major":
            return next(iter(self.pending))
        if state.task in self.pending:
            return state.task
        running: dict[Any, int] = {}
        for other in self.states:
            if other is not state and other.job is not None:
                running[other.job.task] = running.get(other.job.task, 0) + 1
        for task in self.pending:
            if task not in running:
                return task
        return max(self.pending, key=lambda t: len(self.pending[t]) / (running.get(t, 0) + 1))

    def on_worker_lost(self, state: SlotState, reason: str, *, kill: bool = False) -> None:
        """The slot's worker died, hung or its simulator failed: replace it and retry or record the episode."""
        slot = state.slot
        if self.stop.requested:  # stopping (a SIGTERM to the whole group kills the workers too): no new worker
            if isinstance(slot, ProcessSlot) and self.poller is not None:
                self.poller.remove(slot)
            self._free(state)  # the episode is not recorded: a resumed run runs it
            return
        if isinstance(slot, ProcessSlot):
            if self.poller is not None:
                self.poller.remove(slot)
            new = slot.respawn(kill=kill)
            if self.poller is not None:
                self.poller.add(new)
            state.slot = new
        elif isinstance(slot, InlineSlot):
            slot.reset_env()
        self.n_replaced += 1
        state.task = None  # the fresh worker holds no env
        self._episode_failed(state, reason)

    def _episode_failed(self, state: SlotState, reason: str) -> None:
        job = state.job
        elapsed = time.perf_counter() - state.started_s
        self._free(state)
        if job is None:
            return
        attempts = self.attempts[job.key] = self.attempts.get(job.key, 0) + 1
        total = self.max_retries + 1
        if attempts < total:
            self.warn(f"runner: warning: {job.describe()}: {reason}; retrying on a fresh worker "
                      f"(attempt {attempts + 1} of {total})")
            self.requeue(job)
            return
        message = reason if total == 1 else f"{reason} (failed {attempts} attempts)"
        self.warn(f"runner: warning: {job.describe()}: {message}; recorded as an error")
        self.n_errors += 1
        if self.on_error is None:
            raise EvaluationError(f"{message} (while running {job.describe()})")
        self.on_error(job, message, elapsed)
        if self.fail_fast and self.n_ok == 0 and self.n_errors >= FAIL_FAST_EPISODES:
            raise EvaluationError(
                f"the first {self.n_errors} episodes to run all failed and none succeeded, so the setup rather "
                f"than an episode is broken; stopping. Last failure: {message} ({job.describe()}). They are "
                "recorded as errors; fix the cause and run the same command again to retry them")

    def _free(self, state: SlotState) -> None:
        state.job = None
        state.request = None
        state.observation = None
        state.has_observation = False
        self._starts = [s for s in self._starts if s is not state]

    # -- internals --------------------------------------------------------------------------------

    def _assign(self, state: SlotState) -> None:
        job = None if self.stop.requested else self.next_job(state)
        state.job = job
        state.has_observation = False
        state.observation = None
        if job is None:
            state.request = None
            return
        state.started_s = time.perf_counter()
        state.busy_s = 0.0
        state.task = job.task
        self._send(state, START, job)

    def _send(self, state: SlotState, command: str, payload: Any) -> None:
        state.request = command
        state.sent_s = time.perf_counter()
        try:
            state.slot.send(command, payload)
        except WorkerLost as exc:
            self.on_worker_lost(state, str(exc))
        except Abandoned:
            raise Interrupted("interrupted") from None

    def _ready(self) -> list[SlotState]:
        busy = [s for s in self.states if s.request is not None]
        ready = [s for s in busy if s.slot.inline and s.slot.has_reply()]
        if ready:
            return ready
        procs = [s for s in busy if not s.slot.inline]
        if not procs:
            return []
        by_index = {s.slot.index: s for s in procs}
        slots = [s.slot for s in procs]
        timeout = self._wait_timeout(procs)
        found = self.poller.wait(slots, timeout) if self.poller else wait_ready(slots, timeout)  # type: ignore[arg-type]
        if not found:
            self._check_timeouts(procs)
        return [by_index[slot.index] for slot in found]

    def _time_left(self, state: SlotState, now: float) -> float | None:
        limit = self.timeout_for(state.job) if self.timeout_for is not None and state.job is not None else None
        if not limit:
            return None
        return limit - (state.busy_s + now - state.sent_s)

    def _wait_timeout(self, procs: list[SlotState]) -> float:
        now = time.perf_counter()
        lefts = [left for s in procs if (left := self._time_left(s, now)) is not None]
        return max(0.0, min([POLL_S, *lefts]))

    def _check_timeouts(self, procs: list[SlotState]) -> None:
        if self.timeout_for is None:
            return
        now = time.perf_counter()
        for state in procs:
            left = self._time_left(state, now)
            if left is not None and left <= 0 and state.request is not None:
                limit = self.timeout_for(state.job)
                self.on_worker_lost(state, f"worker {state.slot.index} (pid {state.slot.process.pid}) spent more "
                                           f"than the episode timeout of {limit:g} s on it (hung?); killed it",
                                    kill=True)

    def _receive(self, state: SlotState) -> None:
        slot = state.slot
        if isinstance(slot, ProcessSlot) and not slot.has_reply():
            self.on_worker_lost(state, slot.lost_reason())
            return
        try:
            kind, value = slot.recv()
        except WorkerLost as exc:
            self.on_worker_lost(state, str(exc))
            return
        state.request = None
        state.busy_s += time.perf_counter() - state.sent_s
        if kind == OBS:
            state.observation, state.has_observation = value, True
        elif kind == STARTED:
            observation, state.action_space = value
            state.observation, state.has_observation = observation, True
            state.batch_key = (_signature(observation), tuple(state.action_space.shape or ()))
            self._starts.append(state)
        elif kind == DONE:
            job = state.job
            assert job is not None
            self.trace.append(TraceEvent(slot.index, job.key, state.started_s - self._t0,
                                         time.perf_counter() - self._t0))
            self.n_ok += 1
            self.on_done(job, value)
            self._assign(state)
        elif kind == ERROR:
            if not value.retry:
                raise worker_error(value, state.job)
            where = f" ({value.where})" if value.where else ""
            self.on_worker_lost(state, f"the simulator raised {value.kind}: {value.message}{where}")
        else:
            raise EvaluationError(f"unexpected reply {kind!r} from worker {slot.index}")

    def _act(self) -> None:
        if any(s.request == STEP for s in self.states):
            return  # a step round is still in flight
        acting = [s for s in self.states if s.has_observation]
        if not acting:
            return
        if self._starts:
            self._reset_policy()
        for group in _groups(acting):
            self._act_group(group)

    def _reset_policy(self) -> None:
        from runner.policies.base import EpisodeStart

        starts = [EpisodeStart(s.slot.index, s.job.task, s.job.index, s.job.seed, s.action_space,
                               len(self.states))
                  for s in self._starts if s.job is not None]
        self._starts = []
        self._call_policy("reset", lambda: self.policy.reset(starts), None)

    def _act_group(self, group: list[SlotState]) -> None:
        observation = _stack([s.observation for s in group])
        texts = [s.job.task.text for s in group]
        slots = [s.slot.index for s in group]
        actions = self._call_policy("select_action", lambda: self.policy.select_action(observation, texts, slots),
                                    group[0].job)
        actions = np.asarray(actions)
        expected = group[0].batch_key[1]
        if actions.shape != (len(group), *expected) or actions.dtype.kind not in "biuf":
            if actions.ndim == 0 or actions.shape[0] != len(group):
                raise EvaluationError(f"policy {self.policy_name!r} returned actions of shape {actions.shape} for "
                                      f"{len(group)} envs; expected ({len(group)}, {', '.join(map(str, expected))})")
            for i, state in enumerate(group):
                check_action(actions[i], expected, state.job, batched=True)
        for i, state in enumerate(group):
            state.has_observation = False
            state.observation = None
            self._send(state, STEP, actions[i])

    def _call_policy(self, what: str, call: Callable[[], Any], job: EpisodeJob | None) -> Any:
        try:
            return call()
        except RunnerError:
            raise
        except Exception as exc:
            where = f" on {job.task.name}" if job is not None else ""
            raise EvaluationError(f"policy {self.policy_name!r} raised in {what}{where}: "
                                  f"{type(exc).__name__}: {exc}") from exc


def worker_error(info: ErrorInfo, job: EpisodeJob | None) -> RunnerError:
    """The error to raise in the main process for an error reported by a worker."""
    if info.user_error:
        from runner import errors

        cls = getattr(errors, info.kind, EvaluationError)
        return cls(info.message)
    where = f" ({info.where})" if info.where else ""
    episode = f" in {job.describe()}" if job is not None else ""
    who = "the policy raised " if info.source == "policy" else ""
    return EvaluationError(f"{who}{info.kind}: {info.message}{where}{episode}")


def _signature(observation: Any) -> Any:
    if isinstance(observation, dict):
        return tuple((k, _signature(v)) for k, v in sorted(observation.items()))
    array = np.asarray(observation)
    return (array.shape, array.dtype.str)


def _groups(states: list[SlotState]) -> list[list[SlotState]]:
    groups: dict[Any, list[SlotState]] = {}
    for state in states:
        groups.setdefault(state.batch_key, []).append(state)
    return list(groups.values())


def _stack(observations: list[Any]) -> Any:
    first = observations[0]
    if isinstance(first, dict):
        return {k: _stack([o[k] for o in observations]) for k in first}
    return np.stack([np.asarray(o) for o in observations])
