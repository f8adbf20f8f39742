"""The ledger rules: which records a run's plan accepts, and what a set of ledgers covers.

One set of rules for every reader of results: a resumed run (its own ledger), `runner merge` and the merge
of a launched run's shards (several ledgers). A record belongs to the plan in run.json when
- its task (group, task id) is one of the plan's tasks, under the same simulator task name;
- 0 <= episode_index < n_episodes, and its seed is eval.seed + episode_index;
- its video_path is null or exactly the plan's path for that episode
  (`videos/<group>_<task_id>/eval_episode_<k>.mp4`, k < eval.videos), so no path read from a results
  file can point outside its directory.
An episode may be recorded more than once: attempts that failed (status "error"), then its result. Several
ok records of one episode must agree, timings aside: identical ones are duplicates (one is kept), different
ones are a conflict (the runs were not reproducible), which every reader refuses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.results.records import EpisodeRecord
from runner.tasks import TaskRef
from runner.text import visible

Key = tuple[str, int, int]
VIDEOS_DIR = "videos"
SHOW_MAX = 8  # episodes named per line in messages


def video_relpath(task: TaskRef, episode_index: int) -> str:
    """Where episode k's video goes, relative to the output dir: videos/<group>_<task_id>/eval_episode_<k>.mp4."""
    return f"{VIDEOS_DIR}/{task.key}/eval_episode_{episode_index}.mp4"


@dataclass(frozen=True)
class Plan:
    """The episodes a run is made of: every task x `n_episodes`, seeds from `seed`, the first `videos` recorded."""

    tasks: tuple[TaskRef, ...]
    n_episodes: int
    seed: int
    videos: int

    def keys(self) -> Iterator[Key]:
        """Every (group, task id, episode index), in plan order (task-major)."""
        for task in self.tasks:
            for k in range(self.n_episodes):
                yield (task.group, task.task_id, k)

    @property
    def size(self) -> int:
        return len(self.tasks) * self.n_episodes

    def video_path(self, task: TaskRef, episode_index: int) -> str | None:
        return video_relpath(task, episode_index) if episode_index < self.videos else None

    def mismatch(self, record: EpisodeRecord, by_key: dict[tuple[str, int], TaskRef]) -> str | None:
        """Why `record` does not belong to this plan, or None. `by_key`: `task_index()`."""
        task = by_key.get((record.task_group, record.task_id))
        if task is None:
            return f"task {record.task_key} is not in the plan"
        if record.task != task.name:
            return f"task {record.task_key} is {task.name!r} in the plan, not {record.task!r}"
        k = record.episode_index
        if k >= self.n_episodes:
            return f"episode {k} of {record.task_key} is outside the plan (n_episodes {self.n_episodes})"
        if record.seed != self.seed + k:
            return f"{record.task_key} episode {k} has seed {record.seed}, not eval.seed + {k} = {self.seed + k}"
        if record.video_path is not None and (not record.ok or record.video_path != self.video_path(task, k)):
            expected = self.video_path(task, k) if record.ok else None
            named = f"{record.task_key} episode {k} names the video {visible(json.dumps(record.video_path), 120)}"
            if expected is None:
                return f"{named}, but the plan records no video of it"
            return f"{named}, not the plan's {json.dumps(expected)}"
        return None

    def task_index(self) -> dict[tuple[str, int], TaskRef]:
        return {(t.group, t.task_id): t for t in self.tasks}


@dataclass(frozen=True)
class Foreign:
    """A record that does not belong to the plan."""

    source: int  # index into the sources
    line: int | None  # its line in that source's ledger, when known
    record: EpisodeRecord
    reason: str


@dataclass
class Coverage:
    """What a set of sources (ledgers) records of a plan."""

    plan: Plan
    records: list[EpisodeRecord]  # one per recorded episode, plan order: its ok record, else its first error
    origin: dict[Key, int]  # the source each kept record came from
    missing: list[Key] = field(default_factory=list)  # planned episodes with no record at all
    duplicates: dict[Key, list[int]] = field(default_factory=dict)  # ok in several records, identical results
    conflicts: dict[Key, list[int]] = field(default_factory=dict)  # ok in several records, different results
    foreign: list[Foreign] = field(default_factory=list)

    @property
    def done(self) -> set[Key]:
        """Episodes with an ok record (those recorded only as errors run again on resume)."""
        return {r.key for r in self.records if r.ok}

    @property
    def errors(self) -> list[EpisodeRecord]:
        return [r for r in self.records if not r.ok]


