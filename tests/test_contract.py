"""The policy contract (runner.contract) and the pre-run "contract" step (runner.engine.preflight).

- The env side: what each family says it gives, from the spec alone, is what its env, built for real, gives
  (Meta-World; LIBERO with the offline test assets); Gym says nothing before it runs.
- The comparison on plain data: what mismatches (a camera the env does not give, an image of another size that the
  policy does not resize, another state or action size), what does not (extra env keys, a resizing policy), and
  what is not checked (a side that declares nothing).
- The step on real runs: `runner run` stops before any episode with one message naming both sides, `runner doctor`
  reports the step, `runner serve` refuses a policy whose contract its spec's env breaks, and a served policy's
  contract (sent in the server's metadata) is checked by the client.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, libero_test_assets, one_error_line, runner_cli, runner_run, served, write_spec

from runner.contract import CHW, IMAGE, EnvProvides, Input, PolicyContract, compare, from_data, to_data
from runner.envs import get_adapter
from runner.spec import load_spec

TIMEOUT_S = 300
# How a LeRobot checkpoint names runner's keys (runner.policies.lerobot.policy.LEROBOT_NAMES, which needs no LeRobot
# but lives in a module that imports runner's LeRobot adapter).
NAMES = {"pixels": "observation.image", "pixels.": "observation.images.", "agent_pos": "observation.state",
         "environment_state": "observation.environment_state"}


def metaworld(*overrides: str) -> EnvProvides:
    return get_adapter("metaworld").provides(load_spec(REPO / "specs" / "metaworld.yaml", list(overrides)).env)


def libero(*overrides: str) -> EnvProvides:
    """specs/libero.yaml's env without its camera names (LeRobot's: image, image2), with `overrides`."""
    spec = load_spec(REPO / "specs" / "libero.yaml", ["env.camera_name_mapping={}", *overrides])
    return get_adapter("libero").provides(spec.env)


def image(name: str, source: str, h: int = 480, w: int = 480, *, resized: bool = False) -> Input:
    return Input(name, source, (3, h, w), IMAGE, CHW, resized)


def checkpoint(*inputs: Input, action_dim: int | None = 4, **changes) -> PolicyContract:
    """A contract as a LeRobot checkpoint's reads (in its names, with policy.rename_map as the option)."""
    return PolicyContract(inputs=inputs, action_dim=action_dim, chunk_size=10, n_action_steps=10,
                          who="the checkpoint", names=NAMES, rename_option="policy.rename_map", **changes)


STATE4 = Input("observation.state", "agent_pos", (4,))


# ── the env side ───────────────────────────────────────────────────────────────────────────────────────────────


def test_metaworld_provides_from_the_spec():
    assert metaworld() == EnvProvides(
        {"pixels": (480, 480, 3), "agent_pos": (4,), "environment_state": (39,)}, action_dim=4,
        cameras={"pixels": "corner2"}, image_size=("env.kwargs.observation_height", "env.kwargs.observation_width"),
        one_image=True)
    mapped = metaworld("env.camera_name_mapping={corner2: top, corner: side}", "env.kwargs.observation_height=64",
                       "env.kwargs.observation_width=96")
    assert mapped.observations == {"pixels.top": (64, 96, 3), "pixels.side": (64, 96, 3), "agent_pos": (4,),
                                   "environment_state": (39,)}
    assert mapped.cameras == {"pixels.top": "corner2", "pixels.side": "corner"}
    assert mapped.note == "after env.camera_name_mapping"


def _flat(observation: dict) -> dict[str, tuple[int, ...]]:
    """An observation's keys as runner.contract names them, with their shapes."""
    out = {}
    for key, value in observation.items():
        if isinstance(value, dict):
            out.update({f"{key}.{camera}": np.shape(v) for camera, v in value.items()})
        else:
            out[key] = np.shape(value)
    return out


@pytest.mark.parametrize("overrides", [(), ("env.camera_name_mapping={corner2: top, corner: side}",
                                            "env.kwargs.observation_height=64", "env.kwargs.observation_width=96")],
                         ids=["default", "two-cameras-64x96"])
