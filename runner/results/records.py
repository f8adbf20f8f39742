"""One finished episode, as written to the ledger (`episodes.jsonl`, one JSON object per line)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

OK = "ok"  # the episode ran to its end (success or failure)
ERROR = "error"  # the episode could not be run (worker crash, timeout); not counted as a failure
STATUSES = (OK, ERROR)

_FLOATS = ("sum_reward", "max_reward", "wall_s")
_INTS = ("task_id", "episode_index", "seed", "steps")


@dataclass(frozen=True)
class EpisodeRecord:
    task_group: str
    task_id: int
    task: str  # simulator task name
    episode_index: int  # k: the k-th episode of this task
    seed: int  # eval.seed + k
    steps: int
    sum_reward: float
    max_reward: float
    success: bool
    wall_s: float
    video_path: str | None = None  # relative to the output dir
    status: str = OK
    error: str | None = None
    success_reported: bool = True  # false: the env never said whether the task succeeded (written only then)
    init_state: str | None = None  # `<kind>:<hash>` of the state right after reset (runner.envs.state); None in
    #                                ledgers written before it and for episodes that could not be run

    @property
    def key(self) -> tuple[str, int, int]:
        """Identity of the episode in the plan: (group, task id, episode index)."""
        return (self.task_group, self.task_id, self.episode_index)

    @property
    def task_key(self) -> str:
        """`<group>_<task_id>`, as `TaskRef.key`."""
        return f"{self.task_group}_{self.task_id}"

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data: numpy scalars become Python ones, NaN/Infinity become null."""
        data = {name: getattr(self, name) for name in _FIELD_NAMES}  # not asdict: no deep copies
        for name in _INTS:
            data[name] = int(data[name])
        for name in _FLOATS:
            value = float(data[name])
            data[name] = value if math.isfinite(value) else None  # strict JSON: never NaN/Infinity
        data["success"] = bool(data["success"])
        if data["success_reported"]:
            del data["success_reported"]  # the usual case: ledgers stay as they were
        else:
            data["success_reported"] = False
        for name in ("task_group", "task", "status"):
            data[name] = str(data[name])
        for name in ("video_path", "error"):
            if data[name] is not None:
                data[name] = str(data[name])
        if data["init_state"] is None:
            del data["init_state"]  # written only when known: older ledgers read the same
        else:
            data["init_state"] = str(data["init_state"])
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpisodeRecord:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        for name in _FLOATS:
            if values.get(name) is None:
                values[name] = math.nan
        return cls(**values)

    def normalized(self) -> EpisodeRecord:
        """The same record with plain Python values (numpy scalars converted; non-finite floats -> NaN)."""
        return EpisodeRecord.from_json(self.to_json())

    def without_timing(self) -> EpisodeRecord:
        """The record with timing fields zeroed: what must be equal between two runs of the same plan."""
        return dataclasses.replace(self, **{name: 0.0 for name in self.TIMING_FIELDS})

    # Fields that depend on timing, not on the simulation; ignored when comparing runs.
    TIMING_FIELDS = ("wall_s",)


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(EpisodeRecord))
