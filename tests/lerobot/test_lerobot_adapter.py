"""The `lerobot` policy adapter on real Meta-World observations, with random-init LeRobot policies.

- Per-slot state: an episode's actions are bit-identical whether it runs alone or next to episodes that
  start at other steps (their chunk refills falling on the same or on other steps), for each forward
  mode and for the per-slot-copy path (temporal ensembling; diffusion with an observation history and
  random sampling), and equal to what LeRobot's own `select_action` gives for that episode.
- The camera routing: `rename_map` feeds the renamed camera; a mismatch fails before any step, naming keys.
- Loading: a hub id offline, empty_cameras on a policy without them, devices, options.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, runner_run
from lerobot_testlib import subprocess_env, venv_bin

from runner.errors import ConfigError, MissingDependencyError
from runner.policies.base import EpisodeStart

TASK = "metaworld-push-v3"


@pytest.fixture(scope="module")
def more_policies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from make_random_policy import build_random_act

    root = tmp_path_factory.mktemp("more-policies")
    return {kind: build_random_act(root / kind, kind=kind) for kind in ("act-ensemble", "diffusion")}


def load_spec_for(policy: Path | str, *overrides: str):
    from runner.spec import load_spec

    return load_spec(REPO / "specs" / "metaworld.yaml", [
        f"policy.path={policy}", "policy.rename_map={}", "policy.empty_cameras=0", "policy.device=cpu",
        f"env.task={TASK}", *overrides])


def make_adapter(policy: Path | str, *overrides: str):
    from runner.policies import make_policy

    spec = load_spec_for(policy, *overrides)
    return make_policy(spec.policy, spec.env), spec


@dataclass(frozen=True)
class Episode:
    slot: int
    seed: int
    start: int  # global step at which it begins
    steps: int


@pytest.fixture(scope="module")
def world():
    """The task and one real Meta-World env per slot (reset with a seed, an env replays its episode)."""
    from runner.envs import get_adapter

    spec = load_spec_for("unused")
    adapter = get_adapter("metaworld")
    (task,) = adapter.tasks(spec.env)
    envs = [adapter.make(task, spec.env, obs_keys=frozenset({"pixels", "agent_pos"}), video=False) for _ in range(3)]
    yield task, envs
    for env in envs:
        env.close()


def drive(policy, world, episodes: list[Episode], n_slots: int) -> dict[int, dict[str, list]]:
    """Run the episodes on a global clock: at each step the active slots act in one `select_action` call."""
    task, envs = world
    obs: dict[int, dict] = {}
    out = {e.slot: {"actions": [], "observations": []} for e in episodes}
    end = max(e.start + e.steps for e in episodes)
    for t in range(end):
        starting = [e for e in episodes if e.start == t]
        for e in starting:
            obs[e.slot], _ = envs[e.slot].reset(seed=e.seed)
        if starting:
            policy.reset([EpisodeStart(e.slot, task, 0, e.seed, envs[e.slot].action_space, n_slots) for e in starting])
        active = sorted(e.slot for e in episodes if e.start <= t < e.start + e.steps)
        batch = {key: np.stack([obs[s][key] for s in active]) for key in obs[active[0]]}
        actions = policy.select_action(batch, [task.text] * len(active), active)
        assert actions.shape == (len(active), 4) and actions.dtype == np.float32
        for row, slot in enumerate(active):
            out[slot]["observations"].append(obs[slot])
            out[slot]["actions"].append(actions[row])
            obs[slot], *_ = envs[slot].step(actions[row])
    return out


def lerobot_actions(adapter, observations: list[dict], task_text: str, *, rows: int = 1, seed: int | None = None):
    """LeRobot's own loop for one episode: preprocess_observation -> preprocessor -> select_action -> postprocessor,
    at batch size `rows` (every row the same episode); row 0's actions."""
    import torch
    from lerobot.envs.utils import preprocess_observation

    policy = adapter.policy if adapter.chunked else _fresh_copy(adapter)
    if seed is not None:
        torch.manual_seed(seed)
    policy.reset()
    actions = []
    with torch.inference_mode():
        for o in observations:
            batch = preprocess_observation({k: np.stack([v] * rows) for k, v in o.items()})
            batch["task"] = [task_text] * rows
            action = adapter.postprocessor(policy.select_action(adapter.preprocessor(batch)))
            actions.append(action.numpy()[0])
    return actions


def _fresh_copy(adapter):
    from runner.policies.lerobot.policy import _shared_copy

    return _shared_copy(adapter.policy)


