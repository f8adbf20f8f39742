"""The unit of evaluation: one task of a benchmark, shared by envs, engine and results."""

from __future__ import annotations

from dataclasses import dataclass


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
