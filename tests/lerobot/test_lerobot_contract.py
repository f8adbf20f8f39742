"""The pre-run contract step with real LeRobot checkpoints (random-init, saved here) on Meta-World.

- What a checkpoint declares: its config's input and output features in runner's keys (policy.rename_map undone,
  empty cameras left out), its chunking, and whether it resizes images itself (SmolVLA, diffusion with resize_shape).
- `runner run` with a checkpoint made for another env (ALOHA's camera, state and action) stops before any episode
  with one message naming both sides; `runner doctor` reports the step, failed for it, passed for a matching
  checkpoint; a served checkpoint's contract is checked by the client.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, one_error_line, runner_run, served
from lerobot_testlib import subprocess_env, venv_bin

from runner.contract import CHW, IMAGE, Input

TASK = "metaworld-push-v3"
SETS = ("policy.rename_map={}", "policy.empty_cameras=0", "policy.device=cpu", f"env.task={TASK}")
ALOHA = ("policy contract: the checkpoint reads observation.images.top (3x480x640) but env metaworld gives "
         "observation.image (3x480x480); set env.camera_name_mapping: {corner2: top} or map it with policy.rename_map: "
         "{observation.image: observation.images.top}; and the checkpoint reads observation.state (14,) but env "
         "metaworld gives observation.state (4,) (its agent_pos): the policy was made for another env's state; use one "
         "made for metaworld; and the checkpoint returns actions of 14 numbers but env metaworld takes 4; use a policy "
         "made for metaworld")


@pytest.fixture(scope="module")
def aloha_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from make_random_policy import build_random_act

    return build_random_act(tmp_path_factory.mktemp("aloha") / "act", layout="aloha")


def test_what_a_checkpoint_declares(policy_dirs) -> None:
    from runner.contract import compare
    from runner.envs import get_adapter
    from runner.policies import make_policy
    from runner.spec import load_spec

    renamed = "policy.rename_map={observation.image: observation.images.camera1}"
    spec = load_spec(REPO / "specs" / "metaworld.yaml", [f"policy.path={policy_dirs['camera1']}", *SETS, renamed])
    declared = make_policy(spec.policy, spec.env).contract()
    assert declared.inputs == (Input("observation.images.camera1", "pixels", (3, 480, 480), IMAGE, CHW),
                               Input("observation.state", "agent_pos", (4,)))
    assert (declared.action_dim, declared.chunk_size, declared.n_action_steps) == (4, 10, 10)
    assert declared.name_of("pixels") == "observation.images.camera1"  # messages show the env's keys renamed
    small = get_adapter("metaworld").provides(load_spec(REPO / "specs" / "metaworld.yaml", [
        "env.kwargs.observation_height=240"]).env)  # ACT takes any size, but it would see another scale: a mismatch
    assert compare(declared, small, "metaworld").message() == (
        "policy contract: the checkpoint reads observation.images.camera1 (3x480x480) but env metaworld gives "
        "observation.images.camera1 (3x240x480), and the policy does not resize images: set "
        "env.kwargs.observation_height: 480 and env.kwargs.observation_width: 480 (the env's side), or use a policy "
        "trained on 240x480 images")


def test_configs_that_resize_images_or_add_empty_cameras() -> None:
    """SmolVLA resizes (with padding) and its empty cameras are placeholders; diffusion resizes only with
    resize_shape, and declares its horizon as the chunk; ACT does not resize."""
    from lerobot.configs import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig

    from runner.policies.lerobot.policy import contract

    features = {"observation.images.top": PolicyFeature(FeatureType.VISUAL, (3, 96, 96)),
                "observation.state": PolicyFeature(FeatureType.STATE, (2,))}
    action = {"action": PolicyFeature(FeatureType.ACTION, (2,))}
    smolvla = SmolVLAConfig(input_features=dict(features), output_features=dict(action), empty_cameras=2)
    smolvla.validate_features()
    assert "observation.images.empty_camera_1" in smolvla.input_features
    declared = contract(smolvla, {})
    assert [(i.name, i.source, i.resized) for i in declared.inputs] == [
        ("observation.images.top", "pixels.top", True), ("observation.state", "agent_pos", False)]
    assert declared.chunk_size == smolvla.chunk_size and declared.n_action_steps == smolvla.n_action_steps
    for config, resized in ((DiffusionConfig(input_features=dict(features), output_features=dict(action),
                                             crop_shape=None), False),
                            (DiffusionConfig(input_features=dict(features), output_features=dict(action),
                                             resize_shape=(64, 64)), True),
                            (ACTConfig(input_features=dict(features), output_features=dict(action)), False)):
        declared = contract(config, {})
        assert declared.inputs[0].resized is resized, type(config).__name__
        assert declared.action_dim == 2
    diffusion = DiffusionConfig(input_features=dict(features), output_features=dict(action))
    declared = contract(diffusion, {})
    assert (declared.chunk_size, declared.n_action_steps) == (diffusion.horizon, diffusion.n_action_steps)


def test_run_with_a_checkpoint_for_another_env_stops_before_any_episode(aloha_policy, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = runner_run("specs/metaworld.yaml", out, f"policy.path={aloha_policy}", *SETS, "eval.n_episodes=1",
                      "eval.batch_size=1", "eval.videos=0", command=[venv_bin("runner")], env=subprocess_env(),
                      timeout=600)
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc) == f"runner: error: {ALOHA}"
    assert not (out / "episodes.jsonl").exists()


def doctor(*sets: str) -> tuple[int, dict[str, tuple[str, str]], str]:
    """`runner doctor specs/metaworld.yaml --quick` with `sets`: exit code, check name -> (status, detail), stdout."""
    argv = [venv_bin("runner"), "doctor", "specs/metaworld.yaml", "--quick"]
    for value in sets:
        argv += ["--set", value]
    proc = subprocess.run(argv, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    lines = {}
    for line in proc.stdout.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[0] in ("ok", "FAIL", "skip", "note"):
            lines[parts[1]] = (parts[0], parts[2])
    return proc.returncode, lines, proc.stdout + proc.stderr


def test_doctor_reports_the_step(policy_dirs, aloha_policy) -> None:
    code, lines, out = doctor(f"policy.path={aloha_policy}", *SETS)
    assert code == 3 and lines["contract"] == ("FAIL", ALOHA), out
    assert lines["load"][0] == "ok" and "Traceback" not in out
    code, lines, out = doctor(f"policy.path={policy_dirs['image']}", *SETS)
    assert code == 0, out
    assert lines["contract"] == ("ok", "fits env metaworld: observation.image (3x480x480), observation.state (4,), "
                                       "actions of 4; chunks of 10, 10 executed; images as float32 CHW in [0, 1]"), out


@pytest.mark.slow
def test_a_served_checkpoints_contract_is_checked_by_the_client(policy_dirs, tmp_path: Path) -> None:
    """`runner serve` sends the checkpoint's contract; a client whose env names its camera gives no `pixels`."""
    with served("specs/metaworld.yaml", f"policy.path={policy_dirs['image']}", *SETS, python=sys.executable,
                log_dir=tmp_path / "serve-logs") as server:
        code, lines, out = doctor("policy.type=remote", f"policy.url={server.url}", f"env.task={TASK}",
                                  "env.camera_name_mapping={corner2: top}")
        assert server.stats()["requests"] == 0
    assert code == 3 and lines["contract"] == ("FAIL", (
        f"policy contract: the policy server at {server.url} reads observation.image (3x480x480) but env metaworld "
        "gives observation.images.top (3x480x480) after env.camera_name_mapping; leave out env.camera_name_mapping "
        "(the env then gives its one image)")), out
