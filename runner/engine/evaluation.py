"""`evaluate(spec, out_dir)`: plan the episodes, run those not done yet, write the results.

Seeds: episode k of every task is reset with seed `eval.seed + k`, and seeded policies draw from the
same seed, so each episode's result is the same whatever the batch size, the number of workers, the
slot that ran it, the order episodes finished in, the shard or the session (see runner.engine.plan).

Order of work, so that bad input never costs data: the adapter's `check()` and `preflight(env)`, the task
list and the output directory's state are checked, and the policy is built, before anything is written;
then run.json is written (an unwritable directory fails here, before any episode), then the ledger is
opened and episodes run. A failure, Ctrl-C or SIGTERM leaves every finished episode in the ledger.

Resume: run.json records the run's identity (`runner.results.runfile`). An output directory that already
holds the same run (same spec hash and shard) is resumed: its ok episodes are kept and every other episode
of the plan (never run, lost in a kill, or recorded as an error) runs now; eval_info.json and metrics.json
then cover all of them, as an uninterrupted run's would. A directory of another spec or shard is refused
with what changed; one with a ledger but no run.json is refused (its origin is unknown).

Faults (worker processes): see runner.engine.scheduler. The default episode timeout is generous,
`DEFAULT_TIMEOUT_BASE_S + DEFAULT_TIMEOUT_PER_STEP_S x max_steps` of worker time: a hang detector, never
a limit a healthy episode meets.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runner.engine.plan import EpisodeJob, auto_batch_size, make_plan, shard_jobs
from runner.engine.pool import close_slots, open_slots
from runner.engine.recorder import Recorder
from runner.engine.scheduler import STOP_GRACE_S, Scheduler, StopControl, TraceEvent
from runner.engine.worker import EpisodeResult, WorkerConfig
from runner.envs import get_adapter
from runner.errors import ConfigError, Interrupted, RunnerError
from runner.policies import make_policy
from runner.results import (
    ERROR,
    LEDGER_NAME,
    EpisodeRecord,
    Ledger,
    Progress,
    RunFile,
    Shard,
    build_eval_info,
    build_metrics,
    load_ledger,
    merge_records,
    read_run_file,
    spec_changes,
    video_relpath,
    write_outputs,
    write_run_file,
)
from runner.results.aggregate import extra_records
from runner.results.runfile import COMPLETE, FAILED, INTERRUPTED, RUN_NAME, RUNNING
from runner.spec import Spec
from runner.spec.model import thaw

DEFAULT_TIMEOUT_BASE_S = 300.0
DEFAULT_TIMEOUT_PER_STEP_S = 2.0
DEFAULT_MAX_RETRIES = 2
LOCK_NAME = ".runner.lock"


def default_episode_timeout(max_steps: int) -> float:
    """Seconds of worker time an episode of `max_steps` may take before its worker counts as hung."""
    return DEFAULT_TIMEOUT_BASE_S + DEFAULT_TIMEOUT_PER_STEP_S * max_steps


@dataclass(frozen=True)
class RunOptions:
    batch_size: int | None = None  # None: the spec's eval.batch_size (0: auto)
    policy_in_workers: bool | None = None  # None: whenever the policy offers a per-env form
    start_method: str | None = None  # multiprocessing start method (default forkserver, else spawn)
    episode_timeout_s: float | None = None  # None: default_episode_timeout(max_steps); 0: no limit
    max_retries: int = DEFAULT_MAX_RETRIES  # extra attempts of an episode whose worker crashed or hung
    schedule: str | None = None  # None: the spec's eval.schedule (see runner.engine.scheduler.SCHEDULES)
    progress: bool = True
    shard: Shard | None = None  # run only this shard of the plan (see runner.engine.plan)
    resume: bool | None = None  # None: resume out_dir if it holds this run; True: it must; False: it must not
    isolate: bool = False  # worker processes even at batch size 1 (crash isolation and timeouts need them)
    invocation: dict[str, Any] | None = None  # {"spec": path, "overrides": [...]}, kept in run.json
    warn: Callable[[str], None] | None = None  # crash and retry notices (default: stderr)
    stop_grace_s: float = STOP_GRACE_S  # after SIGINT/SIGTERM, how long episodes in flight may finish
    progress_prefix: str = "[runner]"
    cpus: int | None = None  # CPUs the auto batch size may use (None: all of this process's)


@dataclass
class EvalResult:
    out_dir: Path
    eval_info: dict[str, Any]  # of this directory's episodes (a shard's: partial; not written to disk)
    metrics: dict[str, Any]
    records: list[EpisodeRecord]  # every episode of this run (earlier sessions included), one per episode
    eval_s: float  # this session
    batch_size: int
    processes: bool
    policy_in_workers: bool
    trace: list[TraceEvent] = field(default_factory=list)
    cpu_s: float | None = None  # CPU time of this process during the run plus that of every worker
    worker_cpu_s: list[float] = field(default_factory=list)  # per worker process (empty: no processes)
    resumed: int = 0  # episodes kept from earlier sessions
    ran: int = 0  # episodes finished in this session (ok or error)
    workers_replaced: int = 0
    shard: Shard | None = None
    run_file: RunFile | None = None

    @property
    def errors(self) -> list[EpisodeRecord]:
        return [r for r in self.records if not r.ok]


def policy_label(spec: Spec) -> str:
    """How metrics.json names the policy: its path for lerobot/python, else its type."""
    if spec.policy.type in ("lerobot", "python") and spec.policy.path:
        return spec.policy.path
    return spec.policy.type


def run_identity(spec: Spec) -> dict[str, Any]:
    """The spec fields that decide the results (hashed into run.json; see runner.results.runfile)."""
    return {
        "env": thaw(spec.env),
        "policy": thaw(spec.policy),
        "eval": {"n_episodes": spec.eval.n_episodes, "seed": spec.eval.seed, "videos": spec.eval.videos},
    }


def evaluate(spec: Spec, out_dir: Path, options: RunOptions = RunOptions()) -> EvalResult:
    """Run every episode of the spec's plan (or shard) not yet in `out_dir`, and write the outputs there."""
    for key, value in spec.install.env.items():
        os.environ.setdefault(key, str(value))  # e.g. MUJOCO_GL=egl, before any simulator loads
    if options.batch_size is not None and options.batch_size < 0:
        raise ConfigError(f"batch size must be >= 0 (0: auto), not {options.batch_size}")
    if options.max_retries < 0:
        raise ConfigError(f"max retries must be >= 0, not {options.max_retries}")
    if options.episode_timeout_s is not None and options.episode_timeout_s < 0:
        raise ConfigError(f"episode timeout must be >= 0 (0: none), not {options.episode_timeout_s}")
    if options.schedule is None:
        options = replace(options, schedule=spec.eval.schedule)
    adapter = get_adapter(spec.env.type)
    adapter.check()
    preflight = getattr(adapter, "preflight", None)
    if preflight is not None:
        preflight(spec.env)  # e.g. LIBERO's assets: fail before any output exists
    tasks = adapter.tasks(spec.env)
    plan = make_plan(tasks, n_episodes=spec.eval.n_episodes, seed=spec.eval.seed, videos=spec.eval.videos,
                     max_steps=lambda t: adapter.max_steps(t, spec.env), video_path=video_relpath)
    jobs = shard_jobs(plan, options.shard)
    out_dir = Path(out_dir)
    labels = {"env": spec.env.type, "task": spec.env.task, "policy": policy_label(spec)}
    run_file = RunFile(spec.name, run_identity(spec), tuple(tasks), spec.eval.n_episodes, labels, options.shard,
                       options.invocation)
    _existing_run(out_dir, run_file, options)  # refuse a mismatch now, before the policy loads

    policy = make_policy(spec.policy, spec.env)
    try:
        per_env = policy.per_env() if options.policy_in_workers is not False else None
        requested = options.batch_size if options.batch_size is not None else spec.eval.batch_size
        requested = requested or auto_batch_size(len(jobs), policy_in_workers=per_env is not None, cpus=options.cpus)
        # Decided on the whole plan, not on what is left: a resumed run keeps its worker processes (and crash
        # isolation) even when a single episode remains.
        processes = spec.eval.use_async_envs and (requested > 1 or options.isolate)
        keys = policy.observation_keys
        config = WorkerConfig(
            env_type=spec.env.type,
            env=thaw(spec.env),
            obs_keys=None if keys is None else frozenset(keys),
            policy_factory=per_env,
            out_dir=str(out_dir),
            videos=spec.eval.videos > 0,
            environ={k: str(v) for k, v in spec.install.env.items()},
        )
        preload = (*getattr(adapter, "preload", ()), *(getattr(policy, "preload", ()) if per_env else ()))
        with _locked(out_dir):
            previous, existing = _existing_run(out_dir, run_file, options)  # the state, now that it is ours
            if previous is not None:
                run_file = RunFile(spec.name, run_file.identity, run_file.tasks, run_file.n_episodes, labels,
                                   options.shard, options.invocation or previous.invocation, RUNNING,
                                   previous.eval_s)
            done = {r.key for r in existing if r.ok}
            todo = [job for job in jobs if job.key not in done]
            batch_size = max(1, min(requested, len(todo)))
            _start_session(out_dir, run_file, resumed=previous is not None)
            try:
                run = _run(todo, len(jobs), len(done), config, batch_size, processes, out_dir / LEDGER_NAME,
                           options, policy=None if per_env else policy, policy_name=policy_label(spec),
                           preload=preload)
            except BaseException as exc:
                state = INTERRUPTED if isinstance(exc, Interrupted | KeyboardInterrupt) else FAILED
                elapsed = getattr(exc, "elapsed_s", 0.0)
                with contextlib.suppress(Exception):  # never hide the real error (e.g. a full disk) behind this
                    write_run_file(out_dir, run_file.with_state(state, run_file.eval_s + elapsed))
                raise
            records, _ = merge_records([existing, run.records])
            total_s = run_file.eval_s + run.eval_s
            try:
                if options.shard is None:
                    eval_info, metrics = write_outputs(out_dir, records=records, tasks=tasks, eval_s=total_s,
                                                       **labels)
                else:  # a shard's outputs come from `runner merge`; its partial summary is returned, not written
                    eval_info = build_eval_info(records, tasks, total_s)
                    metrics = build_metrics(eval_info, tasks=tasks, **labels)
                run_file = run_file.with_state(COMPLETE, total_s)
                write_run_file(out_dir, run_file)
            except RunnerError as exc:  # e.g. a full disk: every episode is in the ledger already
                with contextlib.suppress(Exception):
                    write_run_file(out_dir, run_file.with_state(FAILED, total_s))
                raise type(exc)(f"{exc}; all {len(records)} episodes are in {out_dir / LEDGER_NAME}: run the "
                                "same command again to write the outputs") from None
    finally:
        policy.close()
    return EvalResult(out_dir, eval_info, metrics, records, run.eval_s, batch_size, processes, per_env is not None,
                      run.trace, run.cpu_s, run.worker_cpu_s, resumed=len(done), ran=len(run.records),
                      workers_replaced=run.workers_replaced, shard=options.shard, run_file=run_file)


