"""A LeRobot policy served by `runner serve` (random-init ACT, CPU) gives the episodes of a local run at batch
size 2: the server's per-connection slots, episode starts and padded forward passes are the local ones. Four
episodes on two workers, so which worker runs episodes 2 and 3 depends on timing (it must not matter).

Episodes are cut to 30 steps (3 chunks of ACT's 10 actions, one request each) to keep the 480x480 rendering
affordable here.

openpi's own client (WebsocketClientPolicy in ActionChunkBroker, .venv-openpi) against `runner serve --request ...
--action-horizon 5` of an ACT executing 5 of its 10: it executes what the local adapter's select_action gives.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, served
from lerobot_testlib import run_runner

pytestmark = pytest.mark.slow

TASK, SEED, STEPS, EPISODES = "metaworld-push-v3", 1000, 30, 4
OPENPI = REPO / ".venv-openpi" / "bin" / "python"
# openpi's LIBERO example's request layout, Meta-World's one camera for its image
REQUEST = {"observation/image": "pixels", "observation/state": "agent_pos", "prompt": "task"}
# openpi's client loop (run by .venv-openpi's Python): argv url horizon observations.npz out.npy prompt
OPENPI_CLIENT = """
import sys
import numpy as np
from openpi_client.action_chunk_broker import ActionChunkBroker
from openpi_client.websocket_client_policy import WebsocketClientPolicy

url, horizon, data, out, prompt = sys.argv[1], int(sys.argv[2]), np.load(sys.argv[3]), sys.argv[4], sys.argv[5]
policy = ActionChunkBroker(WebsocketClientPolicy(host=url), action_horizon=horizon)
np.save(out, np.stack([policy.infer({"observation/image": image, "observation/state": state, "prompt": prompt})
                       ["actions"] for image, state in zip(data["images"], data["states"], strict=True)]))
"""


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
    # one request per chunk: serve's replies carry the policy's n_action_steps (10) by default (select_chunk)
    assert stats["requests"] == EPISODES * STEPS // 10 and stats["policy"] == str(policy)


@pytest.mark.skipif(not OPENPI.exists(), reason="openpi-client is not installed: run .ci/setup-openpi.sh")
def test_openpis_chunk_broker_executes_the_local_select_actions(tmp_path) -> None:
    """15 synthetic observations of the checkpoint's shapes, one prompt, no episode_start: the server's implicit
    episode 0 (seed eval.seed); 3 requests of 5 actions each, equal to select_action's step by step."""
    from make_random_policy import build_random_act

    from runner.policies import make_policy
    from runner.policies.base import EpisodeStart
    from runner.spec import load_spec
    from runner.tasks import TaskRef

    horizon, steps, prompt = 5, 15, "push the puck to the goal"
    policy = build_random_act(tmp_path / "act", n_action_steps=horizon, action_mean=(0.5, -0.25, 1.0, 2.0),
                              action_std=0.1)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (steps, 480, 480, 3), dtype=np.uint8)
    states = rng.normal(size=(steps, 4))
    np.savez(tmp_path / "observations.npz", images=images, states=states)
    overrides = (f"policy.path={policy}", "policy.rename_map={}", "policy.empty_cameras=0", "policy.device=cpu",
                 f"env.task={TASK}")
    with served("specs/metaworld.yaml", *overrides, args=("--request", json.dumps(REQUEST), "--action-horizon",
                                                          str(horizon)),
                python=sys.executable, log_dir=tmp_path / "serve-logs") as server:
        proc = subprocess.run([str(OPENPI), "-c", OPENPI_CLIENT, server.url, str(horizon),
                               str(tmp_path / "observations.npz"), str(tmp_path / "actions.npy"), prompt],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr + server.log()
        stats = server.stats()
    got = np.load(tmp_path / "actions.npy")
    spec = load_spec(REPO / "specs" / "metaworld.yaml", list(overrides))
    local = make_policy(spec.policy, spec.env)
    local.reset([EpisodeStart(0, TaskRef("remote", 0, prompt, prompt), 0, spec.eval.seed, None, 1)])
    want = np.concatenate([local.select_action({"pixels": images[t:t + 1], "agent_pos": states[t:t + 1]}, [prompt],
                                               [0]) for t in range(steps)])
    assert got.shape == want.shape == (steps, 4) and got.dtype == np.float32
    assert np.array_equal(got, want), f"max abs diff {np.abs(got - want).max()}"
    assert stats["requests"] == steps // horizon
