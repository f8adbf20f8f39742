"""Resume with the real simulator: kill -9 of the whole run at random points, SIGTERM, torn lines, changed specs.

After any interruption, running the same command again finishes the run, and the result is exactly the
uninterrupted one: the same episode set (no loss, no duplicate), the same per-episode results (timings
aside), the same eval_info.json and metrics.json.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import shlex
import signal
import subprocess
import time
from pathlib import Path

import helpers
import pytest
from helpers import REPO, RUNNER, episodes_of, kill_group, outputs_of, proc_stats, runner_cli

from runner.results import read_run_file, validate_outputs

pytest.importorskip("metaworld")

N_EPISODES = 12  # per task; two tasks
TIMEOUT_S = 120
write_spec = functools.partial(helpers.write_spec, folder="spec", task="reach-v3,push-v3", max_steps=50,
                               n=N_EPISODES)  # write_spec(tmp_path): the random policy, batch size 2


def command(spec: Path, out: Path | None, *extra: str) -> list[str]:
    """The arguments of `runner run` (after RUNNER)."""
    where = ["--output-dir", str(out)] if out is not None else []
    return ["run", str(spec), *where, "--no-progress", *extra]


def finish(args: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    return runner_cli(*args, cwd=cwd, timeout=TIMEOUT_S)


def episodes(out: Path) -> dict:
    """Per-episode results without timings; asserts one record per episode (no duplicate)."""
    return episodes_of(out, unique=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, dict, tuple]:
    tmp = tmp_path_factory.mktemp("reference")
    spec = write_spec(tmp)
    out = tmp / "out"
    proc = finish(command(spec, out))
    assert proc.returncode == 0, proc.stderr
    result = episodes(out)
    assert len(result) == 2 * N_EPISODES
    return spec, result, outputs_of(out)


def lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def start(args: list[str], cwd: Path = REPO) -> subprocess.Popen:
    # Its own session: os.killpg reaches the run, the forkserver and every worker, as a node failure would.
    return subprocess.Popen([*RUNNER, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def kill_group_when(proc: subprocess.Popen, ledger: Path, *, at_lines: int, delay_s: float) -> int:
    """SIGKILL the run's process group once the ledger has `at_lines` lines (+ `delay_s`); the lines then."""
    deadline = time.monotonic() + TIMEOUT_S
    while lines(ledger) < at_lines:
        assert proc.poll() is None, f"the run ended before the kill point: {proc.stderr.read()}"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(delay_s)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    time.sleep(0.2)
    assert not _group_alive(proc.pid), "processes of the killed run survived"
    return lines(ledger)


def _group_alive(pgid: int) -> bool:
    return any(int(fields[2]) == pgid and fields[0] != "Z" for fields in proc_stats().values())


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to check the killed process group")
def test_kill_9_at_random_points_then_resume_gives_the_uninterrupted_run(tmp_path, reference):
    spec, expected, expected_outputs = reference
    rng = random.Random(20240611)
    report = []
    for trial in range(4):
        out = tmp_path / f"trial{trial}"
        ledger = out / "episodes.jsonl"
        at = 0 if trial == 0 else rng.randint(1, 2 * N_EPISODES - 3)
        delay = rng.uniform(0.5, 2.5) if trial == 0 else rng.uniform(0.0, 0.2)
        left = kill_group_when(start(command(spec, out)), ledger, at_lines=at, delay_s=delay)
        kills = [left]
        had_run_file = (out / "run.json").exists()
        if trial == 2:  # the resume is killed too
            left = kill_group_when(start(command(spec, out)), ledger, at_lines=left + 2, delay_s=0.05)
            kills.append(left)
        if trial == 3 and ledger.exists():  # and a torn last line, as a kill in the middle of a write leaves
            with ledger.open("a") as f:
                f.write('{"task_group": "reach-v3", "task_id": 0, "task": "rea')
        proc = finish(command(spec, out))
        assert proc.returncode == 0, proc.stderr
        assert episodes(out) == expected, f"trial {trial}"
        assert outputs_of(out) == expected_outputs
        validate_outputs(out)
        report.append(f"trial {trial}: killed at {kills} of {2 * N_EPISODES} ledger lines (run.json written: "
                      f"{had_run_file}), resumed to {2 * N_EPISODES}")
    print("\n".join(report))