def _existing_run(out_dir: Path, run_file: RunFile, options: RunOptions) -> tuple[RunFile | None, list[EpisodeRecord]]:
    """What `out_dir` already holds of this run: (its run.json, its records); refuses anything else."""
    ledger = out_dir / LEDGER_NAME
    has_ledger = ledger.exists() and ledger.stat().st_size > 0
    previous = read_run_file(out_dir)
    if previous is None:
        if has_ledger:
            raise ConfigError(f"{out_dir} already holds results ({LEDGER_NAME}) but no {RUN_NAME}, so it is "
                              "unknown which spec produced them; choose another --output-dir")
        if options.resume:
            raise ConfigError(f"--resume: {out_dir} holds no run to resume (no {RUN_NAME})")
        return None, []
    if options.resume is False:
        raise ConfigError(f"{out_dir} already holds results of a run; choose another --output-dir "
                          "(or leave out --no-resume to resume it)")
    if previous.merged_from:
        raise ConfigError(f"{out_dir} holds merged results (`runner merge`), which cannot be resumed; "
                          "resume the shard directories instead, then merge again")
    if previous.hash != run_file.hash:
        changes = spec_changes(previous.identity, run_file.identity)
        raise ConfigError(f"{out_dir} holds results of another spec, so they cannot be resumed "
                          f"(changed since: {'; '.join(changes) or 'the spec hash'}); use another --output-dir, "
                          "or restore the spec to resume")
    if previous.shard != run_file.shard:
        def name(shard: Shard | None) -> str:
            return "the whole plan" if shard is None else f"shard {shard}"
        raise ConfigError(f"{out_dir} holds {name(previous.shard)}, not {name(run_file.shard)}; "
                          "use another --output-dir")
    records = load_ledger(ledger).records if has_ledger else []
    stray = extra_records(records, run_file.tasks, run_file.n_episodes)
    if stray:
        raise ConfigError(f"{ledger} holds {len(stray)} episode(s) outside this run's plan "
                          f"(e.g. {stray[0].task_key} episode {stray[0].episode_index}); use another --output-dir")
    return previous, records


