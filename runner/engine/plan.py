"""The episode plan: every (task, episode) to run, its seed, length cap and video; the auto batch size.

Seeds: episode k of every task uses seed `eval.seed + k` (LeRobot restarts its seeds at every task
too). The env is reset with that seed and seeded policies (random) draw from it, so an episode's
result depends only on (task, k): never on the batch size, the worker that runs it, or what that
worker ran before.

Shards (`--shard i/N`): the plan is dealt round-robin, item p of the flat task-major plan going to shard
p % N. Deterministic and independent of everything but the plan; shards differ in size by at most one
episode, and every shard holds about 1/N of every task's episodes (so each shard builds every task's env,
and long and short tasks are spread evenly).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

from runner.errors import ConfigError
from runner.results.coverage import Plan
from runner.results.runfile import Shard
from runner.tasks import TaskRef, plan_size_problem

MAX_AUTO_BATCH = 64  # LeRobot's cap


@dataclass(frozen=True)
class EpisodeJob:
    task: TaskRef
    index: int  # k
    seed: int  # eval.seed + k
    max_steps: int
    video_path: str | None  # relative to the output dir; None: no video

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.task.group, self.task.task_id, self.index)

    def describe(self) -> str:
        return f"{self.task.key} ({self.task.name}) episode {self.index} (seed {self.seed})"


def make_plan(plan: Plan, max_steps: Callable[[TaskRef], int], shard: Shard | None = None) -> list[EpisodeJob]:
    """The jobs of `plan` in task-major order: all episodes of the first task, then the next task's, ...; with
    `shard`, only that shard's (the whole plan is never held in memory). ConfigError for a plan too large."""
    too_many = plan_size_problem(len(plan.tasks), plan.n_episodes)
    if too_many:
        raise ConfigError(f"the plan is too large: {too_many}")
    jobs = []
    position = 0
    for task in plan.tasks:
        limit = max_steps(task)
        for k in range(plan.n_episodes):
            if shard is None or shard.owns(position):
                jobs.append(EpisodeJob(task, k, plan.seed + k, limit, plan.video_path(task, k)))
            position += 1
    return jobs


def cpu_count() -> int:
    """CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def auto_batch_size(n_jobs: int, *, policy_in_workers: bool, cpus: int | None = None) -> int:
    """Slots when `eval.batch_size` is 0.

    A policy in the main process (LeRobot's case): LeRobot's rule, min(floor(0.7 x CPUs), episodes, 64),
    leaving CPU to the policy. A policy inside the workers (scripted, random): one slot per CPU.
    """
    cpus = cpus or cpu_count()
    per_cpu = cpus if policy_in_workers else math.floor(cpus * 0.7)
    return max(1, min(per_cpu, n_jobs, MAX_AUTO_BATCH))
