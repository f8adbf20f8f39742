"""`select_chunk` of the lerobot adapter (what `runner serve` answers openpi's clients with), on random-init ACT
policies (chunks of 10, 5 executed) and synthetic observations of Meta-World's shapes.

- Called every H steps with H == n_action_steps, it gives `select_action`'s actions step by step, bit for bit, in
  every forward mode, through a postprocessor that really unnormalises.
- Horizons run from 1 to the chunk size; a chunk of 10 is what a policy executing its 10 actions does.
- A pipeline that keeps state (relative actions) serves one fresh action per request; pi0's disabled pair keeps none.
- Policies outside the chunk path keep the defaults (one action at a time).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from helpers import REPO

from runner.errors import ConfigError
from runner.policies.base import EpisodeStart
from runner.tasks import TaskRef

H, CHUNK, TEXT = 5, 10, "push the puck"
TASK = TaskRef("metaworld-push-v3", 0, "push-v3", TEXT)
SPACE = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
STATS = {"action_mean": (0.5, -0.25, 1.0, 2.0), "action_std": 0.1}  # the postprocessor changes every action


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Same seed, same weights: `act` executes 5 of each chunk of 10, `act10` all 10."""
    from make_random_policy import build_random_act

    root = tmp_path_factory.mktemp("chunk-policies")
    return {"act": build_random_act(root / "act", n_action_steps=H, **STATS),
            "act10": build_random_act(root / "act10", **STATS),
            "relative": build_random_act(root / "relative", n_action_steps=H, relative_actions=True, **STATS),
            "ensemble": build_random_act(root / "ensemble", kind="act-ensemble")}


def adapter(path, *overrides: str):
    from runner.policies import make_policy
    from runner.spec import load_spec

    spec = load_spec(REPO / "specs" / "metaworld.yaml", [
        f"policy.path={path}", "policy.rename_map={}", "policy.empty_cameras=0", "policy.device=cpu",
        "env.task=metaworld-push-v3", *overrides])
    return make_policy(spec.policy, spec.env)


def observations(n: int, rows: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"pixels": rng.integers(0, 256, (rows, 480, 480, 3), dtype=np.uint8),
             "agent_pos": rng.normal(size=(rows, 4))} for _ in range(n)]


def start(policy, slots: list[int], seed: int = 1000) -> None:
    policy.reset([EpisodeStart(s, TASK, 0, seed + s, SPACE, len(slots)) for s in slots])


@pytest.mark.parametrize("forward", ["padded", "per_slot", "grouped"])
def test_chunks_every_h_steps_are_select_actions_step_by_step(checkpoints, forward) -> None:
    policy = adapter(checkpoints["act"], f"policy.kwargs={{forward: {forward}}}")
    assert policy.chunked and policy.stateless and policy.n_action_steps == H and policy.max_horizon() == CHUNK
    obs, slots = observations(3 * H, rows=2), [0, 1]
    start(policy, slots)
    stepwise = np.stack([policy.select_action(o, [TEXT] * 2, slots) for o in obs], axis=1)  # (2, 15, 4)
    start(policy, slots)
    chunks = [policy.select_chunk(o, [TEXT] * 2, slots, H) for o in obs[::H]]
    assert all(c.shape == (2, H, 4) and c.dtype == np.float32 for c in chunks)
    assert policy.take_queued(0) is None and policy.take_queued(1) is None  # nothing left queued
    served = np.concatenate(chunks, axis=1)
    assert np.array_equal(served, stepwise), f"max abs diff {np.abs(served - stepwise).max()}"
    assert not np.array_equal(served[0], served[1]) and len(np.unique(served[0, :, 0])) == 3 * H