def assert_same_actions(got: list, want: list, what: str) -> None:
    assert len(got) == len(want), what
    for step, (a, b) in enumerate(zip(got, want, strict=True)):
        assert np.array_equal(a, b), f"{what}: step {step} differs: {a} vs {b}"


# A from step 0, B from step 5 (its chunk refills fall between A's), C from step 10 (refills with A's).
STAGGERED = [Episode(0, 1000, 0, 21), Episode(1, 1001, 5, 16), Episode(2, 1002, 10, 11)]


@pytest.mark.slow
@pytest.mark.parametrize("forward", ["padded", "per_slot"])
def test_chunked_episode_does_not_depend_on_its_neighbours(policy_dirs, world, forward) -> None:
    adapter, _ = make_adapter(policy_dirs["image"], f"policy.kwargs={{forward: {forward}}}")
    assert adapter.chunked
    # padded: the same batch size alone and together; per_slot: batch size 1 alone, 3 together
    alone_slots = 3 if forward == "padded" else 1
    together = drive(adapter, world, STAGGERED, n_slots=3)
    for e in STAGGERED:
        alone = drive(adapter, world, [Episode(e.slot, e.seed, 0, e.steps)], n_slots=alone_slots)
        assert_same_actions(together[e.slot]["actions"], alone[e.slot]["actions"], f"seed {e.seed} together vs alone")
    # ... and what LeRobot's own select_action gives for episode A (batch of 3 copies when padded, else 1)
    a = together[0]
    want = lerobot_actions(adapter, a["observations"], world[0].text, rows=alone_slots)
    assert_same_actions(a["actions"], want, "episode A vs LeRobot's select_action")


@pytest.mark.slow
def test_grouped_forward_alone_is_lerobots_batch_one(policy_dirs, world) -> None:
    adapter, _ = make_adapter(policy_dirs["image"], "policy.kwargs={forward: grouped}")
    run = drive(adapter, world, [Episode(0, 1000, 0, 12)], n_slots=3)[0]
    assert_same_actions(run["actions"], lerobot_actions(adapter, run["observations"], world[0].text),
                        "grouped vs LeRobot batch 1")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["act-ensemble", "diffusion"])
def test_per_slot_copies_keep_history_and_random_streams_apart(more_policies, world, kind) -> None:
    """Policies outside the chunk path (temporal ensembling; diffusion: 2-step observation history and
    random sampling) run as per-slot copies with the episode's own RNG stream."""
    adapter, _ = make_adapter(more_policies[kind])
    assert not adapter.chunked
    episodes = [Episode(0, 1000, 0, 12), Episode(1, 1001, 3, 9)]
    together = drive(adapter, world, episodes, n_slots=2)
    for e in episodes:
        alone = drive(adapter, world, [Episode(e.slot, e.seed, 0, e.steps)], n_slots=1)
        assert_same_actions(together[e.slot]["actions"], alone[e.slot]["actions"], f"{kind} seed {e.seed}")
        want = lerobot_actions(adapter, together[e.slot]["observations"], world[0].text, seed=e.seed)
        assert_same_actions(together[e.slot]["actions"], want, f"{kind} seed {e.seed} vs LeRobot's select_action")
    if kind == "diffusion":  # the sampling really is random: another seed, another first action
        first = together[0]["observations"][:1]
        assert not np.array_equal(lerobot_actions(adapter, first, world[0].text, seed=7)[0], together[0]["actions"][0])


@pytest.mark.slow
def test_rename_map_routes_the_camera(policy_dirs, world) -> None:
    """The camera1 policy (same weights) with rename_map observation.image -> observation.images.camera1
    acts exactly like the observation.image policy."""
    base, _ = make_adapter(policy_dirs["image"])
    renamed, _ = make_adapter(policy_dirs["camera1"],
                              "policy.rename_map={observation.image: observation.images.camera1}")
    assert renamed.observation_keys == base.observation_keys == frozenset({"pixels", "agent_pos"})
    episode = [Episode(0, 1000, 0, 12)]
    assert_same_actions(drive(renamed, world, episode, 1)[0]["actions"], drive(base, world, episode, 1)[0]["actions"],
                        "renamed camera")


