"""The unit of evaluation: one task of a benchmark, shared by envs, engine and results."""

from __future__ import annotations

from dataclasses import dataclass

# What one run may claim in all (tasks x episodes per task; each is bounded by the schemas): a plan always fits in
# memory.
MAX_PLAN_EPISODES = 1_000_000


@dataclass(frozen=True, order=True)
class TaskRef:
    """One task as LeRobot names it in eval_info.json: `<group>_<task_id>`.

    group:   the item of `env.task` it came from ("easy", "metaworld-push-v3", "libero_spatial")
    task_id: index of the task within that group
    name:    the simulator's task name ("push-v3", a LIBERO task name, a Gym id)
    text:    natural-language task description given to the policy
    """

    group: str
    task_id: int
    name: str
    text: str

    @property
    def key(self) -> str:
        return f"{self.group}_{self.task_id}"


def repeated_item(items: list[str] | tuple[str, ...]) -> str | None:
    """The first item of env.task's comma list that is listed twice (its episodes would collide in the results);
    `validate` and every adapter refuse it alike."""
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None


def plan_size_problem(n_tasks: int, n_episodes: int) -> str | None:
    """Why a plan of `n_tasks` x `n_episodes` is too large for one run, or None."""
    total = n_tasks * n_episodes
    if total <= MAX_PLAN_EPISODES:
        return None
    return (f"{n_tasks:,} tasks x {n_episodes:,} episodes = {total:,} episodes; one run holds at most "
            f"{MAX_PLAN_EPISODES:,} (fewer episodes or tasks, or several specs)")
