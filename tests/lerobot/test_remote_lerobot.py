"""A LeRobot policy served by `runner serve` (random-init ACT, CPU) gives the episodes of a local run at batch
size 2: the server's per-connection slots, episode starts and padded forward passes are the local ones. Four
episodes on two workers, so which worker runs episodes 2 and 3 depends on timing (it must not matter).

Episodes are cut to 30 steps (3 chunks of ACT's 10 actions) to keep the 480x480 rendering affordable here.
"""

from __future__ import annotations

import sys

import pytest
from helpers import served
from lerobot_testlib import run_runner

pytestmark = pytest.mark.slow

TASK, SEED, STEPS, EPISODES = "metaworld-push-v3", 1000, 30, 4


def test_served_act_equals_local_act_at_batch_2(policy_dirs, tmp_path) -> None:
    policy = policy_dirs["image"]
    sets = (f"env.max_steps={STEPS}",)
    local = run_runner(policy, tmp_path / "local", task=TASK, seed=SEED, batch_size=2, n_episodes=EPISODES, sets=sets)
    with served("specs/metaworld.yaml", f"policy.path={policy}", "policy.rename_map={}", "policy.empty_cameras=0",
                "policy.device=cpu", python=sys.executable, log_dir=tmp_path / "serve-logs") as server:
        remote = run_runner(policy, tmp_path / "remote", task=TASK, seed=SEED, batch_size=2, n_episodes=EPISODES,
                            sets=(*sets, "policy.type=remote", f"policy.url={server.url}"))
        stats = server.stats()
    assert remote["episodes"] == local["episodes"]  # bit-identical: same batch size, same padded forwards
    assert remote["steps"] == local["steps"] == [STEPS] * EPISODES
    assert stats["requests"] == EPISODES * STEPS and stats["policy"] == str(policy)