def test_feature_mismatch_fails_before_any_step(policy_dirs, tmp_path: Path) -> None:
    """`runner run` with the camera1 policy and no rename_map: exit 2, one message naming both keys (the pre-run
    contract step's; tests/lerobot/test_lerobot_contract.py has more)."""
    out = tmp_path / "out"
    proc = runner_run("specs/metaworld.yaml", out, f"policy.path={policy_dirs['camera1']}", "policy.rename_map={}",
                      "policy.empty_cameras=0", "policy.device=cpu", f"env.task={TASK}", "eval.n_episodes=1",
                      "eval.batch_size=1", "eval.videos=0", command=[venv_bin("runner")], env=subprocess_env(),
                      timeout=600)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "the checkpoint reads observation.images.camera1 (3x480x480) but env metaworld gives observation.image " \
           "(3x480x480)" in proc.stderr
    assert "rename_map: {observation.image: observation.images.camera1}" in proc.stderr
    ledger = out / "episodes.jsonl"
    assert not ledger.exists() or ledger.read_text() == ""


@pytest.mark.parametrize("offline", ["HF_HUB_OFFLINE=1", "no network"])
def test_hub_id_offline_names_the_repo_and_the_fix(tmp_path: Path, offline: str) -> None:
    """specs/metaworld.yaml as written (pepijn223/smolvla_metaworld) with the hub offline: exit 3, one message,
    within seconds (no retries): told by HF_HUB_OFFLINE, or found by one connection attempt to the hub."""
    env = subprocess_env()
    if offline == "no network":
        env.pop("HF_HUB_OFFLINE", None)
        env["HF_ENDPOINT"] = "https://127.0.0.1:9"  # nothing listens there: the same answer as a closed network
        for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
            env.pop(name, None)
    start = time.monotonic()
    proc = runner_run("specs/metaworld.yaml", tmp_path / "out", f"env.task={TASK}", "eval.n_episodes=1",
                      command=[venv_bin("runner")], env=env, timeout=600)
    elapsed = time.monotonic() - start
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "'pepijn223/smolvla_metaworld'" in proc.stderr
    assert "--set policy.path=DIR" in proc.stderr
    assert elapsed < 10, f"{elapsed:.1f} s"
    assert not (tmp_path / "out").exists()  # nothing written


def test_empty_cameras_on_a_policy_without_them(policy_dirs) -> None:
    with pytest.raises(ConfigError, match="policy.empty_cameras: LeRobot policy type 'act' has no empty cameras"):
        make_adapter(policy_dirs["image"], "policy.empty_cameras=2")


