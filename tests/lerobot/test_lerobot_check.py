"""`runner check` with a LeRobot checkpoint as the spec's policy (random-init ACT, saved here): the canaries hold its
episodes beside the scripted expert's; another checkpoint (other weights, same config) diverges and the check names
the policy's weights digest (a check on an unchanged stack is bit-identical: tests/test_check.py)."""

from __future__ import annotations

import json

import pytest
from helpers import REPO, runner_cli

TASK = "metaworld-push-v3"
SETS = ("policy.rename_map={}", "policy.empty_cameras=0", "policy.device=cpu", f"env.task={TASK}",
        "env.max_steps=30")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    from make_random_policy import build_random_act

    root = tmp_path_factory.mktemp("check")
    return {"root": root, "a": build_random_act(root / "a", seed=0), "b": build_random_act(root / "b", seed=1)}


def check(checkpoint, reference, *args: str):
    sets = [a for s in (*SETS, f"policy.path={checkpoint}") for a in ("--set", s)]
    return runner_cli("check", REPO / "specs" / "metaworld.yaml", "--reference", reference, *sets, *args,
                      timeout=900)


def test_a_swapped_checkpoint_diverges_and_is_named(checkpoints):
    reference = checkpoints["root"] / "metaworld.json"
    recorded = check(checkpoints["a"], reference, "--record")
    assert recorded.returncode == 0, recorded.stderr
    data = json.loads(reference.read_text())
    assert set(data["policies"]) == {"reference", "spec"}
    assert data["policies"]["spec"]["identity"]["data"]["weights"] == "model.safetensors"
    swapped = check(checkpoints["b"], reference)
    print(swapped.stdout)
    assert swapped.returncode == 5 and "Traceback" not in swapped.stderr, swapped.stdout + swapped.stderr
    assert "spec policy (lerobot " in swapped.stdout and ": diverged" in swapped.stdout
    assert "reference policy (scripted): 2 episodes, successes" in swapped.stdout  # the expert's still match
    assert "fingerprint changed since the reference: spec policy: sha256:" in swapped.stdout
