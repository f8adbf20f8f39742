"""LIBERO parity with LeRobot 0.6.1 (runs in .venv-lerobot, which has LeRobot's `libero` extra).

1. Observations: for the same task, init state and seed, what a policy receives from runner's `libero`
   env (converted as runner's lerobot policy adapter converts it) is bit-identical to what LeRobot's
   `LiberoEnv` + `preprocess_observation` + `LiberoProcessorStep` produce, at reset and after each action
   of a fixed sequence, for episodes 0 and 1 (init states 0 and 1); rewards, termination and success too.
2. Episodes: `lerobot-eval` and `runner run` with the same seeded random-init ACT policy (LIBERO features:
   two cameras, 8-dim state, 7-dim action), task, seeds and episode length give the same per-episode
   sum_reward, max_reward and success.

Set-up: `.ci/setup-lerobot.sh && .ci/setup-libero.sh --lerobot` (the test assets come from .venv, where
`.ci/setup-libero.sh` installs them, or from $RUNNER_LIBERO_ASSETS). Small images (64x64) and a few
steps keep it short: LIBERO renders two cameras at ~0.3 s per step here, env build ~8 s, reset 3-9 s.

    .venv-lerobot/bin/python -m pytest tests/lerobot/test_parity_libero.py -s
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, libero_test_assets, runner_cli, runner_run
from lerobot_testlib import assert_same_episodes, venv_bin

SPEC = REPO / "specs" / "libero.yaml"
SUITE, TASK_ID, SEED = "libero_spatial", 0, 1000
SIZE = 64
CAMERAS = {"agentview_image": "camera1", "robot0_eye_in_hand_image": "camera2"}  # as specs/libero.yaml
KEYS = ["observation.images.camera1", "observation.images.camera2", "observation.state"]
ACTIONS = np.array([  # a fixed action sequence in LIBERO's 7-dim space (eef delta pose 6 + gripper)
    [0.5, 0.0, -0.3, 0.0, 0.0, 0.1, -1.0],
    [0.0, 0.6, 0.0, 0.1, 0.0, 0.0, -1.0],
    [-0.4, 0.0, 0.5, 0.0, -0.1, 0.0, 1.0],
    [0.2, -0.5, -0.2, 0.0, 0.0, -0.2, 1.0],
], dtype=np.float32)

missing = [m for m in ("lerobot", "libero") if importlib.util.find_spec(m) is None]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed here: run .ci/setup-lerobot.sh "
                                             "then .ci/setup-libero.sh --lerobot, and use .venv-lerobot"),
]


ASSETS = libero_test_assets()


@pytest.fixture(scope="module")
def libero_ready(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hf-libero configured (config.yaml written by runner) and pointed at the test assets, in this process."""
    if ASSETS is None:
        pytest.fail("LIBERO test assets not found: run .ci/setup-libero.sh (or set RUNNER_LIBERO_ASSETS)")
    if "libero.libero" not in sys.modules:
        os.environ.setdefault("LIBERO_CONFIG_PATH", str(tmp_path_factory.mktemp("libero-config")))
    from runner.envs.libero.adapter import ensure_config

    ensure_config()
    import libero.libero

    libero.libero._assets_path_cache = str(ASSETS)  # what runner does in its env; LeRobot's env then finds them
    return ASSETS


def runner_env(overrides: list[str]):
    from runner.envs import get_adapter
    from runner.spec import load_spec

    spec = load_spec(SPEC, [f"env.task={SUITE}", f"env.task_ids=[{TASK_ID}]",
                            f"env.kwargs.observation_height={SIZE}", f"env.kwargs.observation_width={SIZE}",
                            f"env.kwargs.assets_dir={ASSETS}", *overrides])
    adapter = get_adapter("libero")
    (task,) = adapter.tasks(spec.env)
    return adapter, task, spec.env


def test_observations_identical_to_lerobot(libero_ready: Path) -> None:
    from lerobot.envs.configs import LiberoEnv as LiberoConfig
    from lerobot.envs.utils import preprocess_observation

    # LeRobot: its config -> a 1-env SyncVectorEnv (lerobot-eval at batch size 1); reset k uses init state k.
    config = LiberoConfig(task=SUITE, task_ids=[TASK_ID], observation_height=SIZE, observation_width=SIZE,
                          camera_name_mapping=dict(CAMERAS))
    t0 = time.perf_counter()
    theirs_env = config.create_envs(n_envs=1, use_async_envs=False)[SUITE][TASK_ID]
    env_preprocessor, _ = config.get_env_processors()
    max_steps = theirs_env.call("_max_episode_steps")[0]

    def theirs(observation: dict) -> dict:
        batch = preprocess_observation(observation)
        batch["task"] = list(theirs_env.call("task_description"))
        return env_preprocessor(batch)

    adapter, task, env_spec = runner_env([])
    ours_env = adapter.make(task, env_spec, obs_keys=frozenset({"pixels", "agent_pos"}), video=False)  # a LIBERO policy's keys
    assert adapter.max_steps(task, env_spec) == max_steps == 280
    assert ours_env.control_fps == config.fps == 20
    assert_same_episodes(theirs_env, theirs, ours_env, task.text, KEYS, [ACTIONS, ACTIONS[:2]], seed=SEED)
    print(f"\nLIBERO observation parity: 2 episodes, {len(ACTIONS) + 2} steps, {time.perf_counter() - t0:.1f} s")


