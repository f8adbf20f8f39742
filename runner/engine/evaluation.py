"""`evaluate(spec, out_dir)`: plan the episodes, run them on slots, write the results.

Seeds: episode k of every task is reset with seed `eval.seed + k`, and seeded policies draw from the
same seed, so each episode's result is the same whatever the batch size, the number of workers, the
slot that ran it or the order episodes finished in (see runner.engine.plan).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.engine.plan import EpisodeJob, auto_batch_size, make_plan
from runner.engine.pool import close_slots, open_slots
from runner.engine.recorder import Recorder
from runner.engine.scheduler import Scheduler, TraceEvent
from runner.engine.worker import EpisodeResult, WorkerConfig
from runner.envs import get_adapter
from runner.errors import ConfigError, Interrupted
from runner.policies import make_policy
from runner.results import LEDGER_NAME, EpisodeRecord, Ledger, Progress, video_relpath, write_outputs
from runner.spec import Spec
from runner.spec.model import thaw


@dataclass(frozen=True)
class RunOptions:
    batch_size: int | None = None  # None: the spec's eval.batch_size (0: auto)
    policy_in_workers: bool | None = None  # None: whenever the policy offers a per-env form
    start_method: str | None = None  # multiprocessing start method (default forkserver, else spawn)
    episode_timeout_s: float | None = None
    schedule: str = "spread"  # see runner.engine.scheduler.SCHEDULES
    progress: bool = True


@dataclass
class EvalResult:
    out_dir: Path
    eval_info: dict[str, Any]
    metrics: dict[str, Any]
    records: list[EpisodeRecord]
    eval_s: float
    batch_size: int
    processes: bool
    policy_in_workers: bool
    trace: list[TraceEvent] = field(default_factory=list)
    cpu_s: float | None = None  # CPU time of this process during the run plus that of every worker
    worker_cpu_s: list[float] = field(default_factory=list)  # per worker process (empty: no processes)


def policy_label(spec: Spec) -> str:
    """How metrics.json names the policy: its path for lerobot/python, else its type."""
    if spec.policy.type in ("lerobot", "python") and spec.policy.path:
        return spec.policy.path
    return spec.policy.type


def evaluate(spec: Spec, out_dir: Path, options: RunOptions = RunOptions()) -> EvalResult:
    """Run every episode of the spec's plan and write the outputs into `out_dir`."""
    for key, value in spec.install.env.items():
        os.environ.setdefault(key, str(value))  # e.g. MUJOCO_GL=egl, before any simulator loads
    adapter = get_adapter(spec.env.type)
    adapter.check()
    tasks = adapter.tasks(spec.env)
    jobs = make_plan(tasks, n_episodes=spec.eval.n_episodes, seed=spec.eval.seed, videos=spec.eval.videos,
                     max_steps=lambda t: adapter.max_steps(t, spec.env), video_path=video_relpath)
    out_dir = Path(out_dir)
    ledger_path = out_dir / LEDGER_NAME
    if ledger_path.exists() and ledger_path.stat().st_size > 0:
        raise ConfigError(f"{out_dir} already holds results ({LEDGER_NAME}); choose another --output-dir")
    if options.batch_size is not None and options.batch_size < 0:
        raise ConfigError(f"batch size must be >= 0 (0: auto), not {options.batch_size}")

    policy = make_policy(spec.policy, spec.env)
    try:
        per_env = policy.per_env() if options.policy_in_workers is not False else None
        batch_size = options.batch_size if options.batch_size is not None else spec.eval.batch_size
        batch_size = min(batch_size or auto_batch_size(len(jobs), policy_in_workers=per_env is not None), len(jobs))
        processes = batch_size > 1 and spec.eval.use_async_envs
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
        run = _run(jobs, config, batch_size, processes, ledger_path, options,
                   policy=None if per_env else policy, policy_name=policy_label(spec), preload=preload)
    finally:
        policy.close()
    eval_info, metrics = write_outputs(out_dir, records=run.records, tasks=tasks, eval_s=run.eval_s,
                                       env=spec.env.type, task=spec.env.task, policy=policy_label(spec))
    return EvalResult(out_dir, eval_info, metrics, run.records, run.eval_s, batch_size, processes,
                      per_env is not None, run.trace, run.cpu_s, run.worker_cpu_s)


@dataclass
class _Run:
    records: list[EpisodeRecord]
    eval_s: float
    trace: list[TraceEvent]
    cpu_s: float | None
    worker_cpu_s: list[float]


def _run(jobs: list[EpisodeJob], config: WorkerConfig, batch_size: int, processes: bool, ledger_path: Path,
         options: RunOptions, *, policy: Any, policy_name: str, preload: tuple[str, ...]) -> _Run:
    """Slots, scheduler, ledger and progress for one run; everything is closed on the way out."""
    records: list[EpisodeRecord] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    with _stop_on_signals() as stop, Ledger(ledger_path) as ledger:
        recorder = Recorder(ledger)
        progress = Progress(len(jobs)) if options.progress else None

        def on_done(job: EpisodeJob, result: EpisodeResult) -> None:
            record = to_record(job, result)
            recorder.add(record)
            records.append(record)
            if progress is not None:
                progress.update(record)

        slots: list[Any] = []
        scheduler = None
        graceful = False
        try:
            slots = open_slots(batch_size, config, processes=processes, method=options.start_method,
                               should_stop=stop.is_set, preload=preload)
            scheduler = Scheduler(slots, jobs, on_done=on_done, policy=policy, policy_name=policy_name,
                                  stop_requested=stop.is_set, episode_timeout_s=options.episode_timeout_s,
                                  schedule=options.schedule)
            scheduler.run()
            graceful = True
        except Interrupted:
            raise Interrupted(f"interrupted after {len(records)} of {len(jobs)} episodes; the finished "
                              f"ones are in {ledger_path}") from None
        finally:
            close_slots(slots, graceful=graceful)
            if progress is not None:
                progress.close()
            recorder.close()  # every finished episode is in the ledger before we return or raise
    worker_cpu = [slot.cpu_s for slot in slots if not slot.inline]
    cpu_s = None if None in worker_cpu else time.process_time() - cpu_start + sum(worker_cpu)
    return _Run(records, time.perf_counter() - start, scheduler.trace if scheduler else [], cpu_s,
                [c for c in worker_cpu if c is not None])


def to_record(job: EpisodeJob, result: EpisodeResult) -> EpisodeRecord:
    return EpisodeRecord(
        task_group=job.task.group,
        task_id=job.task.task_id,
        task=job.task.name,
        episode_index=job.index,
        seed=job.seed,
        steps=result.steps,
        sum_reward=result.sum_reward,
        max_reward=result.max_reward,
        success=result.success,
        wall_s=result.wall_s,
        video_path=result.video_path,
    )


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """SIGINT/SIGTERM set the returned event (the run stops scheduling and closes its workers);
    a second signal interrupts at once."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous: dict[int, Callable | int | None] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handler)
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