def test_horizons_run_from_one_to_the_chunk_size(checkpoints) -> None:
    policy, whole = adapter(checkpoints["act"]), adapter(checkpoints["act10"])
    obs = observations(CHUNK, rows=1, seed=1)
    start(policy, [0])
    chunk = policy.select_chunk(obs[0], [TEXT], [0], CHUNK)
    assert chunk.shape == (1, CHUNK, 4)
    for horizon in (1, 3, H):
        assert np.array_equal(policy.select_chunk(obs[0], [TEXT], [0], horizon), chunk[:, :horizon])
    start(whole, [0])  # the same weights executing all 10 actions of its chunk
    assert np.array_equal(np.stack([whole.select_action(o, [TEXT], [0]) for o in obs], axis=1), chunk)
    for bad in (0, CHUNK + 1):
        with pytest.raises(ConfigError, match=rf"action horizon {bad}: .*\(act\) predicts chunks of 10 actions "
                                              r"\(1 to 10\)"):
            policy.select_chunk(obs[0], [TEXT], [0], bad)


def test_relative_actions_serve_one_fresh_action_per_request(checkpoints) -> None:
    """The postprocessor adds each step's own state to that step's action, which a chunk cannot know: horizon 1
    only, each action the first of a chunk predicted (and made absolute) from the request's observation."""
    policy = adapter(checkpoints["relative"])
    assert policy.chunked and not policy.stateless and policy.max_horizon() == 1
    obs = observations(3, rows=1, seed=2)
    start(policy, [0])
    with pytest.raises(ConfigError, match=r"action horizon 5: .* serves one action per request: its processor "
                                          r"pipelines keep state from step to step \(RelativeActionsProcessorStep, "
                                          r"AbsoluteActionsProcessorStep\)"):
        policy.select_chunk(obs[0], [TEXT], [0], H)
    served = [policy.select_chunk(o, [TEXT], [0], 1) for o in obs]
    for o, got in zip(obs, served, strict=True):
        assert got.shape == (1, 1, 4)
        start(policy, [0])  # a fresh episode's first action: a fresh chunk
        assert np.array_equal(got[:, 0], policy.select_action(o, [TEXT], [0]))
    start(policy, [0])
    queued = [policy.select_action(o, [TEXT], [0]) for o in obs]  # the same chunk's actions, each step's state
    assert not np.array_equal(queued[1], served[1][:, 0])


def test_pi0s_disabled_relative_actions_keep_no_state() -> None:
    """pi0's and pi05's pipelines always hold the relative-actions pair, disabled unless use_relative_actions."""
    from lerobot.policies.pi0.processor_pi0 import Pi0NewLineProcessor
    from lerobot.policies.pi05.processor_pi05 import Pi05PrepareStateTokenizerProcessorStep
    from lerobot.processor import PolicyProcessorPipeline
    from lerobot.processor.relative_action_processor import (
        AbsoluteActionsProcessorStep,
        RelativeActionsProcessorStep,
    )

    from runner.policies.lerobot.policy import stateful_steps

    def pair(enabled: bool) -> tuple:
        relative = RelativeActionsProcessorStep(enabled=enabled)
        return (PolicyProcessorPipeline(steps=[Pi0NewLineProcessor(), Pi05PrepareStateTokenizerProcessorStep(),
                                               relative]),
                PolicyProcessorPipeline(steps=[AbsoluteActionsProcessorStep(enabled=enabled, relative_step=relative)]))

    assert stateful_steps(*pair(False)) == []
    assert stateful_steps(*pair(True)) == ["RelativeActionsProcessorStep", "AbsoluteActionsProcessorStep"]


def test_policies_outside_the_chunk_path_give_one_action_at_a_time(checkpoints) -> None:
    policy = adapter(checkpoints["ensemble"])
    assert not policy.chunked and policy.max_horizon() == 1
    (o,) = observations(1, rows=1, seed=3)
    start(policy, [0])
    got = policy.select_chunk(o, [TEXT], [0], 1)
    start(policy, [0])
    assert got.shape == (1, 1, 4) and np.array_equal(got[:, 0], policy.select_action(o, [TEXT], [0]))
    with pytest.raises(ConfigError, match="one action at a time, not chunks of 2"):
        policy.select_chunk(o, [TEXT], [0], 2)