def test_bad_paths_and_options(policy_dirs, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such directory"):
        make_adapter(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="has no config.json"):
        make_adapter(tmp_path)
    # policy.kwargs are checked by the schema of the lerobot type, with the key's place
    with pytest.raises(ConfigError, match='policy.kwargs.forward: "fast" is not one of: padded, per_slot, grouped'):
        make_adapter(policy_dirs["image"], "policy.kwargs={forward: fast}")
    with pytest.raises(ConfigError, match="policy.kwargs.batch"):
        make_adapter(policy_dirs["image"], "policy.kwargs={batch: 3}")


def test_devices() -> None:
    import torch

    from runner.policies.lerobot.policy import resolve_device

    assert resolve_device("cpu") == "cpu"
    if torch.cuda.is_available():
        assert resolve_device("auto") == "cuda"
    else:
        assert resolve_device("auto") in ("cpu", "mps", "xpu")
        with pytest.raises(ConfigError, match="policy.device 'cuda' is not available"):
            resolve_device("cuda")


def test_hub_failure_is_missing_dependency() -> None:
    from runner.policies.lerobot.policy import _hub_error

    error = _hub_error("owner/name", OSError("offline"))
    assert isinstance(error, MissingDependencyError) and "hf download owner/name --local-dir DIR" in str(error)


IMAGE, STATE = {"observation.image": (3, 480, 480)}, {"observation.state": (4,)}


@pytest.mark.parametrize(
    ("provided", "rename_map", "problem"),
    [
        pytest.param({**IMAGE, **STATE}, {}, None, id="exact"),
        pytest.param({**IMAGE, "observation.images.wrist": (3, 480, 480), **STATE}, {}, None,
                     id="extra-camera-unused"),
        pytest.param({"observation.images.top": (3, 480, 480), **STATE},
                     {"observation.images.top": "observation.image"}, None, id="renamed"),
        pytest.param({"observation.images.top": (3, 480, 480), **STATE}, {},
                     "missing observation.image; extra observation.images.top; map it with policy.rename_map: "
                     "{observation.images.top: observation.image}", id="wrong-camera"),
        pytest.param({**IMAGE, **STATE}, {"observation.image": "observation.images.camera1"},
                     "missing observation.image; extra observation.images.camera1 (renamed from observation.image); "
                     "drop policy.rename_map's entry for observation.image", id="needless-rename"),
        pytest.param({"observation.images.top": (3, 480, 480), **STATE},
                     {"observation.images.front": "observation.image"},
                     "(policy.rename_map names keys the env does not produce: observation.images.front)",
                     id="rename-of-nothing"),
        pytest.param({**IMAGE, "observation.state": (8,)}, {},
                     "observation.state has shape (8,), the policy expects (4,)", id="state-size"),
        pytest.param(IMAGE, {}, "missing observation.state; extra none", id="no-state"),
    ],
)
def test_feature_mismatch_rules(provided, rename_map, problem) -> None:
    """Expected: observation.image, observation.state (4,) and an empty-camera placeholder (never required)."""
    from lerobot.configs import FeatureType, PolicyFeature

    from runner.policies.lerobot.policy import feature_mismatch

    expected = {
        "observation.image": PolicyFeature(FeatureType.VISUAL, (3, 480, 480)),
        "observation.state": PolicyFeature(FeatureType.STATE, (4,)),
        "observation.images.empty_camera_0": PolicyFeature(FeatureType.VISUAL, (3, 480, 640)),
    }
    got = feature_mismatch(expected, provided, rename_map)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got, got


def test_steps_that_pop_a_queued_action_skip_a_stateless_pipeline(policy_dirs, world) -> None:
    """ACT's saved pipelines keep nothing between calls, so a step whose every row pops a queued action does not
    convert or preprocess the observation; a pipeline with a step that remembers (relative actions) would."""
    from lerobot.processor.relative_action_processor import RelativeActionsProcessorStep

    from runner.policies.lerobot.policy import stateless

    adapter, _ = make_adapter(policy_dirs["image"])
    assert adapter.stateless and stateless(adapter.postprocessor)

    class Pipeline:
        steps = [*adapter.preprocessor.steps, RelativeActionsProcessorStep()]

    assert not stateless(Pipeline()) and not stateless(object())
    calls = []
    convert = adapter._convert
    adapter._convert = lambda *a: calls.append(1) or convert(*a)
    out = drive(adapter, world, [Episode(0, 1000, 0, 12)], n_slots=1)
    assert len(calls) == 2  # steps 0 and 10 refill the chunk of 10; the 10 steps between only pop
    task, _ = world
    want = lerobot_actions(make_adapter(policy_dirs["image"])[0], out[0]["observations"], task.text)
    assert_same_actions(out[0]["actions"], want, "skipping the pipeline on popping steps")


def test_queued_actions_taken_at_once_are_the_ones_each_step_would_pop(policy_dirs, world) -> None:
    """`take_queued` hands the rest of a chunk over at once (the engine steps through it in the worker): the
    episode's actions are LeRobot's own, step by step; nothing is handed over while a pipeline keeps state."""
    adapter, _ = make_adapter(policy_dirs["image"])
    task, envs = world
    env = envs[0]
    observation, _ = env.reset(seed=1000)
    adapter.reset([EpisodeStart(0, task, 0, 1000, env.action_space, 1)])
    assert adapter.take_queued(0) is None  # nothing queued before the first call
    observations, actions = [], []
    while len(actions) < 25:
        batch = {key: np.stack([value]) for key, value in observation.items()}
        first = adapter.select_action(batch, [task.text], [0])[0]
        ahead = adapter.take_queued(0)
        assert ahead is not None and ahead.shape == (9, 4) and ahead.dtype == np.float32
        assert adapter.take_queued(0) is None  # taken: the next step needs an observation
        for action in [first, *ahead]:
            observations.append(observation)
            actions.append(action)
            observation, *_ = env.step(action)
    want = lerobot_actions(make_adapter(policy_dirs["image"])[0], observations, task.text)
    assert_same_actions(actions, want, "chunks taken at once")
    adapter.stateless = False  # a pipeline that remembers sees every step's observation
    adapter.select_action({key: np.stack([value]) for key, value in observation.items()}, [task.text], [0])
    assert adapter.take_queued(0) is None


def test_doctor_says_the_hub_is_out_of_reach_not_install(tmp_path: Path) -> None:
    """Offline, doctor's policy check names the unreachable hub and the local-directory fix, not `runner install`
    (every package is installed: installing again would not help)."""
    proc = subprocess.run([venv_bin("runner"), "doctor", "specs/metaworld.yaml", "--set", f"env.task={TASK}",
                           "--quick"], cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    failed = [line.split()[1] for line in lines if line.startswith("  FAIL")]
    assert "policy" in failed and "packages" not in failed, proc.stdout
    policy = lines.index(next(line for line in lines if line.split()[:2] == ["FAIL", "policy"]))
    fix = lines[policy + 1]
    assert "fix:" in fix and "--set policy.path=DIR" in fix and "runner install" not in fix, proc.stdout