def test_metaworld_provides_what_its_env_gives(overrides):
    """The hook's values are those of the env as built and reset: keys, shapes, the action size."""
    pytest.importorskip("metaworld")
    spec = load_spec(REPO / "specs" / "metaworld.yaml", ["env.task=push-v3", *overrides])
    adapter = get_adapter("metaworld")
    (task,) = adapter.tasks(spec.env)
    env = adapter.make(task, spec.env, obs_keys=None, video=False)
    try:
        observation, _ = env.reset(seed=1000)
        provides = adapter.provides(spec.env)
        assert _flat(observation) == provides.observations
        assert env.action_space.shape == (provides.action_dim,)
    finally:
        env.close()


def test_libero_provides_from_the_spec():
    default = libero()
    assert default.observations == {"pixels.image": (360, 360, 3), "pixels.image2": (360, 360, 3), "agent_pos": (8,),
                                    "environment_state": None}  # the simulator state's size is known once built
    assert default.action_dim == 7
    assert default.cameras == {"pixels.image": "agentview_image", "pixels.image2": "robot0_eye_in_hand_image"}
    one = libero("env.kwargs.camera_name=agentview_image", "env.camera_name_mapping={agentview_image: top}",
                 "env.kwargs.observation_height=128", "env.kwargs.observation_width=96")
    assert one.observations == {"pixels.top": (128, 96, 3), "agent_pos": (8,), "environment_state": None}


@pytest.fixture
def libero_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if "libero.libero" not in sys.modules and "LIBERO_CONFIG_PATH" not in os.environ:
        monkeypatch.setenv("LIBERO_CONFIG_PATH", str(tmp_path / "libero-config"))
    yield


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("libero") is None or libero_test_assets() is None,
                    reason="hf-libero or the LIBERO test assets are missing: run .ci/setup-libero.sh")
def test_libero_provides_what_its_env_gives(libero_config):
    spec = load_spec(REPO / "specs" / "libero.yaml", [
        "env.task=libero_spatial", "env.task_ids=[0]", f"env.kwargs.assets_dir={libero_test_assets()}",
        "env.camera_name_mapping={robot0_eye_in_hand_image: wrist}", "env.kwargs.observation_height=32",
        "env.kwargs.observation_width=48"])
    adapter = get_adapter("libero")
    (task,) = adapter.tasks(spec.env)
    env = adapter.make(task, spec.env, obs_keys=None, video=False)
    try:
        space = env.observation_space
        given = {f"pixels.{camera}": box.shape for camera, box in space["pixels"].items()}
        given.update({key: space[key].shape for key in ("agent_pos", "environment_state")})
        provides = adapter.provides(spec.env)
        assert given == {**provides.observations, "environment_state": given["environment_state"]}
        assert provides.observations["environment_state"] is None and len(given["environment_state"]) == 1
        assert env.action_space.shape == (provides.action_dim,)
    finally:
        env.close()


def test_gym_provides_nothing_before_it_runs(tmp_path):
    env = load_spec(write_spec(tmp_path, env={"type": "gym", "task": "CartPole-v1"})).env
    assert get_adapter("gym").provides(env) is None
    verdict = compare(checkpoint(STATE4), None, "gym")
    assert verdict.ok
    assert verdict.line() == ("chunks of 10, 10 executed; env gym declares nothing before it runs (the first step "
                              "checks its keys): not checked")


# ── the comparison ────────────────────────────────────────────────────────────────────────────────────────────


def test_a_matching_checkpoint_fits_and_says_what_was_checked():
    verdict = compare(checkpoint(image("observation.image", "pixels"), STATE4), metaworld(), "metaworld")
    assert verdict.ok
    assert verdict.line() == ("fits env metaworld: observation.image (3x480x480), observation.state (4,), actions of "
                              "4; chunks of 10, 10 executed")


def test_extra_env_keys_are_fine():
    """The env gives two cameras and its raw state; the policy reads one camera: nothing to report."""
    env = metaworld("env.camera_name_mapping={corner2: top, corner: side}")
    assert compare(checkpoint(image("observation.images.top", "pixels.top")), env, "metaworld").ok