@contextmanager
def _locked(out_dir: Path) -> Iterator[None]:
    """The output directory, created and locked for this process (flock: released even by kill -9), so two
    runs never append to one ledger. An unwritable directory fails here, before the ledger or any episode."""
    from runner.results.outputs import OutputError

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(out_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise OutputError(f"cannot create the output directory {out_dir}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"{out_dir} is in use by another `runner run` (it holds {LOCK_NAME}); wait for it "
                              "to end, or choose another --output-dir") from None
        yield
    finally:
        os.close(fd)


def _start_session(out_dir: Path, run_file: RunFile, *, resumed: bool) -> None:
    """run.json first, before the ledger: a directory that cannot take it fails before any episode."""
    write_run_file(out_dir, run_file)
    if resumed:  # unfinished videos of episodes that a hard kill interrupted; those episodes run again
        for partial in (out_dir / "videos").glob("*/.*.partial.mp4"):
            with contextlib.suppress(OSError):
                partial.unlink()


@dataclass
class _Run:
    records: list[EpisodeRecord]
    eval_s: float
    trace: list[TraceEvent]
    cpu_s: float | None
    worker_cpu_s: list[float]
    workers_replaced: int = 0


def _run(jobs: list[EpisodeJob], total: int, done: int, config: WorkerConfig, batch_size: int, processes: bool,
         ledger_path: Path, options: RunOptions, *, policy: Any, policy_name: str, preload: tuple[str, ...]) -> _Run:
    """Slots, scheduler, ledger and progress for one session; everything is closed on the way out."""
    records: list[EpisodeRecord] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    with _stop_on_signals(options.stop_grace_s) as stop, Ledger(ledger_path) as ledger:
        if not jobs:
            return _Run(records, 0.0, [], 0.0, [])
        recorder = Recorder(ledger)
        progress = Progress(total, initial=done, prefix=options.progress_prefix) if options.progress else None
        warn = options.warn or (progress.message if progress is not None else _stderr)

        def add(record: EpisodeRecord) -> None:
            recorder.add(record)
            records.append(record)
            if progress is not None:
                progress.update(record)

        def on_error(job: EpisodeJob, reason: str, wall_s: float) -> None:
            add(error_record(job, reason, wall_s))

        slots: list[Any] = []
        scheduler = None
        graceful = False
        try:
            slots = open_slots(batch_size, config, processes=processes, method=options.start_method,
                               should_stop=stop.abandon, preload=preload)
            timeout = options.episode_timeout_s
            scheduler = Scheduler(slots, jobs, on_done=lambda job, result: add(to_record(job, result)),
                                  on_error=on_error, policy=policy, policy_name=policy_name, stop=stop,
                                  episode_timeout_s=(lambda job: default_episode_timeout(job.max_steps))
                                  if timeout is None else (timeout or None),
                                  max_retries=options.max_retries, warn=warn, schedule=options.schedule,
                                  fail_fast=done == 0)
            scheduler.run()
            graceful = True
        except (Interrupted, KeyboardInterrupt):
            signum = stop.signum or signal.SIGINT
            exc = Interrupted(f"interrupted after {done + len(records)} of {total} episodes "
                              f"({signal.Signals(signum).name}); the finished ones are in {ledger_path}; run the "
                              "same command again to resume")
            exc.exit_code = 128 + signum
            exc.elapsed_s = time.perf_counter() - start  # type: ignore[attr-defined]
            raise exc from None
        except RunnerError as exc:
            exc.elapsed_s = time.perf_counter() - start  # type: ignore[attr-defined]
            raise
        finally:
            if scheduler is not None:
                slots = [state.slot for state in scheduler.states]  # replaced workers included
            close_slots(slots, graceful=graceful)
            if progress is not None:
                progress.close()
            recorder.close()  # every finished episode is in the ledger before we return or raise
    worker_cpu = [slot.cpu_s for slot in slots if not slot.inline]
    replaced = scheduler.n_replaced if scheduler else 0
    cpu_s = None if None in worker_cpu or replaced else time.process_time() - cpu_start + sum(worker_cpu)
    return _Run(records, time.perf_counter() - start, scheduler.trace if scheduler else [], cpu_s,
                [c for c in worker_cpu if c is not None], replaced)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _record(job: EpisodeJob, **fields: Any) -> EpisodeRecord:
    """The ledger line of one planned episode: its identity from the job, the rest from `fields`."""
    return EpisodeRecord(task_group=job.task.group, task_id=job.task.task_id, task=job.task.name,
                         episode_index=job.index, seed=job.seed, **fields)


def to_record(job: EpisodeJob, result: EpisodeResult) -> EpisodeRecord:
    return _record(job, steps=result.steps, sum_reward=result.sum_reward, max_reward=result.max_reward,
                   success=result.success, wall_s=result.wall_s, video_path=result.video_path)


def error_record(job: EpisodeJob, reason: str, wall_s: float) -> EpisodeRecord:
    """An episode that could not be run (crash, hang): status "error", not a failure."""
    return _record(job, steps=0, sum_reward=math.nan, max_reward=math.nan, success=False, wall_s=wall_s,
                   video_path=None, status=ERROR, error=reason)


@contextmanager
def _stop_on_signals(grace_s: float) -> Iterator[StopControl]:
    """SIGINT/SIGTERM stop scheduling (episodes in flight get `grace_s` to finish); a second signal abandons
    them at once, a third raises KeyboardInterrupt wherever the main thread is."""
    stop = StopControl(grace_s)
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: Any) -> None:
        if stop.hard:
            raise KeyboardInterrupt
        stop.request(signum)

    previous: dict[int, Callable | int | None] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handler)
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
