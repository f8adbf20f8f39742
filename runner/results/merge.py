"""Merging results directories (shards of one run, or partial runs of one spec) into one set of outputs.

`collect(dirs)` reads each directory's run.json and ledger, checks that they come from the same spec
(hash), and works out coverage: the episodes of the plan nobody recorded (each attributed to the shard
that owns it, with the command that runs or resumes that shard) and the episodes recorded in more than
one place (identical results: reported and one kept; different results: refused). `write_merged` writes
the same eval_info.json / metrics.json as an unsharded run, a merged episodes.jsonl (one record per
episode, in plan order), run.json, and the videos. Pure data and files: no spec, no simulator.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import RunnerError
from runner.results.aggregate import plan_keys
from runner.results.ledger import LEDGER_NAME, load_ledger
from runner.results.outputs import OutputError, write_outputs, write_text_atomic
from runner.results.records import EpisodeRecord
from runner.results.runfile import COMPLETE, RunFile, Shard, read_run_file, spec_changes, write_run_file

Key = tuple[str, int, int]
SHOW_MAX = 8  # episodes named per line in messages


class MergeError(RunnerError):
    """The directories cannot be merged (different specs, missing or conflicting episodes)."""


@dataclass
class Source:
    """One results directory given to merge."""

    path: Path
    run: RunFile
    records: list[EpisodeRecord]
    torn_line: bool = False


@dataclass
class Coverage:
    run: RunFile  # the common identity (of the first directory)
    sources: list[Source]
    records: list[EpisodeRecord]  # one per episode, plan order: the first ok record, else the first error
    origin: dict[Key, Source]  # where each kept record came from
    missing: list[Key] = field(default_factory=list)
    duplicates: dict[Key, list[Source]] = field(default_factory=dict)  # ok in several places, same results
    conflicts: dict[Key, list[Source]] = field(default_factory=dict)  # ok in several places, different results
    extra: list[EpisodeRecord] = field(default_factory=list)  # records outside the plan

    @property
    def eval_s(self) -> float:
        """Wall time of the merged run: the longest source (shards run side by side)."""
        return max((s.run.eval_s for s in self.sources), default=0.0)


def describe_keys(keys: Sequence[Key], tasks: dict[tuple[str, int], str] | None = None) -> str:
    """`reach-v3_0 episodes 1, 4; push-v3_0 episode 0` (at most SHOW_MAX episodes named)."""
    by_task: dict[str, list[int]] = {}
    for group, task_id, k in keys[:SHOW_MAX]:
        by_task.setdefault(f"{group}_{task_id}", []).append(k)
    parts = [f"{task} episode{'s' if len(ks) > 1 else ''} {', '.join(map(str, ks))}" for task, ks in by_task.items()]
    more = f" and {len(keys) - SHOW_MAX} more" if len(keys) > SHOW_MAX else ""
    return "; ".join(parts) + more


def collect(dirs: Sequence[Path]) -> Coverage:
    if not dirs:
        raise MergeError("merge: no results directories given")
    sources = [_source(Path(d)) for d in dirs]
    first = sources[0]
    for other in sources[1:]:
        if other.run.hash != first.run.hash:
            changes = spec_changes(first.run.identity, other.run.identity)
            raise MergeError(
                f"merge: {other.path} was run from another spec than {first.path} "
                f"({other.run.hash[:19]} vs {first.run.hash[:19]}): " + "; ".join(changes[:SHOW_MAX])
            )
    run = first.run
    plan = plan_keys(run.tasks, run.n_episodes)
    in_plan = set(plan)

    kept: dict[Key, tuple[EpisodeRecord, Source]] = {}
    ok_places: dict[Key, list[tuple[EpisodeRecord, Source]]] = {}
    extra: list[EpisodeRecord] = []
    for source in sources:
        for record in source.records:
            if record.key not in in_plan:
                extra.append(record)
                continue
            old = kept.get(record.key)
            if old is None or (not old[0].ok and record.ok):
                kept[record.key] = (record, source)
            if record.ok:
                ok_places.setdefault(record.key, []).append((record, source))
    coverage = Coverage(run, sources, [kept[k][0] for k in plan if k in kept], {k: s for k, (_, s) in kept.items()},
                        extra=extra)
    coverage.missing = [k for k in plan if k not in kept]
    for key, places in ok_places.items():
        if len(places) > 1:
            results = {json.dumps(r.without_timing().to_json(), sort_keys=True) for r, _ in places}
            target = coverage.duplicates if len(results) == 1 else coverage.conflicts
            target[key] = [s for _, s in places]
    return coverage


def _source(path: Path) -> Source:
    if not path.is_dir():
        raise MergeError(f"merge: {path}: no such directory")
    run = read_run_file(path)
    if run is None:
        raise MergeError(f"merge: {path} has no run.json: not a results directory of `runner run` "
                         "(or one written before run.json existed)")
    ledger = path / LEDGER_NAME
    if not ledger.exists():
        return Source(path, run, [])
    contents = load_ledger(ledger)
    return Source(path, run, contents.records, bool(contents.dropped_lines))


def _plan_position(run: RunFile) -> dict[Key, int]:
    return {key: i for i, key in enumerate(plan_keys(run.tasks, run.n_episodes))}


def missing_report(coverage: Coverage) -> list[str]:
    """Lines naming the missing episodes per shard, each with the command that runs or resumes that shard."""
    run = coverage.run
    position = _plan_position(run)
    shards = {s.run.shard for s in coverage.sources}
    counts = {s.count for s in shards if s is not None}
    lines = []
    if len(counts) == 1 and None not in shards:
        count = counts.pop()
        by_shard: dict[int, list[Key]] = {}
        for key in coverage.missing:
            by_shard.setdefault(position[key] % count, []).append(key)
        for index, keys in sorted(by_shard.items()):
            shard = Shard(index, count)
            have = [s for s in coverage.sources if s.run.shard == shard]
            if have:
                where = have[0].path
                what = f"its results in {where} are incomplete (state: {have[0].run.state}); resume it with"
            else:
                where = _sibling_dir(coverage.sources, shard)
                what = f"no results for it were given (expected in {where}); run it with"
            lines.append(f"shard {shard} is missing {len(keys)} episode(s) ({describe_keys(keys)}): {what}")
            lines.append(f"    {run.rerun_command(where, shard)}")
    else:
        lines.append(f"missing {len(coverage.missing)} episode(s): {describe_keys(coverage.missing)}")
        for source in coverage.sources:
            if source.run.state != COMPLETE:
                lines.append(f"  {source.path} is incomplete (state: {source.run.state}); resume it with:")
                lines.append(f"    {source.run.rerun_command(source.path)}")
    return lines


def _sibling_dir(sources: Sequence[Source], shard: Shard) -> Path:
    """Where a missing shard's results would go: next to the given shards' directories."""
    parent = sources[0].path.parent
    return parent / shard.dirname


def default_output_dir(dirs: Sequence[Path]) -> Path | None:
    """The common parent when every directory is a `shard-<i>-of-<N>` of it (distributed launches); else None."""
    paths = [Path(d).resolve() for d in dirs]
    parents = {p.parent for p in paths}
    if len(parents) == 1 and all(Shard.from_dirname(p.name) is not None for p in paths):
        return Path(dirs[0]).parent
    return None


def check_output_dir(out_dir: Path, coverage: Coverage) -> None:
    """Refuse to overwrite a directory that holds a run's own results (merge outputs may be replaced)."""
    out = Path(out_dir).resolve()
    for source in coverage.sources:
        if source.path.resolve() == out:
            raise MergeError(f"merge: the output directory {out_dir} is one of the inputs; choose another --output-dir")
    ledger = Path(out_dir) / LEDGER_NAME
    if ledger.exists():
        existing = read_run_file(Path(out_dir))
        if existing is None or not existing.merged_from:
            raise MergeError(f"merge: {out_dir} already holds the results of a run ({LEDGER_NAME}); "
                             "merge into another --output-dir")


