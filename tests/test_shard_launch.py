"""Launching on existing engines: `accelerate launch` with two CPU processes, and a plain RANK/WORLD_SIZE launch.

Each rank runs shard RANK/WORLD_SIZE into OUT/shard-<i>-of-<N>/, rank 0 waits for all and merges into OUT:
the merged result equals the unsharded run. A rank that fails leaves its shard incomplete; rank 0 names
the command that resumes it, and launching again finishes the run.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import helpers
import pytest
from helpers import REPO, RUNNER, eval_info_of, ledger_of, runner_cli

from runner.engine import RunOptions, evaluate
from runner.results import read_run_file, validate_outputs
from runner.spec import load_spec

TIMEOUT_S = 240
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "RUNNER_LAUNCH_ID",
               "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(extra)
    return env


write_spec = functools.partial(helpers.write_spec, name="d", folder="spec", batch_size=1)


def unsharded(spec: Path, out: Path) -> tuple[dict, list[str]]:
    evaluate(load_spec(spec), out, RunOptions(progress=False))
    return outputs(out)


def outputs(out: Path) -> tuple[dict, list[str]]:
    return eval_info_of(out), ledger_of(out, unique=True)


@pytest.mark.slow
def test_accelerate_launch_two_cpu_processes_merges_the_unsharded_result(tmp_path):
    pytest.importorskip("accelerate", reason="accelerate is the `dist` extra: .ci/setup-dist.sh installs it")
    pytest.importorskip("metaworld")
    spec = write_spec(tmp_path, env={"type": "metaworld", "task": "reach-v3,push-v3", "max_steps": 20},
                      policy={"type": "random"}, n=3)
    expected = unsharded(spec, tmp_path / "full")
    out = tmp_path / "launched"
    accelerate = Path(sys.executable).with_name("accelerate")
    # Without GPUs `accelerate launch --num_processes 2` starts one process; --multi_gpu makes it start two
    # (torchrun, gloo on CPU). With two or more GPUs, --num_processes 2 alone does the same.
    argv = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29517",
            "-m", "runner.cli.main", "run", str(spec), "--output-dir", str(out), "--no-progress"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, env=clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 processes (accelerate barrier)" in proc.stdout
    assert "[rank 1/2] shard 1/2: 3 episode(s) done" in proc.stdout
    assert "merged 2 shards into" in proc.stdout
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["shard-0-of-2", "shard-1-of-2"]
    assert outputs(out) == expected
    validate_outputs(out)
    assert read_run_file(out).merged_from == ("shard-0-of-2", "shard-1-of-2")


def launch(argv: list[str], world: int, launch_id: str, per_rank_env: dict[int, dict] | None = None
           ) -> list[subprocess.CompletedProcess]:
    """Start `world` ranks as a launcher would (RANK, WORLD_SIZE; no MASTER_ADDR: the file barrier)."""
    procs = []
    for rank in range(world):
        env = clean_env(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), RUNNER_LAUNCH_ID=launch_id,
                        **(per_rank_env or {}).get(rank, {}))
        procs.append(subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=env))
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return results


@pytest.mark.slow
def test_a_failed_rank_is_named_with_its_resume_command_and_a_new_launch_finishes(tmp_path):
    pytest.importorskip("mujoco")
    env = {"type": "gym", "task": "tests.test_fault_envs:Faulty-v0", "max_steps": 15, "kwargs": {"fault": "none"}}
    spec = write_spec(tmp_path, env=env, policy={"type": "python", "path": "tests.test_fault_envs:flaky_policy"}, n=6)
    expected = unsharded(spec, tmp_path / "full")
    out = tmp_path / "launched"
    argv = [*RUNNER, "run", str(spec), "--output-dir", str(out), "--no-progress"]

    first = launch(argv, 2, "first", {1: {"FAULT_POLICY_RAISE_FROM": "2"}})  # rank 1's policy fails
    assert [p.returncode for p in first] == [1, 4], [p.stderr for p in first]
    assert "the policy raised ValueError: the flaky test policy fails on purpose" in first[1].stderr
    assert "[rank 1/2] shard 1/2" in first[1].stderr
    rank0 = first[0].stderr
    assert "do not cover the plan" in rank0 and "shard 1/2 is missing" in rank0
    assert f"--shard 1/2 --output-dir {out / 'shard-1-of-2'}" in rank0
    assert not (out / "eval_info.json").exists()

    second = launch(argv, 2, "second")
    assert [p.returncode for p in second] == [0, 0], [p.stderr for p in second]
    assert "merged 2 shards into" in second[0].stdout
    assert outputs(out) == expected
    assert not (out / ".barriers").exists()  # rank 0 removed the barrier files once every rank was through


def test_world_size_without_a_rank_or_launch_id_is_one_clear_message(tmp_path):
    spec = write_spec(tmp_path, env={"type": "gym", "task": "Pendulum-v1", "max_steps": 5}, policy={"type": "random"},
                      n=1)
    args = ["run", str(spec), "--output-dir", str(tmp_path / "o")]
    proc = runner_cli(*args, timeout=60, env=clean_env(WORLD_SIZE="2"))
    assert proc.returncode == 2 and "RANK is missing" in proc.stderr and "Traceback" not in proc.stderr
    proc = runner_cli(*args, timeout=60, env=clean_env(WORLD_SIZE="2", RANK="0"))  # no MASTER_ADDR: the file barrier
    assert proc.returncode == 2 and "launch id" in proc.stderr and not (tmp_path / "o").exists()
    proc = runner_cli(*args[:-2], timeout=60, env=clean_env(WORLD_SIZE="2", RANK="0", RUNNER_LAUNCH_ID="x"))
    assert proc.returncode == 2 and "needs --output-dir" in proc.stderr


@pytest.mark.parametrize("environ, expected", [
    ({}, None),
    ({"WORLD_SIZE": "1", "RANK": "0"}, None),
    ({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, (3, 4, 1, 2)),
    ({"WORLD_SIZE": "2", "RANK": "1"}, (1, 2, 1, 2)),
])
def test_rank_and_world_size_come_from_the_launcher(environ, expected):
    from runner.engine.distributed import detect

    launch = detect(environ)
    assert (None if launch is None else (launch.rank, launch.world, launch.local_rank, launch.local_world)) == expected
    if launch is not None:
        assert str(launch.shard) == f"{launch.rank}/{launch.world}" and launch.cpus(16) == 16 // launch.local_world


@pytest.mark.parametrize("environ, expected", [
    ({"RUNNER_LAUNCH_ID": "a", "SLURM_JOB_ID": "9"}, "a"),
    ({"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "9", "SLURM_RESTART_COUNT": "2"}, "9.2"),
    ({"TORCHELASTIC_RUN_ID": "rdzv-7"}, "rdzv-7"),
    ({"TORCHELASTIC_RUN_ID": "none"}, None),
])
def test_launch_id_for_the_file_barrier(environ, expected):
    from runner.engine.distributed import launch_id

    assert launch_id(environ) == expected
