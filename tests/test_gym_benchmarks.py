"""PushT and ALOHA, shipped as YAML only (specs/pusht.yaml, specs/aloha*.yaml over the `gym` env type), run offline
with the random and a python policy: success reported by the env, LeRobot's task text, videos at the env's rate.
Parity with lerobot-eval is in the LeRobot suite (tests/lerobot/test_parity_gym.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import read_video

from runner.cli.main import main

# ALOHA renders 480x640 at every step: smaller images keep these runs short (the specs keep LeRobot's sizes).
SMALL_ALOHA = ["env.kwargs.observation_width=64", "env.kwargs.observation_height=48",
               "env.kwargs.visualization_width=64", "env.kwargs.visualization_height=48"]
CASES = {  # spec: (overrides, task text, video fps, video frame (h, w))
    "pusht": ([], "", 10, (384, 384)),
    "aloha": (SMALL_ALOHA, "insertion", 50, (48, 64)),
    "aloha_transfer_cube": (SMALL_ALOHA, "transfer_cube", 50, (48, 64)),
}

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("in_repo")]  # the python policy: tests.policies_for_tests


def run(out: Path, name: str, *overrides: str) -> dict:
    sets = [*CASES[name][0], "env.max_steps=12", *overrides]
    argv = ["run", f"specs/{name}.yaml", "--output-dir", str(out), "--no-progress",
            *(arg for s in sets for arg in ("--set", s))]
    assert main(argv) == 0
    return {f: json.loads((out / f"{f}.json").read_text()) for f in ("eval_info", "metrics")}


@pytest.mark.parametrize("name", sorted(CASES))
def test_random_policy_runs_offline_with_lerobots_task_text_and_video_rate(name, tmp_path, capsys):
    _, text, fps, frame = CASES[name]
    got = run(tmp_path, name, "policy.type=random", "eval.n_episodes=2", "eval.batch_size=2", "eval.videos=1")
    info, metrics = got["eval_info"], got["metrics"]
    assert info["overall"]["n_episodes"] == 2 and info["overall"]["success_unreported"] == []  # is_success
    assert metrics["task_descriptions"] == {"gym_0": text} and metrics["n_errors"] == 0
    (video,) = (tmp_path / "videos" / "gym_0").iterdir()
    meta, frames = read_video(video)
    assert meta["fps"] == pytest.approx(fps) and len(frames) >= 2
    assert frames[0].shape == (*frame, 3)
    assert "note:" not in capsys.readouterr().out


@pytest.mark.parametrize("name", ["pusht", "aloha"])
def test_python_policy_results_do_not_depend_on_the_batch_size(name, tmp_path):
    runs = [run(tmp_path / f"b{b}", name, "policy={type: python, path: 'tests.policies_for_tests:hold'}",
                "eval.n_episodes=3", f"eval.batch_size={b}", "eval.videos=0") for b in (1, 2)]
    per_task = [r["eval_info"]["per_task"][0]["metrics"] for r in runs]
    assert per_task[0]["sum_rewards"] == per_task[1]["sum_rewards"]
    assert per_task[0]["successes"] == per_task[1]["successes"] == [False] * 3


@pytest.mark.parametrize("module", ["gym_pusht", "gym_aloha", "gymnasium", "yaml", "PIL", "mujoco"])
def test_the_providers_of_a_module_are_what_a_full_scan_finds(module):
    """The shortcut (the distribution named like the module) and the fallback (every distribution's file list,
    here for yaml: PyYAML, PIL: pillow) agree with importlib.metadata's own scan."""
    from importlib import metadata

    from runner.envs.gym import providers

    assert sorted(providers(module)) == sorted(metadata.packages_distributions()[module])
