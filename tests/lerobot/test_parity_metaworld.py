"""Meta-World parity with the real `lerobot-eval` (LeRobot 0.6.1), on CPU, with a seeded random-init ACT policy.

The same policy directory, task (metaworld-hammer-v3), episodes and seeds (1000, 1001) go through `lerobot-eval`
and `runner run specs/metaworld.yaml`; per-episode `max_reward` and `success` must be identical and `sum_reward`
identical up to float64 summation order (runner sums with `math.fsum`, correctly rounded; LeRobot with torch's
vectorised sum, which can differ from it in the last bit). Batch size 1 is compared with LeRobot's batch size 1
and batch size 2 with LeRobot's batch size 2 (LeRobot's batched forward pass differs from a batch-1 pass in the
last bits, so the numbers drift apart).

Cost: lerobot-eval renders every 480x480 frame twice (the observation and its always-recorded video), and a
Meta-World episode that never succeeds runs 500 steps: with a plain random policy the module took ~11 minutes
alone and ~26 under CI's load. So the policy's actions are centred on a constant push that solves the hammer task
(mean (1, 1, -1, -1), std 0.05 times the random network's output, which still depends on every image and state):
both seeds succeed after ~35 steps, with shaped rewards that differ per step. LeRobot and runner both end an
episode at success; a 500-step episode is compared by `benchmarks/lerobot_parity.py` (push-v3, plain random
ACT), and truncation at the time limit by the PushT parity test.
"""

from __future__ import annotations

import math

import pytest
from lerobot_testlib import run_lerobot_eval, run_runner

pytestmark = pytest.mark.slow

TASK = "metaworld-hammer-v3"
ACTIONS = {"action_mean": (1.0, 1.0, -1.0, -1.0), "action_std": 0.05}  # see the module's docstring
SEED = 1000


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Both sides at batch size 1 (1 episode) and 2 (2 episodes), one run at a time (2 cores)."""
    from make_random_policy import build_random_act

    out = tmp_path_factory.mktemp("parity")
    policy = build_random_act(out / "policy", **ACTIONS)
    got = {}
    for b in (1, 2):
        got[f"lerobot_b{b}"] = run_lerobot_eval(policy, out / f"lerobot_b{b}", task=TASK, seed=SEED, batch_size=b,
                                                n_episodes=b)
        got[f"runner_b{b}"] = run_runner(policy, out / f"runner_b{b}", task=TASK, seed=SEED, batch_size=b,
                                         n_episodes=b)
    for name, run in got.items():  # shown with -s / -rA; benchmarks/lerobot_parity.py measures the same
        print(f"{name}: wall {run['wall_s']:.1f} s, eval {run['eval_s']:.1f} s, {run['episodes']}")
    return got


def same_sum(a: float, b: float) -> bool:
    """Equal up to float64 summation order (a few ulps)."""
    return abs(a - b) <= 4 * math.ulp(max(abs(a), abs(b)))


@pytest.mark.parametrize("batch_size", [1, 2], ids=["batch1", "batch2"])
def test_per_episode_results_match_lerobot_eval(results: dict[str, dict], batch_size: int) -> None:
    ours = results[f"runner_b{batch_size}"]["episodes"]
    theirs = results[f"lerobot_b{batch_size}"]["episodes"]
    assert len(ours) == len(theirs) == batch_size
    for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a["success"] == b["success"], f"episode {k}: {a} vs lerobot-eval {b}"
        assert a["max_reward"] == b["max_reward"], f"episode {k}: {a} vs lerobot-eval {b}"
        assert same_sum(a["sum_reward"], b["sum_reward"]), f"episode {k}: {a} vs lerobot-eval {b}"


def test_episodes_end_at_success(results: dict[str, dict]) -> None:
    """Every episode succeeds within Meta-World's 500 steps and ends there (as LeRobot's do: the rewards, summed over
    the steps each side ran, are equal above)."""
    for name in ("runner_b1", "runner_b2"):
        assert results[name]["seeds"] == [SEED + k for k in range(len(results[name]["seeds"]))]
        for steps, episode in zip(results[name]["steps"], results[name]["episodes"], strict=True):
            assert episode["success"] and steps < 500


def test_batch_size_changes_only_low_bits(results: dict[str, dict]) -> None:
    """Episode 0 (seed 1000) at batch size 1 vs 2: the same episode, only forward-pass rounding apart."""
    b1, b2 = results["runner_b1"]["episodes"][0], results["runner_b2"]["episodes"][0]
    assert b1["success"] == b2["success"]
    assert math.isclose(b1["sum_reward"], b2["sum_reward"], rel_tol=1e-3)