def test_a_camera_the_env_does_not_give_names_both_sides_and_both_fixes():
    verdict = compare(checkpoint(image("observation.images.top", "pixels.top", 480, 640), STATE4), metaworld(),
                      "metaworld")
    assert verdict.message() == (
        "policy contract: the checkpoint reads observation.images.top (3x480x640) but env metaworld gives "
        "observation.image (3x480x480); set env.camera_name_mapping: {corner2: top} or map it with policy.rename_map: "
        "{observation.image: observation.images.top}")


def test_a_renamed_camera_is_found_and_a_missing_one_is_named_after_the_mapping():
    renamed = checkpoint(image("observation.images.camera1", "pixels"),
                         renames={"observation.image": "observation.images.camera1"})
    assert compare(renamed, metaworld(), "metaworld").ok
    mapped = metaworld("env.camera_name_mapping={corner2: top, corner: side}")
    message = compare(checkpoint(image("observation.image", "pixels")), mapped, "metaworld").message()
    assert "gives observation.images.top (3x480x480), observation.images.side (3x480x480) after " \
           "env.camera_name_mapping; leave out env.camera_name_mapping (the env then gives its one image) or map the " \
           "env's keys to the policy's with policy.rename_map" in message


def test_image_size():
    """Another size is a mismatch unless the policy resizes (then it is said so); the fix names the env options."""
    small = metaworld("env.kwargs.observation_height=240", "env.kwargs.observation_width=320")
    message = compare(checkpoint(image("observation.image", "pixels")), small, "metaworld").message()
    assert message == ("policy contract: the checkpoint reads observation.image (3x480x480) but env metaworld gives "
                       "observation.image (3x240x320), and the policy does not resize images: set "
                       "env.kwargs.observation_height: 480 and env.kwargs.observation_width: 480 (the env's side), or "
                       "use a policy trained on 240x320 images")
    resizing = checkpoint(image("observation.image", "pixels", 512, 512, resized=True), image_format="float32 CHW")
    resized = compare(resizing, small, "metaworld")
    assert resized.ok and resized.line() == "fits env metaworld: observation.image (3x512x512) (the policy resizes), " \
                                            "actions of 4; chunks of 10, 10 executed; images as float32 CHW"
    grey = Input("observation.image", "pixels", (1, 480, 480), IMAGE, CHW)
    assert "(3x480x480) (3 channels, not 1)" in compare(checkpoint(grey), metaworld(), "metaworld").message()


def test_state_and_action_sizes_and_all_problems_in_one_message():
    verdict = compare(checkpoint(Input("observation.state", "agent_pos", (8,)), action_dim=7), metaworld(),
                      "metaworld")
    assert verdict.message() == (
        "policy contract: the checkpoint reads observation.state (8,) but env metaworld gives observation.state (4,) "
        "(its agent_pos): the policy was made for another env's state; use one made for metaworld; and the "
        "checkpoint returns actions of 7 numbers but env metaworld takes 4; use a policy made for metaworld")


def test_what_is_not_declared_is_not_checked():
    assert compare(None, metaworld(), "metaworld").line() == "the policy declares no inputs or actions: not checked"
    only_action = compare(PolicyContract(action_dim=4), metaworld(), "metaworld")
    assert only_action.ok and only_action.line() == "fits env metaworld: actions of 4; the policy declares no " \
                                                    "inputs: not checked"
    state = Input("observation.environment_state", "environment_state", (123,))
    unknown = compare(checkpoint(state, action_dim=7), libero(), "libero")
    assert unknown.ok and "the size of observation.environment_state (env libero's environment_state is known only " \
                          "when it runs): not checked" in unknown.line()
    assert "reads observation.environment_state (123,) but env metaworld gives observation.environment_state (39,)" \
        in compare(checkpoint(state), metaworld(), "metaworld").message()


