"""Continuous episode scheduling over slots, with batched policy inference across the active slots.

Every slot runs one episode at a time. When its episode ends, the slot at once starts another pending
episode (LeRobot instead waits for the whole batch, and for every env of a task, before going on). A slot
that changes task closes its env before building the next task's, so a run never holds more than
`batch_size` simulators, one per slot. Which episode a free slot takes, and what a failed attempt means,
are decided by runner.engine.assign (pure functions); this class only moves messages.

Policy in the main process: the policy is asked once for all slots holding an observation, and each
slot is sent its action (checked: runner.engine.actions). Observations are stacked per group of slots with
identical observation and action shapes, taken from each episode's first observation (normally one group).
A policy that already knows a slot's next actions without looking at observations (a queued action chunk,
`take_queued`) has them sent along, and the worker steps through them in one request. A policy call waits
for the slots whose reply is due soon (a single step always; several steps, a reset, by the time such
requests have taken so far, up to `max_wait`, and a request once waited for in vain never again), so that
slots whose chunks end together share one forward pass; a slot many steps away does not hold the others back. Policy in the workers: each slot runs whole
episodes and only reports results.

Faults: a worker that dies (EOF on its pipe or its process sentinel: segfault, `os._exit`, OOM kill),
a worker past its episode's timeout, and an exception raised by the simulator (a retryable `ErrorInfo`)
all end in `on_worker_lost`: the worker is replaced by a fresh one (an in-process slot drops its env),
and the episode goes back to the front of its task's queue, up to `max_retries` times; then it is
reported to `on_error` (recorded with status "error", not as a failure) and the run goes on. When the
setup rather than an episode is broken (assign.Attempts.setup_broken) the run stops.
The timeout counts the time a worker owes a reply (env build, reset, steps; for policies in the workers,
the whole episode), not the time a slot waits for the batched policy; in-process slots have none.

Stopping (runner.engine.signals, set by SIGINT/SIGTERM): no new episode starts; episodes in flight may
finish for `grace_s` seconds (and are recorded), then the rest are abandoned. An episode whose worker dies
while stopping (a signal to the whole process group reaches the workers too) goes back to the pending
episodes, never silently away: `run()` returns only when every episode has been recorded, and raises
`Interrupted` otherwise.
"""

from __future__ import annotations

import select
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runner.engine.actions import ActionSpec, as_array, check_batch, describe
from runner.engine.assign import SCHEDULES, Attempts, Pending, next_task
from runner.engine.plan import EpisodeJob
from runner.engine.pool import InlineSlot, Poller, ProcessSlot, Slot, WorkerLost, wait_ready
from runner.engine.signals import StopControl
from runner.engine.worker import DONE, ERROR, OBS, START, STARTED, STEP, STEPS, Abandoned, EpisodeResult, ErrorInfo
from runner.errors import EvaluationError, Interrupted, RunnerError
from runner.policies.base import signature, stack_observations

