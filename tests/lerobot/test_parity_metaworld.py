"""Meta-World parity with the real `lerobot-eval` (LeRobot 0.6.1), on CPU, with a seeded random-init ACT policy.

The same policy directory, task (metaworld-push-v3), episodes and seeds (1000, 1001) go through
`lerobot-eval` and `runner run specs/metaworld.yaml`; per-episode `max_reward` and `success` must be
identical and `sum_reward` identical up to float64 summation order (runner sums with `math.fsum`,
correctly rounded; LeRobot with torch's vectorised sum, which can differ from it in the last bit).
Batch size 1 is compared with LeRobot's batch size 1 and batch size 2 with LeRobot's batch size 2
(LeRobot's batched forward pass differs from a batch-1 pass in the last bits, so the numbers drift apart).

Cost: Meta-World episodes always run 500 steps under lerobot-eval (and it always records videos), so the
module runs 1 + 2 episodes on each side, ~10-15 minutes on 2 cores; the results are shared by the tests.
Wall times of both sides: `benchmarks/lerobot_parity.py` runs the same commands (see benchmarks/lerobot_parity.md).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from lerobot_testlib import run_lerobot_eval, run_runner

pytestmark = pytest.mark.slow

TASK = "metaworld-push-v3"
SEED = 1000


@pytest.fixture(scope="module")
def results(policy_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Both sides at batch size 1 (1 episode) and 2 (2 episodes), one run at a time (2 cores)."""
    out = tmp_path_factory.mktemp("parity")
    policy = policy_dirs["image"]
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


def test_episodes_run_lerobots_length(results: dict[str, dict]) -> None:
    """No success with a random policy: every episode runs Meta-World's full 500 steps on our side too."""
    for name in ("runner_b1", "runner_b2"):
        assert results[name]["seeds"] == [SEED + k for k in range(len(results[name]["seeds"]))]
        for steps, episode in zip(results[name]["steps"], results[name]["episodes"], strict=True):
            assert steps == 500 or episode["success"]


def test_batch_size_changes_only_low_bits(results: dict[str, dict]) -> None:
    """Episode 0 (seed 1000) at batch size 1 vs 2: the same episode, only forward-pass rounding apart."""
    b1, b2 = results["runner_b1"]["episodes"][0], results["runner_b2"]["episodes"][0]
    assert b1["success"] == b2["success"]
    assert math.isclose(b1["sum_reward"], b2["sum_reward"], rel_tol=1e-3)