def cover(plan: Plan, sources: Sequence[Sequence[EpisodeRecord]], lines: Sequence[Sequence[int] | None] = (),
          shards: Sequence[Any] = (), only: Any = None) -> Coverage:
    """Apply the ledger rules to the records of `sources` (lists of records; `lines[i]`: their ledger lines;
    `shards[i]`: the shard source i ran, whose episodes alone it may hold). `only`: a shard whose part of the
    plan is to be covered (missing episodes of other shards are not listed)."""
    by_key = plan.task_index()
    task_number = {(t.group, t.task_id): i for i, t in enumerate(plan.tasks)}
    kept: dict[Key, tuple[EpisodeRecord, int]] = {}
    ok_places: dict[Key, list[tuple[EpisodeRecord, int]]] = {}
    foreign: list[Foreign] = []
    for index, records in enumerate(sources):
        numbers = lines[index] if index < len(lines) else None
        shard = shards[index] if index < len(shards) else None
        for position, record in enumerate(records):
            reason = plan.mismatch(record, by_key)
            if reason is None and shard is not None:
                owner = task_number[(record.task_group, record.task_id)] * plan.n_episodes + record.episode_index
                if not shard.owns(owner):
                    reason = f"{record.task_key} episode {record.episode_index} belongs to another shard than {shard}"
            if reason is not None:
                foreign.append(Foreign(index, numbers[position] if numbers else None, record, reason))
                continue
            old = kept.get(record.key)
            if old is None or (not old[0].ok and record.ok):
                kept[record.key] = (record, index)
            if record.ok:
                ok_places.setdefault(record.key, []).append((record, index))
    coverage = Coverage(plan, [], {}, foreign=foreign)
    for position, key in enumerate(plan.keys()):
        if only is not None and not only.owns(position):
            continue
        if key in kept:
            record, index = kept[key]
            coverage.records.append(record)
            coverage.origin[key] = index
        else:
            coverage.missing.append(key)
    for key, places in ok_places.items():
        if len(places) > 1:
            results = {_result(r) for r, _ in places}
            target = coverage.duplicates if len(results) == 1 else coverage.conflicts
            target[key] = sorted({i for _, i in places})
    return coverage


def _result(record: EpisodeRecord) -> str:
    return json.dumps(record.without_timing().to_json(), sort_keys=True)


def describe_keys(keys: Sequence[Key]) -> str:
    """`reach-v3_0 episodes 1, 4; push-v3_0 episode 0` (at most SHOW_MAX episodes named)."""
    by_task: dict[str, list[int]] = {}
    for group, task_id, k in list(keys)[:SHOW_MAX]:
        by_task.setdefault(f"{group}_{task_id}", []).append(k)
    parts = [f"{task} episode{'s' if len(ks) > 1 else ''} {', '.join(map(str, ks))}" for task, ks in by_task.items()]
    more = f" and {len(keys) - SHOW_MAX} more" if len(keys) > SHOW_MAX else ""
    return "; ".join(parts) + more


def refusals(coverage: Coverage, names: Sequence[Any]) -> list[str]:
    """The rule violations every reader refuses (records outside the plan, conflicting results), one line each;
    `names[i]` names source i (its ledger path) in the messages."""
    lines = []
    for item in coverage.foreign[:SHOW_MAX]:
        where = f"{names[item.source]}:{item.line}" if item.line else str(names[item.source])
        lines.append(f"{where}: {item.reason}")
    if len(coverage.foreign) > SHOW_MAX:
        lines.append(f"... and {len(coverage.foreign) - SHOW_MAX} more records that do not belong to the plan")
    if coverage.conflicts:
        keys = sorted(coverage.conflicts)
        where = ", ".join(str(names[i]) for i in coverage.conflicts[keys[0]])
        lines.append(f"{len(keys)} episode(s) recorded with different results ({describe_keys(keys)}; "
                     f"e.g. in {where}): the runs were not reproducible")
    return lines


__all__ = ["Coverage", "Foreign", "Key", "Plan", "cover", "describe_keys", "refusals", "video_relpath"]