POLL_S = 0.25  # how often a blocked wait looks at the stop flag and the timeouts
SOON_STEPS = 3  # a reply expected within this many step times (plus 5% of a multi-step request's) is due soon
MAX_WAIT_S, MAX_WAIT_STEPS = 1.0, 10  # a policy call waits at most max(1 s, 10 step times) for replies due soon


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
    request: str | None = None  # START, STEP or STEPS while a reply is due
    n_steps: int = 0  # steps of the request in flight
    waited_out: bool = False  # a policy call already waited for this request in vain: never again
    observation: Any = None  # a pending observation, waiting for an action
    has_observation: bool = False
    action_spec: ActionSpec | None = None
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
        self.pending = Pending(jobs)
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
        self.attempts = Attempts(max_retries, fail_fast=fail_fast)
        self.warn = warn or (lambda text: None)
        self.n_replaced = 0  # workers replaced after a failure
        self.trace: list[TraceEvent] = []
        procs = [slot for slot in slots if isinstance(slot, ProcessSlot)]
        self.poller = Poller(procs) if procs and hasattr(select, "poll") else None
        self._t0 = time.perf_counter()
        self._starts: list[Any] = []
        self._step_s: float | None = None  # a step's time in the workers (moving average)
        self._start_s: float | None = None  # a reset's time (moving average)
        self._waiting_since: float | None = None  # when a policy call began waiting for replies due soon

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Run every episode; return when each has been reported to `on_done` or `on_error`."""
        while True:
            if self.stop.requested:
                idle = all(state.job is None for state in self.states)
                if idle and not self.pending:
                    return  # everything finished within the grace period
                if idle or self.stop.abandon():
                    raise self._interrupted()
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

    def _interrupted(self) -> Interrupted:
        return Interrupted("interrupted", self.stop.signum or signal.SIGINT)

    def next_job(self, state: SlotState) -> EpisodeJob | None:
        """The episode a free slot runs next (runner.engine.assign), or None when nothing is pending."""
        running: dict[Any, int] = {}
        for other in self.states:
            if other is not state and other.job is not None:
                running[other.job.task] = running.get(other.job.task, 0) + 1
        task = next_task(self.pending, self.schedule, state.task, running)
        return None if task is None else self.pending.take(task)

    def on_worker_lost(self, state: SlotState, reason: str, *, kill: bool = False, unavailable: bool = False) -> None:
        """The slot's worker died, hung or its simulator failed: replace it and retry or record the episode."""
        slot = state.slot
        if self.stop.requested:  # stopping (a SIGTERM to the whole group kills the workers too): no new worker
            if isinstance(slot, ProcessSlot) and self.poller is not None:
                self.poller.remove(slot)
            if state.job is not None:
                self.pending.put_back(state.job)  # not recorded: run() will not report the run as done
            self._free(state)
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
        self._episode_failed(state, reason, unavailable)

    def _episode_failed(self, state: SlotState, reason: str, unavailable: bool = False) -> None:
        job = state.job
        elapsed = time.perf_counter() - state.started_s
        self._free(state)
        if job is None:
            return
        verdict = self.attempts.failed(job.key, unavailable=unavailable)
        if verdict.retry:
            self.warn(f"runner: warning: {job.describe()}: {reason}; retrying on a fresh worker "
                      f"(attempt {verdict.attempt + 1} of {verdict.total})")
            self.pending.put_back(job)
            return
        message = reason if verdict.total == 1 else f"{reason} (failed {verdict.attempt} attempts)"
        self.warn(f"runner: warning: {job.describe()}: {message}; recorded as an error")
        if self.on_error is None:
            raise EvaluationError(f"{message} (while running {job.describe()})")
        self.on_error(job, message, elapsed)
        if self.attempts.setup_broken:
            raise EvaluationError(
                f"the first {self.attempts.n_errors} episodes to run all failed and none succeeded, so the setup "
                f"rather than an episode is broken; stopping. Last failure: {message} ({job.describe()}). They are "
                "recorded as errors, tried again when the run is resumed once the cause is fixed")
        if self.attempts.service_down:
            times = f"{verdict.total} time{'s' if verdict.total > 1 else ''}"
            raise EvaluationError(
                f"the policy server was unreachable for the last {self.attempts.unavailable_streak} episodes in a row, "
                f"each tried {times}; stopping. Last failure: {message} ({job.describe()}). Those episodes are "
                "recorded as errors and the rest are not started: resume the run once the server is back")

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
        state.n_steps = len(payload) if command == STEPS else 1
        state.waited_out = False
        state.sent_s = time.perf_counter()
        try:
            state.slot.send(command, payload)
        except WorkerLost as exc:
            self.on_worker_lost(state, str(exc))
        except Abandoned:
            raise self._interrupted() from None

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
        if self._waiting_since is not None:  # a policy call waits for replies due soon, up to max_wait
            lefts.append(self._waiting_since + self._max_wait() - now)
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
        request, state.request = state.request, None
        took = time.perf_counter() - state.sent_s
        state.busy_s += took
        if kind == OBS and request in (STEP, STEPS):
            self._step_s = _average(self._step_s, took / state.n_steps)
        elif kind == STARTED:
            self._start_s = _average(self._start_s, took)
        if kind == OBS:
            state.observation, state.has_observation = value, True
        elif kind == STARTED:
            observation, action_space = value
            state.action_spec = ActionSpec(action_space)
            state.observation, state.has_observation = observation, True
            state.batch_key = (signature(observation), state.action_spec.shape)
            self._starts.append(state)
        elif kind == DONE:
            job = state.job
            assert job is not None
            self.trace.append(TraceEvent(slot.index, job.key, state.started_s - self._t0,
                                         time.perf_counter() - self._t0))
            self.attempts.succeeded()
            self.on_done(job, value)
            self._assign(state)
        elif kind == ERROR:
            if not value.retry:
                raise worker_error(value, state.job)
            where = f" ({value.where})" if value.where else ""
            reason = value.message if value.source == "policy" else \
                f"the simulator raised {value.kind}: {value.message}{where}"
            self.on_worker_lost(state, reason, unavailable=value.kind == "PolicyUnavailable")
        else:
            raise EvaluationError(f"unexpected reply {kind!r} from worker {slot.index}")

    def _act(self) -> None:
        acting = [s for s in self.states if s.has_observation]
        if not acting:
            self._waiting_since = None
            return
        now = time.perf_counter()
        if any(s.request == STEP for s in self.states):
            return  # a step round is still in flight
        if self._waiting_since is None:
            self._waiting_since = now
        soon = [s for s in self.states if self._due_soon(s, now)]
        if soon and now - self._waiting_since < self._max_wait():
            return  # a reply about to come joins this call
        for state in soon:  # waited for in vain (an env build, a slow worker): the next calls go ahead
            state.waited_out = True
        self._waiting_since = None
        if self._starts:
            self._reset_policy()
        for group in _groups(acting):
            self._act_group(group)

    def _reset_policy(self) -> None:
        from runner.policies.base import EpisodeStart

        starts = [EpisodeStart(s.slot.index, s.job.task, s.job.index, s.job.seed, s.action_spec.space,
                               len(self.states))
                  for s in self._starts if s.job is not None]
        self._starts = []
        self._call_policy("reset", lambda: self.policy.reset(starts), None)

    def _act_group(self, group: list[SlotState]) -> None:
        observation = stack_observations([s.observation for s in group])
        texts = [s.job.task.text for s in group]
        slots = [s.slot.index for s in group]
        actions = self._call_policy("select_action", lambda: self.policy.select_action(observation, texts, slots),
                                    group[0].job)
        specs = [s.action_spec for s in group]
        name = f"policy {self.policy_name!r}"
        actions = check_batch(actions, specs, lambda i: group[i].job.describe(), name)
        for i, state in enumerate(group):
            state.has_observation = False
            state.observation = None
            ahead = self._queued(state, name)
            if ahead is not None:
                self._send(state, STEPS, [actions[i], *ahead])
            else:
                self._send(state, STEP, actions[i])

    def _queued(self, state: SlotState, name: str) -> np.ndarray | None:
        """The actions the policy has decided ahead for the slot (`take_queued`), checked; None when none."""
        job = state.job
        ahead = self._call_policy("take_queued", lambda: self.policy.take_queued(state.slot.index), job)
        if ahead is None:
            return None
        array = as_array(ahead)
        if array is None or array.ndim == 0:
            raise EvaluationError(f"the {name} returned {describe(ahead)} from take_queued in {job.describe()}; "
                                  "expected None or an array of shape (K, *action shape)")
        if not len(array):
            return None
        return check_batch(array, [state.action_spec] * len(array), lambda _: job.describe(), f"{name}'s take_queued")

    def _due_soon(self, state: SlotState, now: float) -> bool:
        """Whether the slot's reply in flight (a reset, several steps) is expected soon enough for a policy call
        to wait for it. Unknown durations (nothing measured yet) count as soon; so do late replies, until a call
        has waited for them once."""
        if state.waited_out:
            return False
        if state.request == STEPS and self._step_s is not None:
            expected = state.sent_s + state.n_steps * self._step_s
            return expected - now <= (SOON_STEPS + 0.05 * state.n_steps) * self._step_s
        if state.request == START and self._start_s is not None and self._step_s is not None:
            return state.sent_s + self._start_s - now <= SOON_STEPS * self._step_s
        return state.request in (STEPS, START)

    def _max_wait(self) -> float:
        return max(MAX_WAIT_S, MAX_WAIT_STEPS * (self._step_s or 0.0))

    def _call_policy(self, what: str, call: Callable[[], Any], job: EpisodeJob | None) -> Any:
        try:
            return call()
        except RunnerError:
            raise
        except (Exception, SystemExit) as exc:  # sys.exit() in policy code ends the run as an error, not with 0
            where = f" on {job.task.name}" if job is not None else ""
            raise EvaluationError(f"policy {self.policy_name!r} raised in {what}{where}: "
                                  f"{type(exc).__name__}: {exc}") from exc


def worker_error(info: ErrorInfo, job: EpisodeJob | None) -> RunnerError:
    """The error to raise in the main process for an error reported by a worker."""
    if info.user_error:
        from runner import errors

        cls = getattr(errors, info.kind, None)
        if not (isinstance(cls, type) and issubclass(cls, RunnerError)) or cls is errors.Interrupted:
            cls = EvaluationError
        return cls(info.message)
    where = f" ({info.where})" if info.where else ""
    episode = f" in {job.describe()}" if job is not None else ""
    who = "the policy raised " if info.source == "policy" else ""
    return EvaluationError(f"{who}{info.kind}: {info.message}{where}{episode}")


def _average(old: float | None, new: float, weight: float = 0.2) -> float:
    return new if old is None else old + weight * (new - old)


def _groups(states: list[SlotState]) -> list[list[SlotState]]:
    groups: dict[Any, list[SlotState]] = {}
    for state in states:
        groups.setdefault(state.batch_key, []).append(state)
    return list(groups.values())