@pytest.mark.slow
def test_signals_at_random_points_of_shutdown_never_lose_or_misreport_a_run(tmp_path, reference):
    """SIGINT or SIGTERM to the whole process group at random points after the last episode is recorded: while the
    run closes its workers and writes eval_info.json, metrics.json, run.json and report.html. Whatever the point:
    no traceback, at most one line; exit 0 (all written), 130 / 143 (a resume command printed, or, once the last
    output is written, a line that says the run finished), or killed by the signal without a word during the
    interpreter's exit (all written); and the printed command (or the same one)
    then leaves exactly the uninterrupted run's outputs."""
    spec, expected, expected_outputs = reference
    rng = random.Random(20261203)
    seen = []
    for trial in range(8):
        out = tmp_path / f"trial{trial}"
        signum = rng.choice([signal.SIGINT, signal.SIGTERM])
        proc = start(command(spec, out))
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while lines(out / "episodes.jsonl") < 2 * N_EPISODES:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.5))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signum)
            _, stderr = proc.communicate(timeout=60)
        finally:
            kill_group(proc)
        assert "Traceback" not in stderr and stderr.count("runner: ") <= 1, stderr
        state = read_run_file(out).state
        if proc.returncode in (130, 143) and "after the run finished" in stderr:  # the last outputs were written
            assert proc.returncode == 128 + signum and f"results in {out}" in stderr, stderr
            assert state == "complete" and (out / "report.html").is_file()
            again = finish(command(spec, out))
            assert "nothing left to run" in again.stdout, again.stdout
            seen.append(f"{signal.Signals(signum).name}: interrupted after the run finished")
        elif proc.returncode in (130, 143):
            assert proc.returncode == 128 + signum and "interrupted" in stderr, stderr
            again = finish(printed_command(stderr))
            seen.append(f"{signal.Signals(signum).name}: interrupted in state {state}")
        else:
            assert proc.returncode in (0, -signum) and not stderr, (proc.returncode, stderr)
            assert state == "complete" and (out / "report.html").is_file()
            again = finish(command(spec, out))  # nothing left: says so
            assert "nothing left to run" in again.stdout, again.stdout
            seen.append(f"{signal.Signals(signum).name}: {'finished' if proc.returncode == 0 else 'killed at exit'}")
        assert again.returncode == 0, again.stderr
        assert episodes(out) == expected and outputs_of(out) == expected_outputs, f"trial {trial}"
        assert read_run_file(out).state == "complete" and (out / "report.html").is_file()
        validate_outputs(out)
    print("\n".join(seen))


def test_a_resume_with_another_spec_is_refused_with_the_command_that_resumes_it(tmp_path):
    """The run was started with a --set the second command lacks: the refusal names the change and the command (with
    its --set) that does resume it; that command, run as printed, finds nothing left to run."""
    spec = helpers.write_spec(tmp_path, folder="spec", task="reach-v3", max_steps=10, n=2)
    out = tmp_path / "out"
    assert finish(command(spec, out, "--set", "eval.seed=5")).returncode == 0
    refused = finish(command(spec, out))
    assert refused.returncode == 2 and "changed since: eval.seed: 5 -> 1000" in refused.stderr, refused.stderr
    printed = refused.stderr.split("resume it as it was started: ", 1)[1].strip()
    argv = shlex.split(printed)
    assert argv[:2] == ["runner", "run"] and "eval.seed=5" in argv, printed
    again = finish(argv[1:])
    assert again.returncode == 0 and "nothing left to run" in again.stdout, again.stdout + again.stderr


def printed_command(stderr: str) -> list[str]:
    """The `runner ...` command a message ends with (after "resume with: "), as arguments after RUNNER."""
    line = next(line for line in stderr.splitlines() if "resume with: " in line)
    argv = shlex.split(line.split("resume with: ", 1)[1])
    assert argv[:2] == ["runner", "run"], line
    return argv[1:]


@pytest.mark.slow
def test_sigterm_exits_143_and_the_printed_command_resumes(tmp_path, reference):
    """Started without --output-dir (running the same command again would start a new run): the message names the
    command that resumes this one, and running it, as printed, does."""
    spec, expected, expected_outputs = reference
    work = tmp_path / "work"
    work.mkdir()
    proc = start(command(spec, None, "--set", "eval.videos=0"), cwd=work)
    [out] = _wait_for_default_dir(work, proc)
    deadline = time.monotonic() + TIMEOUT_S
    while lines(out / "episodes.jsonl") < 4:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "interrupted after" in stderr and "(SIGTERM)" in stderr and "Traceback" not in stderr
    resume = printed_command(stderr)
    assert "--output-dir" in resume and "eval.videos=0" in resume
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert 4 <= len(records) < 2 * N_EPISODES
    assert read_run_file(out).state == "interrupted" and not (out / "eval_info.json").exists()

    done = finish(resume, cwd=work)
    assert done.returncode == 0, done.stderr
    assert f"resumed: {len(records)} episode(s) were already done" in done.stdout
    assert episodes(out) == expected and outputs_of(out) == expected_outputs


@pytest.mark.slow
def test_resume_flag_finds_the_newest_run_of_the_spec(tmp_path, reference):
    spec, expected, _ = reference
    work = tmp_path / "work"
    work.mkdir()
    assert finish(command(spec, None, "--resume"), cwd=work).returncode == 2  # nothing to resume yet
    proc = start(command(spec, None), cwd=work)
    [out] = _wait_for_default_dir(work, proc)
    kill_group_when(proc, out / "episodes.jsonl", at_lines=3, delay_s=0.0)
    done = finish(command(spec, None, "--resume"), cwd=work)
    assert done.returncode == 0, done.stderr
    assert f"results in {out.relative_to(work)}" in done.stdout
    assert episodes(out) == expected


def _wait_for_default_dir(work: Path, proc: subprocess.Popen) -> list[Path]:
    deadline = time.monotonic() + TIMEOUT_S
    while not (found := list(work.glob("outputs/eval/*/*_t"))):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    return [found[0].resolve()]