def build_libero_act(out: Path, seed: int = 0) -> Path:
    """A seeded random-init ACT with LIBERO's features under the spec's camera names, identity stats."""
    import torch
    from lerobot.configs import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.act.processor_act import make_act_pre_post_processors

    image = PolicyFeature(type=FeatureType.VISUAL, shape=(3, SIZE, SIZE))
    features = {f"observation.images.{name}": image for name in CAMERAS.values()}
    features["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(8,))
    config = ACTConfig(
        device="cpu", input_features=features,
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(7,))},
        normalization_mapping={"VISUAL": NormalizationMode.MEAN_STD, "STATE": NormalizationMode.MEAN_STD,
                               "ACTION": NormalizationMode.MEAN_STD},
        pretrained_backbone_weights=None, chunk_size=4, n_action_steps=4, dim_model=64, n_heads=4,
        dim_feedforward=128, n_encoder_layers=1, n_decoder_layers=1, use_vae=False, push_to_hub=False,
    )
    stats = {key: {"mean": torch.zeros(3, 1, 1), "std": torch.ones(3, 1, 1)} for key in features if "images" in key}
    stats["observation.state"] = {"mean": torch.zeros(8), "std": torch.ones(8)}
    stats["action"] = {"mean": torch.zeros(7), "std": torch.ones(7)}
    torch.manual_seed(seed)
    policy = ACTPolicy(config)
    policy.eval()
    pre, post = make_act_pre_post_processors(config, dataset_stats=stats)
    for part in (policy, pre, post):
        part.save_pretrained(out)
    return out


def test_episodes_match_lerobot_eval(libero_ready: Path, tmp_path: Path) -> None:
    policy_dir = build_libero_act(tmp_path / "policy")
    steps, episodes = 5, 2
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("RUNNER_LIBERO_ASSETS", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), HF_HUB_OFFLINE="1", LIBERO_CONFIG_PATH=str(tmp_path / "libero-config"))
    # `runner prepare` writes hf-libero's config.yaml (lerobot-eval's `import libero` would call input()) and
    # links the assets into ~/.cache/libero/assets, where hf-libero itself looks: both sides use that.
    runner_cli("prepare", SPEC, "--assets-from", ASSETS, env=env, check=True, timeout=None, stdin=subprocess.DEVNULL)

    lerobot_eval = venv_bin("lerobot-eval")
    t0 = time.perf_counter()
    theirs = subprocess.run(
        [str(lerobot_eval), f"--policy.path={policy_dir}", "--policy.device=cpu", "--env.type=libero",
         f"--env.task={SUITE}", f"--env.task_ids=[{TASK_ID}]", f"--env.episode_length={steps}",
         f"--env.observation_height={SIZE}", f"--env.observation_width={SIZE}",
         f"--env.camera_name_mapping={json.dumps(CAMERAS)}", f"--eval.n_episodes={episodes}",
         "--eval.batch_size=1", "--eval.use_async_envs=false", f"--seed={SEED}",
         f"--output_dir={tmp_path / 'lerobot'}"],
        cwd=REPO, env=env, text=True, capture_output=True, timeout=900, stdin=subprocess.DEVNULL)
    lerobot_s = time.perf_counter() - t0
    assert theirs.returncode == 0, theirs.stderr[-4000:]
    info = json.loads((tmp_path / "lerobot" / "eval_info.json").read_text())
    (task_info,) = info["per_task"]
    assert (task_info["task_group"], task_info["task_id"]) == (SUITE, TASK_ID)
    metrics = task_info["metrics"]

    t0 = time.perf_counter()
    ours = runner_run(SPEC, tmp_path / "runner", f"policy.path={policy_dir}", "policy.device=cpu",
                      "policy.empty_cameras=0", f"env.task_ids=[{TASK_ID}]", f"env.max_steps={steps}",
                      f"env.kwargs.observation_height={SIZE}", f"env.kwargs.observation_width={SIZE}",
                      f"eval.n_episodes={episodes}", f"eval.seed={SEED}", "eval.videos=0", batch_size=1, env=env,
                      timeout=900, stdin=subprocess.DEVNULL)
    runner_s = time.perf_counter() - t0
    assert ours.returncode == 0, ours.stderr[-4000:]
    records = sorted((json.loads(line) for line in (tmp_path / "runner" / "episodes.jsonl").read_text().splitlines()),
                     key=lambda r: r["episode_index"])
    assert [r["steps"] for r in records] == [steps] * episodes
    assert [r["sum_reward"] for r in records] == metrics["sum_rewards"]
    assert [r["max_reward"] for r in records] == metrics["max_rewards"]
    assert [r["success"] for r in records] == metrics["successes"]
    print(f"\nLIBERO {episodes} episodes x {steps} steps: lerobot-eval {lerobot_s:.1f} s, runner run {runner_s:.1f} s "
          f"(ratio {lerobot_s / runner_s:.2f})")
