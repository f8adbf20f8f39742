"""Crash isolation with real simulators: worker segfaults, exits, hangs and simulator exceptions are survived.

The faults come from `tests/test_fault_envs.py` (a MuJoCo env that faults on chosen seeds). A fault on
some attempts only (transient) is retried on a fresh worker and leaves the results unchanged; a fault on
every attempt (deterministic) is retried a bounded number of times, then recorded as an error (not a
failure) while the run completes; a broken setup (everything fails) stops early; a policy that raises
stops the run at once with one message and an intact ledger, which a later run resumes.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import time
from pathlib import Path

import pytest
from helpers import eval_info_of, one_error_line, runner_cli, write_spec

from runner.engine import RunOptions, evaluate
from runner.errors import EvaluationError
from runner.results import load_ledger, read_run_file, strip_timings, validate_outputs
from runner.spec import load_spec

pytest.importorskip("mujoco")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ENV_TASK = "tests.test_fault_envs:Faulty-v0"
N = 4  # episodes; seeds 1000..1003
MAX_STEPS = 15


def faulty_spec(tmp_path: Path, name: str = "f", *, fault: str = "none", seeds: list[int] | None = (),
                once: bool = False, policy: dict | None = None, n: int = N) -> Path:
    """TMP_PATH/NAME/NAME.yaml: the faulty env (fault on `seeds`, all if None; `once`: on the first attempt only)."""
    kwargs: dict = {"fault": fault, "seeds": None if seeds is None else list(seeds)}
    if once:
        kwargs["once_dir"] = str(tmp_path / f"{name}-markers")
        (tmp_path / f"{name}-markers").mkdir(exist_ok=True)
    env = {"type": "gym", "task": ENV_TASK, "max_steps": MAX_STEPS, "kwargs": kwargs}
    return write_spec(tmp_path, name=name, folder=name, env=env, policy=policy, n=n)


def run(spec: Path, out: Path, **options):
    warnings: list[str] = []
    result = evaluate(load_spec(spec), out, RunOptions(progress=False, warn=warnings.append, **options))
    return result, warnings


def outcomes(records) -> dict:
    """Per-episode results without timings, by episode key."""
    return {r.key: (r.seed, r.steps, r.sum_reward, r.max_reward, r.success, r.status) for r in records}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The fault-free episodes (fault: none), run once."""
    tmp = tmp_path_factory.mktemp("reference")
    result, warnings = run(faulty_spec(tmp, "ref"), tmp / "out")
    assert not warnings and len(result.records) == N and not result.errors
    return outcomes(result.records)


# ── survived and retried ─────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("fault", ["segfault", "exit", "raise"])
def test_transient_fault_is_retried_and_changes_nothing(tmp_path, reference, fault):
    spec = faulty_spec(tmp_path, fault=fault, seeds=[1001, 1003], once=True)
    start = time.perf_counter()
    result, warnings = run(spec, tmp_path / "out")
    wall = time.perf_counter() - start
    assert not result.errors
    assert outcomes(result.records) == reference  # the retried episodes equal fault-free ones
    assert result.workers_replaced == 2
    assert len(warnings) == 2 and all("retrying on a fresh worker (attempt 2 of 3)" in w for w in warnings)
    expected = {"segfault": "killed by SIGSEGV", "exit": "exited with code 1", "raise": "injected step failure"}
    assert all(expected[fault] in w for w in warnings), warnings
    print(f"{fault}: 2 transient faults survived, run took {wall:.1f} s")


@pytest.mark.parametrize("fault, reason", [
    ("segfault", "was killed by SIGSEGV"),
    ("exit", "exited with code 1"),
    ("raise", "the simulator raised RuntimeError: injected step failure at step 3"),
    ("raise_reset", "the simulator raised RuntimeError: injected reset failure (seed 1002)"),
])
def test_deterministic_fault_is_recorded_as_an_error_and_the_run_completes(tmp_path, reference, fault, reason):
    spec = faulty_spec(tmp_path, fault=fault, seeds=[1002])
    result, warnings = run(spec, tmp_path / "out", max_retries=1)
    [error] = result.errors
    assert error.key == ("gym", 0, 2) and error.status == "error" and not error.success
    assert reason in error.error and "failed 2 attempts" in error.error
    assert result.workers_replaced == 2  # bounded: 1 + max_retries attempts, never more
    assert {k: v for k, v in outcomes(result.records).items() if k != error.key} == \
           {k: v for k, v in reference.items() if k != error.key}
    task = result.eval_info["per_task"][0]
    assert task["aggregated"]["n_errors"] == 1 and task["aggregated"]["n_episodes"] == N - 1
    assert task["errors"][0]["episode_index"] == 2 and reason in task["errors"][0]["error"]
    assert result.metrics["n_errors"] == 1
    validate_outputs(result.out_dir)
    assert [w.endswith("recorded as an error") for w in warnings] == [False, True]


def test_hung_worker_is_killed_after_the_timeout(tmp_path, reference):
    spec = faulty_spec(tmp_path, fault="hang", seeds=[1001])
    start = time.perf_counter()
    result, warnings = run(spec, tmp_path / "out", max_retries=1, episode_timeout_s=1.5)
    wall = time.perf_counter() - start
    [error] = result.errors
    assert error.key == ("gym", 0, 1)
    assert "spent more than the episode timeout of 1.5 s on it (hung?); killed it" in error.error
    assert result.workers_replaced == 2
    assert {k: v for k, v in outcomes(result.records).items() if k != error.key} == \
           {k: v for k, v in reference.items() if k != error.key}
    assert wall < 20, wall  # two 1.5 s timeouts, not an hour
    print(f"hang: 2 attempts killed after 1.5 s each; run took {wall:.1f} s")


