"""PushT and ALOHA parity with the real `lerobot-eval` (LeRobot 0.6.1): `specs/pusht.yaml`, `specs/aloha.yaml` and
`specs/aloha_transfer_cube.yaml` are plain YAML over runner's `gym` env type, checked against `--env.type=pusht` /
`--env.type=aloha`:

1. What policies see: at reset and after each of a few seeded random actions, two episodes, runner's env (converted
   as runner's lerobot policy adapter converts it) is bit-identical to LeRobot's env + processors; rewards,
   termination, success, the episode length, the video rate and the task text are LeRobot's. Every spec.
2. Episodes: `lerobot-eval` and `runner run` with the same seeded random-init ACT policy (the env's features:
   PushT's 96x96 image and 2-dim state, ALOHA's 480x640 `top` camera and 14-dim state), seeds and episode length
   give identical per-episode `max_reward` and `success`, and `sum_reward` up to float64 summation order, each
   compared with LeRobot at the same batch size. PushT at batch size 1 and 2; ALOHA (0.3 s a step here: it
   renders 480x640 at every step) at batch size 2 on insertion, the transfer-cube spec differing only in its id.

LeRobot runs its envs in-process (`--eval.use_async_envs=false`): its async envs cannot build these ids (the
forkserver children never import gym_pusht / gym_aloha, so Gymnasium does not know the namespace).
"""

from __future__ import annotations

import pytest
from helpers import REPO
from lerobot_testlib import assert_same_episodes, run_lerobot_eval, run_runner
from test_parity_metaworld import same_sum

pytestmark = pytest.mark.slow

SEED = 1000
CASES = {  # name: (spec, LeRobot env type, LeRobot task, policy layout, steps per episode)
    "pusht": ("specs/pusht.yaml", "pusht", "PushT-v0", "pusht", 60),
    "aloha": ("specs/aloha.yaml", "aloha", "AlohaInsertion-v0", "aloha", 15),
    "aloha_transfer_cube": ("specs/aloha_transfer_cube.yaml", "aloha", "AlohaTransferCube-v0", "aloha", 15),
}
EPISODE_RUNS = {"pusht": (1, 2), "aloha": (2,)}  # batch sizes compared with lerobot-eval


@pytest.mark.parametrize("name", sorted(EPISODE_RUNS))
def test_per_episode_results_match_lerobot_eval(name: str, tmp_path) -> None:
    from make_random_policy import build_random_act

    spec, env_type, task, layout, steps = CASES[name]
    policy = build_random_act(tmp_path / "policy", layout=layout)
    for b in EPISODE_RUNS[name]:
        theirs = run_lerobot_eval(policy, tmp_path / f"lerobot_b{b}", task=task, seed=SEED, batch_size=b,
                                  n_episodes=b, env_type=env_type, async_envs=False,
                                  env_args=(f"--env.episode_length={steps}",))
        ours = run_runner(policy, tmp_path / f"runner_b{b}", task=None, seed=SEED, batch_size=b, n_episodes=b,
                          spec=spec, sets=(f"env.max_steps={steps}",))
        for side, run in (("lerobot-eval", theirs), ("runner", ours)):
            print(f"{name} batch {b} {side}: wall {run['wall_s']:.1f} s, eval {run['eval_s']:.1f} s, {run['episodes']}")
        assert ours["seeds"] == [SEED + k for k in range(b)]
        assert len(ours["episodes"]) == len(theirs["episodes"]) == b
        for k, (a, t) in enumerate(zip(ours["episodes"], theirs["episodes"], strict=True)):
            where = f"batch {b} episode {k}: {a} vs lerobot-eval {t}"
            assert (a["success"], a["max_reward"]) == (t["success"], t["max_reward"]), where
            assert same_sum(a["sum_reward"], t["sum_reward"]), where
        if env_type == "pusht":  # matching zeros would prove little; PushT pays coverage from the first step
            assert any(e["sum_reward"] > 0 for e in ours["episodes"])


def lerobot_env(env_type: str, task: str, steps: int):
    """LeRobot's env as lerobot-eval builds it at batch size 1 (a 1-env SyncVectorEnv), its env processor, config."""
    from lerobot.envs.configs import EnvConfig

    config = EnvConfig.get_choice_class(env_type)(task=task, episode_length=steps)
    (env,) = (vec for suite in config.create_envs(n_envs=1, use_async_envs=False).values() for vec in suite.values())
    preprocessor, _ = config.get_env_processors()
    return env, preprocessor, config


def lerobot_task_text(env) -> str:
    """What lerobot-eval gives policies as `task`: the env's task_description, else its `task`, else ""."""
    for name in ("task_description", "task"):
        try:
            return list(env.call(name))[0]
        except (AttributeError, NotImplementedError):
            continue
    return ""


@pytest.mark.parametrize("name", sorted(CASES))
def test_observations_identical_to_lerobot(name: str) -> None:
    """Part 1 of the module docstring."""
    from lerobot.envs.utils import preprocess_observation

    from runner.envs import get_adapter
    from runner.spec import load_spec

    spec_path, env_type, task_name, layout, steps = CASES[name]
    keys = ["observation.image" if layout == "pusht" else "observation.images.top", "observation.state"]
    theirs_env, env_preprocessor, config = lerobot_env(env_type, task_name, steps)
    text = lerobot_task_text(theirs_env)  # PushT: "" (no task text); ALOHA: its `task` ("insertion", "transfer_cube")

    def theirs(observation: dict) -> dict:
        batch = preprocess_observation(observation)
        batch["task"] = [text]
        return env_preprocessor(batch)

    spec = load_spec(REPO / spec_path, [f"env.max_steps={steps}"])
    adapter = get_adapter("gym")
    (task,) = adapter.tasks(spec.env)
    assert task.text == text
    ours_env = adapter.make(task, spec.env, obs_keys=frozenset({"pixels", "agent_pos"}), video=False)
    assert adapter.max_steps(task, spec.env) == theirs_env.call("_max_episode_steps")[0] == steps
    assert ours_env.control_fps == config.fps
    space = theirs_env.single_action_space
    space.seed(0)
    actions = [space.sample() for _ in range(4)]
    assert_same_episodes(theirs_env, theirs, ours_env, task.text, keys, [actions, actions], seed=SEED)


def test_specs_are_yaml_only() -> None:
    """No adapter code of their own: each runs on the generic gym env type."""
    from runner.spec import load_spec

    for spec, *_ in CASES.values():
        assert load_spec(REPO / spec).env.type == "gym"