def test_an_input_no_env_key_becomes():
    odd = checkpoint(Input("observation.robot_state", None, (7,)))
    assert compare(odd, metaworld(), "metaworld").message() == (
        "policy contract: the checkpoint reads observation.robot_state (7,), which no env observation is mapped to; "
        "map the env's keys to the policy's with policy.rename_map")
    images_only = EnvProvides({"pixels": (96, 96, 3)}, action_dim=2)
    assert compare(PolicyContract(inputs=(Input("state", "agent_pos", (2,)),)), images_only, "x").message() == \
        "policy contract: the policy reads state (2,) but env x gives no agent_pos; use a policy made for x"


def test_libero_cameras():
    both = checkpoint(image("observation.images.image", "pixels.image", 360, 360),
                      image("observation.images.image2", "pixels.image2", 360, 360),
                      Input("observation.state", "agent_pos", (8,)), action_dim=7)
    assert compare(both, libero(), "libero").ok
    wrist = libero("env.kwargs.camera_name=agentview_image")
    message = compare(both, wrist, "libero").message()
    assert message.startswith("policy contract: the checkpoint reads observation.images.image2 (3x360x360) but env "
                              "libero gives observation.images.image (3x360x360); ")


# ── as metadata ───────────────────────────────────────────────────────────────────────────────────────────────


def test_a_contract_goes_through_metadata_unchanged():
    sent = checkpoint(image("observation.images.camera1", "pixels"), STATE4, image_format="float32 CHW",
                      renames={"observation.image": "observation.images.camera1"})
    got = from_data(to_data(sent), who="the policy server at ws://x")
    assert got.inputs == sent.inputs and got.action_dim == 4 and got.chunk_size == got.n_action_steps == 10
    assert got.image_format == "float32 CHW" and got.who == "the policy server at ws://x"
    assert got.name_of("pixels") == "observation.images.camera1" and got.name_of("pixels.top") == \
        "observation.images.top"
    assert to_data(None) is None


@pytest.mark.parametrize(("data", "why"), [
    ([1], "not a map"),
    ({"inputs": {"agent_pos": {"shape": [0]}}}, "inputs.agent_pos.shape: not a list of 1 to 4 positive integers"),
    ({"inputs": {"pixels": {"shape": [3, 4, 4], "layout": "WHC"}}}, "inputs.pixels.layout: HWC or CHW, not 'WHC'"),
    ({"action_dim": "7"}, "action_dim: not a positive integer"),
    ({"names": {"pixels": 3}}, "names: not a map of names"),
])
def test_a_malformed_declaration_is_refused(data, why):
    with pytest.raises(ValueError, match=f"^{why}"):
        from_data(data, who="x")


def test_request_keys_are_read_through_the_request_mapping():
    """An openpi-style server declares its request keys: each is taken from the env key the mapping names."""
    declared = {"inputs": {"observation/image": {"shape": [224, 224, 3]}, "observation/state": {"shape": [8]},
                           "observation/wrist_image": {"shape": [224, 224, 3]}}, "action_dim": 7}
    got = from_data(declared, who="s", sources={"observation/image": ("pixels", True),
                                                "observation/state": ("agent_pos", False)})
    assert got.inputs == (Input("observation/image", "pixels", (224, 224, 3), IMAGE, resized=True),
                          Input("observation/state", "agent_pos", (8,)),
                          Input("observation/wrist_image", None, (224, 224, 3)))
    assert got.name_of("agent_pos") == "observation/state"


# ── the step in runner run, doctor and serve (real runs) ──────────────────────────────────────────────────────


def contracted(**kwargs) -> dict:
    return {"type": "python", "path": "tests.policies_for_tests:contracted", "kwargs": kwargs}


MISMATCH = {"action_dim": 7, "state_dim": 8, "camera": "top", "height": 224, "width": 224}
MESSAGE = ("policy contract: the test policy reads state (8,) but env metaworld gives agent_pos (4,): the policy was "
           "made for another env's state; use one made for metaworld; and the test policy reads camera top "
           "(224x224x3) but env metaworld gives pixels (480x480x3); set env.camera_name_mapping: {corner2: top}; and "
           "the test policy returns actions of 7 numbers but env metaworld takes 4; use a policy made for metaworld")