def write_merged(out_dir: Path, coverage: Coverage, *,
                 merged_from: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Videos, episodes.jsonl, eval_info.json, metrics.json and run.json of the merged run, in `out_dir`."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MergeError(f"merge: cannot create {out_dir}: {exc.strerror or exc}") from None
    for record in coverage.records:
        if record.video_path:
            _copy_video(coverage.origin[record.key].path / record.video_path, out_dir / record.video_path)
    _write_ledger_atomic(out_dir / LEDGER_NAME, coverage.records)
    run = coverage.run
    eval_info, metrics = write_outputs(out_dir, records=coverage.records, tasks=run.tasks, eval_s=coverage.eval_s,
                                       env=run.labels["env"], task=run.labels["task"], policy=run.labels["policy"])
    merged = RunFile(run.spec_name, run.identity, run.tasks, run.n_episodes, run.labels, None, run.invocation,
                     COMPLETE, coverage.eval_s, tuple(merged_from))
    write_run_file(out_dir, merged)
    return eval_info, metrics


def _copy_video(src: Path, dst: Path) -> None:
    if not src.is_file():
        raise MergeError(f"merge: video {src} is named in the ledger but missing")
    if dst.exists() and os.path.samefile(src, dst):
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.merge-tmp")
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        try:
            os.link(src, tmp)  # same file system: no copy
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise MergeError(f"merge: cannot copy {src} to {dst}: {exc.strerror or exc}") from None


def _write_ledger_atomic(path: Path, records: Sequence[EpisodeRecord]) -> None:
    text = "".join(json.dumps(r.to_json(), allow_nan=False, ensure_ascii=False) + "\n" for r in records)
    try:
        write_text_atomic(path, text)
    except OutputError as exc:
        raise MergeError(f"merge: {exc}") from None


__all__ = ["Coverage", "MergeError", "Source", "check_output_dir", "collect", "default_output_dir",
           "describe_keys", "missing_report", "write_merged"]
