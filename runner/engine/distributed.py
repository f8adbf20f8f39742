"""Runs launched as several processes by an existing engine (`accelerate launch`, `torchrun`): one shard each.

The launcher sets `RANK` and `WORLD_SIZE` (and `LOCAL_RANK`) in every process; rank r of a world of N
takes shard r/N of the plan and writes `<output-dir>/shard-<r>-of-<N>/`; rank 0 waits for every rank and
merges into `<output-dir>/`. The waiting is accelerate's `wait_for_everyone()` (a gloo barrier, CPU
only: it never touches the GPUs) when accelerate is importable and the launcher set `MASTER_ADDR`;
otherwise a file barrier in `<output-dir>/.barriers/<launch id>/`, keyed by a launch id that every rank
shares and that is new for every launch: `RUNNER_LAUNCH_ID`, else `TORCHELASTIC_RUN_ID` when the launcher
set one, else `SLURM_JOB_ID.SLURM_RESTART_COUNT`; rank 0 removes that directory once every rank is through.
A rank that dies makes the launcher (torchrun) stop the others; the shards already finished are kept, and
running the same command again resumes the rest.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import ConfigError, Interrupted, RunnerError
from runner.results import Shard

BARRIER_TIMEOUT = datetime.timedelta(days=7)  # evaluations are long; the launcher handles dead ranks
POLL_S = 0.5
LAUNCH_ID_VARS = ("RUNNER_LAUNCH_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")


def launch_id(environ: Mapping[str, str]) -> str | None:
    """The id every rank of this launch shares (for the file barrier), or None."""
    for name in LAUNCH_ID_VARS:
        value = environ.get(name)
        if value and value != "none":
            if name == "SLURM_JOB_ID":  # a requeued job keeps its id; its restart count changes
                value = f"{value}.{environ.get('SLURM_RESTART_COUNT') or 0}"
            return value
    return None


@dataclass(frozen=True)
class Launch:
    rank: int
    world: int
    local_rank: int
    local_world: int = 1  # ranks on this machine (they share its CPUs)

    @property
    def shard(self) -> Shard:
        return Shard(self.rank, self.world)

    def cpus(self, total: int) -> int:
        """This rank's share of the machine's CPUs, for the auto batch size."""
        return max(1, total // max(1, self.local_world))


def detect(environ: Mapping[str, str] = os.environ) -> Launch | None:
    """The launch this process belongs to (WORLD_SIZE > 1), or None."""
    try:
        world = int(environ.get("WORLD_SIZE", "1") or "1")
        if world <= 1:
            return None
        rank = int(environ["RANK"])
        local_rank = int(environ.get("LOCAL_RANK", rank) or rank)
        local_world = int(environ.get("LOCAL_WORLD_SIZE", world) or world)
    except (KeyError, ValueError):
        raise ConfigError("WORLD_SIZE is set but RANK is missing or not a number; launch with accelerate "
                          "launch or torchrun, or pass --shard INDEX/COUNT instead") from None
    if not 0 <= rank < world:
        raise ConfigError(f"RANK {rank} is outside 0..WORLD_SIZE-1 ({world})")
    return Launch(rank, world, local_rank, local_world)


class Group:
    """Barriers across the ranks of a launch."""

    def __init__(self, launch: Launch, out_dir: Path, environ: Mapping[str, str] = os.environ) -> None:
        self.launch = launch
        self.out_dir = Path(out_dir)
        self._state: Any = None
        self._token: str | None = None
        if environ.get("MASTER_ADDR") and _accelerate_available():
            from accelerate import PartialState

            # cpu=True: a gloo group for barriers only, whatever accelerators the machine has.
            try:
                self._state = PartialState(cpu=True, timeout=BARRIER_TIMEOUT)
            except Exception as exc:  # rendezvous failures (port taken, peers unreachable)
                raise ConfigError(f"accelerate could not set up the process group of the {launch.world} ranks: "
                                  f"{type(exc).__name__}: {exc}") from None
            if self._state.num_processes != launch.world:
                raise ConfigError(f"accelerate sees {self._state.num_processes} processes but WORLD_SIZE is "
                                  f"{launch.world}")
            _pin_gpu(launch.local_rank)
        else:
            self._token = launch_id(environ)
            if self._token is None:
                raise ConfigError("a run with WORLD_SIZE > 1 needs accelerate (pip install 'runner[dist]') or a "
                                  f"launch id shared by its ranks in one of {', '.join(LAUNCH_ID_VARS)} "
                                  "(for the file barrier)")

    @property
    def kind(self) -> str:
        return "accelerate" if self._state is not None else "file"

    @property
    def _root(self) -> Path:
        return self.out_dir / ".barriers" / _safe(self._token or "")

    def barrier(self, name: str) -> None:
        """Return when every rank has reached the barrier `name`."""
        if self._state is not None:
            self._state.wait_for_everyone()
            return
        self._arrive(name)
        self._wait(name)

    def close(self) -> None:
        """After the last barrier: the process group is destroyed, or rank 0 removes the barrier files once
        every rank has left them."""
        if self._state is not None:
            with contextlib.suppress(Exception):
                self._state.destroy_process_group()
            return
        self._arrive("left")
        if self.launch.rank == 0:
            self._wait("left")
            shutil.rmtree(self._root, ignore_errors=True)
            with contextlib.suppress(OSError):
                self._root.parent.rmdir()  # only when empty

    def _arrive(self, name: str) -> None:
        directory = self._root / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / str(self.launch.rank)).write_text("")

    def _wait(self, name: str) -> None:
        directory = self._root / name
        expected = {str(r) for r in range(self.launch.world)}
        while not expected <= {p.name for p in directory.iterdir()}:
            time.sleep(POLL_S)


class RankFailed(RunnerError):
    """A rank's shard, or rank 0's merge, failed; the message names the rank (exit code of the first failure)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class LaunchOutcome:
    """What one rank did: its shard's evaluation, and on rank 0 the merge of every shard."""

    tag: str  # "[rank r/N]"
    shard_dir: Path
    result: Any  # runner.engine.EvalResult of this rank's shard
    merged: Any = None  # rank 0: runner.results.merge.Merged