def test_in_process_slot_retries_a_simulator_exception(tmp_path, reference):
    """Batch size 1 runs in this process: a simulator exception still rebuilds the env and retries."""
    spec = faulty_spec(tmp_path, fault="raise", seeds=[1000], once=True)
    result, warnings = run(spec, tmp_path / "out", batch_size=1)
    assert not result.processes and not result.errors
    assert outcomes(result.records) == reference and len(warnings) == 1


def test_isolate_runs_a_single_env_in_a_worker(tmp_path, reference):
    spec = faulty_spec(tmp_path, fault="segfault", seeds=[1000], once=True)
    result, _ = run(spec, tmp_path / "out", batch_size=1, isolate=True)
    assert result.processes and result.batch_size == 1 and not result.errors
    assert outcomes(result.records) == reference


def test_a_broken_setup_stops_early(tmp_path):
    """Every episode segfaults: after 3 episodes out of attempts (and none succeeded) the run stops."""
    spec = faulty_spec(tmp_path, fault="segfault", seeds=None, n=10)
    with pytest.raises(EvaluationError, match="the first 3 episodes to run all failed and none succeeded"):
        run(spec, tmp_path / "out", max_retries=1)
    contents = load_ledger(tmp_path / "out" / "episodes.jsonl")
    assert 3 <= len(contents.records) <= 4 and all(r.status == "error" for r in contents.records)
    assert read_run_file(tmp_path / "out").state == "failed"


# ── the CLI: summary, exit codes, resume of errors, a policy that raises ─────────────────────────────


runner = functools.partial(runner_cli, timeout=120)  # runner(*ARGS)


def test_cli_reports_errors_separately_and_resume_retries_them(tmp_path):
    spec = faulty_spec(tmp_path, fault="segfault", seeds=[1002])
    out = tmp_path / "out"
    proc = runner("run", str(spec), "--output-dir", str(out), "--max-retries", "1", "--no-progress")
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "1 episode(s) could not be run (not counted as failures):" in proc.stdout
    assert "gym_0 episode 2 (seed 1002): worker" in proc.stdout and "SIGSEGV" in proc.stdout
    line = one_error_line(proc)
    assert "1 of 4 episodes could not be run" in line and "--allow-errors" in line
    retry = shlex.split(line.split("to try them again: ", 1)[1])
    assert retry == ["runner", "run", str(spec), "--output-dir", str(out)]
    eval_info = json.loads((out / "eval_info.json").read_text())
    assert eval_info["overall"]["n_errors"] == 1 and eval_info["overall"]["n_episodes"] == 3
    assert json.loads((out / "metrics.json").read_text())["n_errors"] == 1

    # The printed command retries only the error episode (still failing) and exits 0 with --allow-errors.
    again = runner(*retry[1:], "--max-retries", "0", "--no-progress", "--allow-errors")
    assert again.returncode == 0, again.stderr
    assert "resumed: 3 episode(s) were already done, 1 ran now" in again.stdout
    assert eval_info_of(out) == strip_timings(eval_info)


def test_policy_that_raises_stops_with_one_message_and_the_ledger_intact(tmp_path):
    policy = {"type": "python", "path": "tests.test_fault_envs:flaky_policy"}
    spec = faulty_spec(tmp_path, policy=policy, n=6)
    out = tmp_path / "out"
    proc = runner("run", str(spec), "--output-dir", str(out), "--batch-size", "1", "--no-progress",
                  env={**os.environ, "FAULT_POLICY_RAISE_FROM": "4"})
    assert proc.returncode == 4, proc.stderr
    line = one_error_line(proc)
    assert "the policy raised ValueError: the flaky test policy fails on purpose" in line
    assert "Traceback" not in proc.stderr and "retrying" not in proc.stderr  # a policy bug is not retried
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert [json.loads(x)["episode_index"] for x in lines] == [0, 1, 2, 3]
    assert read_run_file(out).state == "failed" and not (out / "eval_info.json").exists()

    done = runner("run", str(spec), "--output-dir", str(out), "--batch-size", "2", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "resumed: 4 episode(s) were already done, 2 ran now" in done.stdout
    records = load_ledger(out / "episodes.jsonl").records
    assert sorted(r.episode_index for r in records) == list(range(6))
    validate_outputs(out)


def test_resuming_a_run_with_many_error_episodes_completes(tmp_path):
    """A resume retries the error episodes; when they all fail again it is no broken setup (earlier
    sessions succeeded), so the run completes instead of stopping early."""
    spec = faulty_spec(tmp_path, fault="raise", seeds=[1003, 1004, 1005], n=6)
    first, _ = run(spec, tmp_path / "out", max_retries=0)
    assert sorted(r.episode_index for r in first.errors) == [3, 4, 5]
    again, warnings = run(spec, tmp_path / "out", max_retries=0)
    assert again.resumed == 3 and again.ran == 3 and len(again.errors) == 3
    assert strip_timings(again.eval_info) == strip_timings(first.eval_info)
    assert len(warnings) == 3