def test_run_stops_before_any_episode_with_one_message(tmp_path, in_repo):
    spec = write_spec(tmp_path, task="push-v3", policy=contracted(**MISMATCH), n=1, batch_size=1)
    proc = runner_run(spec, tmp_path / "out", timeout=TIMEOUT_S)
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc) == f"runner: error: {MESSAGE}"
    assert not (tmp_path / "out" / "episodes.jsonl").exists()


def _doctor(spec: Path, *args: str) -> tuple[int, dict[str, tuple[str, str]]]:
    proc = runner_cli("doctor", spec, "--quick", *args, timeout=TIMEOUT_S)
    lines = {}
    for line in proc.stdout.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[0] in ("ok", "FAIL", "skip", "note"):
            lines[parts[1]] = (parts[0], parts[2])
    return proc.returncode, lines


def test_doctor_reports_the_step(tmp_path, in_repo):
    pytest.importorskip("metaworld")
    bad = write_spec(tmp_path, name="bad", task="push-v3", policy=contracted(**MISMATCH))
    code, lines = _doctor(bad)
    assert code == 3 and lines["contract"] == ("FAIL", MESSAGE)
    assert lines["load"][0] == lines["rendering"][0] == "ok"
    good = write_spec(tmp_path, name="good", task="push-v3", policy=contracted())
    code, lines = _doctor(good)
    assert code == 0 and lines["contract"] == ("ok", "fits env metaworld: state (4,), actions of 4; chunks of 1")
    silent = write_spec(tmp_path, name="silent", task="push-v3")  # the random policy declares nothing
    code, lines = _doctor(silent)
    assert code == 0 and lines["contract"] == ("ok", "the policy declares no inputs or actions: not checked")


def test_a_contract_that_is_not_one_is_refused_when_the_policy_loads(tmp_path, in_repo):
    policy = {"type": "python", "path": "tests.policies_for_tests:bad_contract"}
    spec = write_spec(tmp_path, task="push-v3", policy=policy)
    proc = runner_run(spec, tmp_path / "out", timeout=TIMEOUT_S)
    assert proc.returncode == 2
    assert "the policy's contract() must return a runner.contract.PolicyContract or None, not a dict" in \
        one_error_line(proc)


def test_serve_refuses_a_policy_its_specs_env_cannot_feed(tmp_path, in_repo):
    spec = write_spec(tmp_path, task="push-v3", policy=contracted(**MISMATCH))
    proc = runner_cli("serve", spec, "--port", "0", timeout=TIMEOUT_S)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert one_error_line(proc) == f"runner: error: {MESSAGE}"
    assert " on ws://" not in proc.stdout


def test_a_served_policys_contract_is_checked_by_the_client(tmp_path, in_repo):
    """`runner serve` sends its policy's contract in its metadata (its own spec's env, Gym, declares nothing, so it
    serves); a client whose env cannot feed it stops before any episode, naming the server; one that can runs."""
    serve_spec = write_spec(tmp_path, name="serve", env={"type": "gym", "task": "CartPole-v1"},
                            policy=contracted(action_dim=4, state_dim=8))
    spec = write_spec(tmp_path, name="client", task="push-v3", n=1, batch_size=1, max_steps=5)
    with served(serve_spec, log_dir=tmp_path / "logs") as server:
        proc = runner_run(spec, tmp_path / "out", "policy.type=remote", f"policy.url={server.url}", timeout=TIMEOUT_S)
        assert proc.returncode == 2, proc.stderr
        assert one_error_line(proc) == (
            f"runner: error: policy contract: the policy server at {server.url} reads state (8,) but env metaworld "
            "gives agent_pos (4,): the policy was made for another env's state; use one made for metaworld")
        assert server.stats()["requests"] == 0
    assert not (tmp_path / "out" / "episodes.jsonl").exists()
    good = write_spec(tmp_path, name="serve_good", task="push-v3", policy=contracted())
    with served(good, log_dir=tmp_path / "logs") as server:
        ok = runner_run(spec, tmp_path / "ok", "policy.type=remote", f"policy.url={server.url}", timeout=TIMEOUT_S)
        assert ok.returncode == 0, ok.stderr