def run_launched(spec: Any, out_dir: Path, options: Any, launch: Launch, group: Group) -> LaunchOutcome:
    """One rank of `accelerate launch` / `torchrun`: run its shard into `out_dir/shard-<i>-of-<N>`, wait for every
    rank, and on rank 0 merge them into `out_dir` (runner.results.merge, the same checks as `runner merge`).
    A failure of this rank's shard or of the merge raises one RankFailed naming both; a signal raises at once."""
    import dataclasses

    from runner.engine.evaluation import evaluate
    from runner.engine.plan import cpu_count
    from runner.results.merge import merge

    shard = launch.shard
    shard_dir = Path(out_dir) / shard.dirname
    tag = f"[rank {launch.rank}/{launch.world}]"
    options = dataclasses.replace(options, shard=shard, progress=options.progress and launch.rank == 0,
                                  progress_prefix=f"[runner {shard}]", cpus=launch.cpus(cpu_count()))
    failures: list[tuple[str, RunnerError]] = []
    result = None
    try:
        result = evaluate(spec, shard_dir, options)
    except Interrupted:
        raise  # every rank got the signal; no barrier
    except RunnerError as exc:
        failures.append((f"{tag} shard {shard}", exc))
    group.barrier("evaluated")
    merged = None
    if launch.rank == 0:
        dirs = [Path(out_dir) / Shard(i, launch.world).dirname for i in range(launch.world)]
        try:
            merged = merge(dirs, Path(out_dir), merged_from=[d.name for d in dirs])
        except RunnerError as exc:
            failures.append((tag, exc))  # the message starts with "merge: "
    group.barrier("merged")
    group.close()
    if failures:
        raise RankFailed("\n".join(f"{where}: {exc}" for where, exc in failures), failures[-1][1].exit_code)
    return LaunchOutcome(tag, shard_dir, result, merged)


def _accelerate_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("accelerate") is not None


def _pin_gpu(local_rank: int) -> None:
    """Let `cuda` mean this rank's GPU (LOCAL_RANK), for policies that ask for `cuda` (torch is loaded by now)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.device_count() > 1:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:100] or "launch"
