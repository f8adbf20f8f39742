"""Shared test set-up: offscreen rendering defaults, repo paths, and `--update-goldens`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
from pathlib import Path

import pytest

from runner.results import EpisodeRecord, Ledger, RunFile, Shard, write_run_file
from runner.results.coverage import video_relpath
from runner.results.runfile import COMPLETE
from runner.tasks import TaskRef

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", "egl")

REPO = Path(__file__).resolve().parents[1]


SHIPPED = ("aloha", "aloha_transfer_cube", "libero", "metaworld", "pusht")  # the benchmarks in specs/


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="rewrite golden files (expected messages, generated CI files) from the current output",
    )


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture
def repo_root() -> Path:
    return REPO


def read_video(path: Path) -> tuple[dict, list]:
    """(imageio's metadata, the frames as arrays) of a video file."""
    import imageio.v2 as iio
    import numpy as np

    reader = iio.get_reader(path)
    try:
        return reader.get_meta_data(), [np.asarray(f) for f in reader]
    finally:
        reader.close()


def kill_group(proc: subprocess.Popen) -> None:
    """Whatever a failed test left running of a process started in its own session (start_new_session=True)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ── results directories written with runner's own writers (for tests that then tamper with them) ──────────

TASKS = (TaskRef("easy", 0, "reach-v3", "Reach the goal"), TaskRef("easy", 1, "push-v3", "Push the puck"))
SEED, N, VIDEOS = 1000, 3, 1


def identity(n: int = N) -> dict:
    return {"env": {"type": "metaworld", "task": "easy"}, "policy": {"type": "random"},
            "eval": {"n_episodes": n, "seed": SEED, "videos": VIDEOS}}


def run_file(shard: Shard | None = None, **changes) -> RunFile:
    fields = dict(spec_name="t", identity=identity(), tasks=TASKS, n_episodes=N,
                  labels={"env": "metaworld", "task": "easy", "policy": "random"}, shard=shard,
                  invocation={"spec": "specs/t.yaml", "overrides": []}, state=COMPLETE)
    fields.update(changes)
    return RunFile(**fields)


def record(of: TaskRef, k: int, **changes) -> EpisodeRecord:
    fields = dict(task_group=of.group, task_id=of.task_id, task=of.name, episode_index=k, seed=SEED + k,
                  steps=10, sum_reward=float(k), max_reward=1.0, success=k % 2 == 0, wall_s=0.1,
                  video_path=video_relpath(of, k) if k < VIDEOS else None)
    fields.update(changes)
    return EpisodeRecord(**fields)


def write_dir(path: Path, run: RunFile, records: list[EpisodeRecord], *, videos: bool = True) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    write_run_file(path, run)
    with Ledger(path / "episodes.jsonl", fsync=False) as ledger:
        for r in records:
            ledger.append(r)
            planned = video_relpath(TaskRef(r.task_group, r.task_id, r.task, ""), r.episode_index)
            if videos and r.video_path == planned:  # a tampered path is named, never written
                (path / r.video_path).parent.mkdir(parents=True, exist_ok=True)
                (path / r.video_path).write_bytes(b"not really an mp4")
    return path


def full_records() -> list[EpisodeRecord]:
    return [record(t, k) for t in TASKS for k in range(N)]


# ── real Meta-World runs for the report and comparison tests (run once per test session) ─────────────

REPORT_TASKS = "reach-v3,button-press-v3,drawer-open-v3"
ARTIFACTS = Path(os.environ.get("RUNNER_TEST_ARTIFACTS", REPO / "test-artifacts"))  # screenshots a person looks at


def runner_run(spec: str, out: Path, *overrides: str, batch_size: int = 2) -> subprocess.CompletedProcess:
    import sys

    argv = [sys.executable, "-m", "runner.cli.main", "run", spec, "--output-dir", str(out), "--batch-size",
            str(batch_size), "--no-progress"]
    for override in overrides:
        argv += ["--set", override]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="session")
def metaworld_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The scripted experts and the random policy on three Meta-World tasks, 4 episodes each (paired: the same
    seeds), one video per task; and the random policy again from other seeds."""
    base = tmp_path_factory.mktemp("metaworld_runs")
    common = (f"env.task={REPORT_TASKS}", "eval.n_episodes=4", "env.max_steps=150", "eval.videos=1")
    runs = {"scripted": ("policy.type=scripted",), "random": ("policy.type=random",),
            "random_seed2000": ("policy.type=random", "eval.seed=2000", "eval.videos=0")}
    for name, extra in runs.items():
        runner_run("specs/metaworld.yaml", base / name, *common, *extra)
    return {name: base / name for name in runs}


# ── runner serve in a subprocess on loopback (remote-policy tests) ──────────────────────────────────────────

@dataclasses.dataclass
class Served:
    proc: subprocess.Popen
    port: int
    log_path: Path
    api_key: str | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stats(self) -> dict:
        import json
        import urllib.request

        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/stats")
        if self.api_key:
            request.add_header("Authorization", f"Api-Key {self.api_key}")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            return self.proc.wait(timeout)
        finally:
            kill_group(self.proc)


def start_server(spec: str | Path, *overrides: str, args: tuple[str, ...] = (), log_dir: Path, port: int = 0,
                 python: str | None = None, api_key: str | None = None, ready_s: float = 120) -> Served:
    """`runner serve SPEC` on 127.0.0.1 (port 0: any free one), once it says it is ready; `api_key`: the key
    clients must send (passed in $RUNNER_TEST_KEY)."""
    import selectors
    import sys
    import time

    env = dict(os.environ)
    if api_key:
        env["RUNNER_TEST_KEY"] = api_key
        args = (*args, "--api-key-env", "RUNNER_TEST_KEY")
    argv = [python or sys.executable, "-m", "runner.cli.main", "serve", str(spec), "--port", str(port),
            "--log-every", "1", *args]
    for override in overrides:
        argv += ["--set", override]
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"serve-{time.monotonic_ns()}.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
                                env=env)
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            if selector.select(timeout=1.0):
                line = proc.stdout.readline()
                if " on ws://" in line:
                    served_port = int(line.split(" on ws://", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])
                    return Served(proc, served_port, log_path, api_key)
                if not line and proc.poll() is not None:
                    break
            elif proc.poll() is not None:
                break
    kill_group(proc)
    raise AssertionError(f"runner serve did not start (rc {proc.returncode}): {log_path.read_text()}")


@contextlib.contextmanager
def served(spec: str | Path, *overrides: str, **kwargs):
    """A running `runner serve` for the test's duration; it must then stop cleanly on SIGTERM (exit 0)."""
    server = start_server(spec, *overrides, **kwargs)
    try:
        yield server
    except BaseException:
        kill_group(server.proc)
        raise
    rc = server.stop()
    assert rc == 0, f"runner serve exited {rc}: {server.log()}"


@pytest.fixture
def serve_policy(tmp_path: Path):
    """`served` for tests outside this folder's imports (tests/lerobot): `with serve_policy(SPEC, *sets): ...`."""
    import functools

    return functools.partial(served, log_dir=tmp_path / "serve-logs")
