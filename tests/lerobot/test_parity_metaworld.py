"""Meta-World parity with the real `lerobot-eval` (LeRobot 0.6.1), on CPU, with a seeded random-init ACT policy.

The same policy directory, task (metaworld-push-v3), episode and seed (1000) go through `lerobot-eval` and
`runner run specs/metaworld.yaml` at batch size 1; per-episode `max_reward` and `success` must be identical and
`sum_reward` identical up to float64 summation order (runner sums with `math.fsum`, correctly rounded; LeRobot with
torch's vectorised sum, which can differ from it in the last bit).

Cost: Meta-World episodes always run 500 steps under lerobot-eval, which renders every 480x480 frame twice (the
observation and its video, always recorded): one episode a side takes ~5 minutes of the CI's budget under load.
Batch size 2 is left to the PushT parity test (LeRobot's batched forward pass and runner's worker processes,
compared episode by episode) and to `benchmarks/lerobot_parity.py --batch-sizes 1 2`, which runs the same commands
at any batch size and prints both sides' episodes and wall times (benchmarks/lerobot_parity.md).
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
    """Both sides at batch size 1, one episode, one run at a time (2 cores)."""
    out = tmp_path_factory.mktemp("parity")
    policy = policy_dirs["image"]
    got = {"lerobot": run_lerobot_eval(policy, out / "lerobot", task=TASK, seed=SEED, batch_size=1, n_episodes=1),
           "runner": run_runner(policy, out / "runner", task=TASK, seed=SEED, batch_size=1, n_episodes=1)}
    for name, run in got.items():  # shown with -s / -rA; benchmarks/lerobot_parity.py measures the same
        print(f"{name}: wall {run['wall_s']:.1f} s, eval {run['eval_s']:.1f} s, {run['episodes']}")
    return got


def same_sum(a: float, b: float) -> bool:
    """Equal up to float64 summation order (a few ulps)."""
    return abs(a - b) <= 4 * math.ulp(max(abs(a), abs(b)))


def test_per_episode_results_match_lerobot_eval(results: dict[str, dict]) -> None:
    ours, theirs = results["runner"]["episodes"], results["lerobot"]["episodes"]
    assert len(ours) == len(theirs) == 1
    for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a["success"] == b["success"], f"episode {k}: {a} vs lerobot-eval {b}"
        assert a["max_reward"] == b["max_reward"], f"episode {k}: {a} vs lerobot-eval {b}"
        assert same_sum(a["sum_reward"], b["sum_reward"]), f"episode {k}: {a} vs lerobot-eval {b}"


def test_episodes_run_lerobots_length(results: dict[str, dict]) -> None:
    """No success with a random policy: the episode runs Meta-World's full 500 steps on our side too."""
    assert results["runner"]["seeds"] == [SEED]
    for steps, episode in zip(results["runner"]["steps"], results["runner"]["episodes"], strict=True):
        assert steps == 500 or episode["success"]