def test_a_changed_spec_is_refused_naming_what_changed(tmp_path, reference):
    spec, _, _ = reference
    out = tmp_path / "out"
    out.mkdir()
    run_json = {"format": 1, "spec_name": "t", "spec_hash": "sha256:0", "state": "interrupted", "shard": None,
                "n_episodes": N_EPISODES, "tasks": [], "labels": {}, "eval_s": 0.0, "invocation": None,
                "merged_from": [], "spec": {}}
    (out / "run.json").write_text(json.dumps(run_json))
    refused = finish(command(spec, out))  # a run.json that runner did not write is refused, not trusted
    assert refused.returncode == 2 and "not a valid run file" in refused.stderr and "Traceback" not in refused.stderr

    (out / "run.json").unlink()
    first = finish(command(spec, out, "--set", "eval.n_episodes=1"))
    assert first.returncode == 0, first.stderr
    before = (out / "episodes.jsonl").read_bytes()
    refused = finish(command(spec, out, "--set", "eval.n_episodes=2", "--set", "env.max_steps=40"))
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert "env.max_steps: 50 -> 40; eval.n_episodes: 1 -> 2" in line and "Traceback" not in line
    refused = finish(command(spec, out, "--set", "eval.n_episodes=1", "--shard", "0/2"))
    assert refused.returncode == 2 and "holds the whole plan, not shard 0/2" in refused.stderr
    refused = finish(command(spec, out, "--set", "eval.n_episodes=1", "--no-resume"))
    assert refused.returncode == 2 and "already holds results" in refused.stderr
    assert (out / "episodes.jsonl").read_bytes() == before  # nothing touched


def test_a_directory_in_use_is_refused(tmp_path, reference):
    """Two runs never append to one ledger: the second finds the directory locked (flock) and leaves it."""
    import fcntl

    spec, _, _ = reference
    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".runner.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a run in progress holds it
        refused = finish(command(spec, out))
    assert refused.returncode == 2 and "is in use by another `runner run`" in refused.stderr
    assert sorted(p.name for p in out.iterdir()) == [".runner.lock"]


def write_stuck_spec(tmp_path: Path, batch: int) -> Path:
    """4 Meta-World episodes whose episodes 2 and 3 hang in the policy while $RUNNER_TEST_STUCK is set."""
    policy = {"type": "python", "path": "tests.policies_for_tests:per_env",
              "kwargs": {"slow_episodes": [2, 3], "stuck_while": "RUNNER_TEST_STUCK"}}
    return helpers.write_spec(tmp_path, name="stuck", folder="spec", task="reach-v3", max_steps=30, policy=policy, n=4,
                              batch_size=batch)


@pytest.mark.slow
@pytest.mark.parametrize("batch", [2, 1], ids=["worker processes", "in process"])
def test_sigterm_to_the_process_group_with_the_last_episodes_in_flight_is_interrupted_and_resumes(tmp_path, batch):
    """How SLURM, `timeout` and systemd stop a job: SIGTERM to every process of the group, workers included,
    while the last episodes run. Never exit 0 or "complete" with episodes missing; the same command finishes."""
    spec = write_stuck_spec(tmp_path, batch)
    out = tmp_path / "out"
    proc = subprocess.Popen([*RUNNER, *command(spec, out)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "RUNNER_TEST_STUCK": "1"})
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while lines(out / "episodes.jsonl") < 2:  # episodes 0 and 1 are done, 2 and 3 hang
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)  # in process: the stuck episode is abandoned after the 10 s grace
    finally:
        kill_group(proc)
    assert proc.returncode == 143, stderr
    assert "interrupted after 2 of 4 episodes (SIGTERM)" in stderr and "Traceback" not in stderr
    assert read_run_file(out).state == "interrupted" and not (out / "eval_info.json").exists()
    assert lines(out / "episodes.jsonl") == 2

    done = finish(command(spec, out))  # RUNNER_TEST_STUCK unset: nothing hangs now
    assert done.returncode == 0, done.stderr
    assert "resumed: 2 episode(s) were already done, 2 ran now" in done.stdout
    reference = tmp_path / "reference"
    assert finish(command(spec, reference)).returncode == 0
    assert episodes(out) == episodes(reference) and outputs_of(out) == outputs_of(reference)
    assert read_run_file(out).state == "complete"
    validate_outputs(out)


@pytest.mark.slow
def test_a_second_signal_abandons_a_stuck_in_process_episode_at_once(tmp_path):
    spec = write_stuck_spec(tmp_path, 1)
    out = tmp_path / "out"
    proc = subprocess.Popen([*RUNNER, *command(spec, out)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "RUNNER_TEST_STUCK": "1"})
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while lines(out / "episodes.jsonl") < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # the first signal waits for the episode in flight (grace period)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        kill_group(proc)
    assert time.monotonic() - sent < 5  # the second one stops at once
    assert proc.returncode == 130 and "interrupted after 2 of 4 episodes (SIGINT)" in stderr, stderr
    assert "Traceback" not in stderr and read_run_file(out).state == "interrupted"
