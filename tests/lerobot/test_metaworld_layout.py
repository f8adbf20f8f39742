"""Meta-World as LeRobot's policies see it, checked against LeRobot 0.6.1's own `MetaworldEnv` and config.

- task text (LeRobot's TASK_DESCRIPTIONS, verbatim) and difficulty groups (order = task ids) for all 50 tasks;
- what a policy receives: runner's env + the adapter's conversion vs LeRobot's env + `preprocess_observation`
  (the corner2 camera moved and flipped, 480x480, 4-dim state), at reset and along a fixed action sequence,
  with the same rewards, termination and success.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import REPO

ACTIONS = np.array([[0.5, -0.2, 0.1, 1.0], [-0.3, 0.6, -0.4, -1.0], [0.0, 0.0, 0.8, 0.3]], dtype=np.float32)


def runner_tasks(group: str):
    from runner.envs import get_adapter
    from runner.spec import load_spec

    spec = load_spec(REPO / "specs" / "metaworld.yaml", [f"env.task={group}"])
    return get_adapter("metaworld"), spec.env, get_adapter("metaworld").tasks(spec.env)


@pytest.mark.parametrize("group", ["easy", "medium", "hard", "very_hard"])
def test_groups_and_task_text_are_lerobots(group: str) -> None:
    from lerobot.envs.metaworld import DIFFICULTY_TO_TASKS, TASK_DESCRIPTIONS

    _, _, tasks = runner_tasks(group)
    assert [t.name for t in tasks] == [name.removeprefix("metaworld-") for name in DIFFICULTY_TO_TASKS[group]]
    assert [t.task_id for t in tasks] == list(range(len(tasks)))
    for task in tasks:
        assert task.text == TASK_DESCRIPTIONS[task.name], task.name


def test_mt50_covers_every_lerobot_task() -> None:
    from lerobot.envs.metaworld import TASK_DESCRIPTIONS

    _, _, tasks = runner_tasks("mt50")
    assert sorted(t.name for t in tasks) == sorted(TASK_DESCRIPTIONS)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["push-v3", "drawer-open-v3", "stick-pull-v3"])
def test_policy_inputs_equal_lerobots(name: str) -> None:
    import torch
    from lerobot.envs.metaworld import MetaworldEnv
    from lerobot.envs.utils import preprocess_observation

    adapter, env_spec, tasks = runner_tasks(f"metaworld-{name}")
    ours = adapter.make(tasks[0], env_spec, obs_keys=frozenset({"pixels", "agent_pos"}), video=False)
    theirs = MetaworldEnv(task=f"metaworld-{name}", obs_type="pixels_agent_pos")

    def policy_view(obs: dict) -> dict:
        return preprocess_observation({k: np.asarray(v)[None] for k, v in obs.items()})

    try:
        for seed in (1000, 1001):
            a, _ = ours.reset(seed=seed)
            b, _ = theirs.reset(seed=seed)
            steps = [(a, b, None, None)]
            for action in ACTIONS:
                oa, ra, ta, _, ia = ours.step(action)
                ob, rb, tb, _, ib = theirs.step(action)
                assert (ra, ta, ia["is_success"]) == (rb, tb, ib["is_success"])
                steps.append((oa, ob, ra, rb))
            for oa, ob, _, _ in steps:
                va, vb = policy_view(oa), policy_view(ob)
                assert sorted(va) == sorted(vb) == ["observation.image", "observation.state"]
                assert va["observation.image"].shape == (1, 3, 480, 480)
                assert va["observation.state"].shape == (1, 4)
                for key in va:
                    assert torch.equal(va[key], vb[key]), f"{name} seed {seed}: {key} differs"
    finally:
        ours.close()
        theirs.close()
