"""Interop with openpi's own code (PyPI's openpi-client and openpi-server in .venv-openpi, driven by
tests/openpi_peer.py): its msgpack_numpy decodes and re-encodes runner's bytes unchanged; its WebsocketClientPolicy
(and ActionChunkBroker) gets from `runner serve` the actions a local run takes, with and without episode_start, in
runner's layout and in openpi's LIBERO layout (`--request`); runner's client runs Meta-World against openpi-server's
own WebsocketPolicyServer (serving runner's scripted experts) as a local run, and Meta-World and LIBERO
(specs/_openpi_libero.yaml) against a server in the shape of openpi's, with a request mapping and action chunks;
its image_tools.resize_with_pad and runner's give the same pixels.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    PEER_PYTHON,
    REPO,
    episodes_of,
    libero_test_assets,
    one_error_line,
    run_peer,
    runner_cli,
    runner_run,
    served,
    write_spec_data,
)
from helpers import peer_server as shared_peer_server

from runner.envs import get_adapter
from runner.policies.base import EpisodeStart
from runner.policies.random.policy import RandomPolicy
from runner.policies.remote import request, wire
from runner.policies.scripted.policy import expert_for
from runner.results import load_ledger, read_run_file
from runner.spec import load_spec
from runner.tasks import TaskRef

OPENPI = PEER_PYTHON
TIMEOUT_S = 300

pytestmark = pytest.mark.skipif(not OPENPI.exists(), reason="openpi-client is not installed: run .ci/setup-openpi.sh")
# openpi-server (and the core venv's runner and Meta-World in .venv-openpi, dm-tree for ActionChunkBroker)
needs_openpi_server = pytest.mark.skipif(
    not any(REPO.glob(".venv-openpi/lib/python3*/site-packages/openpi_server")),
    reason="openpi-server is not installed in .venv-openpi: run .ci/setup-openpi.sh")


def peer(*args: str) -> subprocess.CompletedProcess:
    return run_peer("openpi_peer.py", *args)


def peer_server(tmp_path: Path, mode: str, *args: str) -> contextlib.AbstractContextManager[tuple[str, Path]]:
    """tests/openpi_peer.py MODE (see helpers.peer_server); yields its URL and request log."""
    return shared_peer_server("openpi_peer.py", mode, tmp_path, *args)


def openpi_server(tmp_path: Path, *, horizon: int = 10, action_dim: int = 4,
                  metadata: dict | None = None) -> contextlib.AbstractContextManager[tuple[str, Path]]:
    """A policy server in the shape of openpi's (tests/openpi_peer.py serve), `metadata`'s keys added to its metadata;
    yields its URL and request log."""
    return peer_server(tmp_path, "serve", "--horizon", str(horizon), "--action-dim", str(action_dim),
                       "--metadata", json.dumps(metadata or {}))


def requests(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


run = functools.partial(runner_run, timeout=TIMEOUT_S)  # runner run SPEC OUT *SETS


# ── the encoding ─────────────────────────────────────────────────────────────────────────────────────────────


def test_openpi_decodes_and_reencodes_runners_bytes_unchanged(tmp_path):
    message = {"pixels": {"image": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)},
               "agent_pos": np.linspace(-1, 1, 8), "environment_state": np.zeros((0, 3), np.float32),
               "mask": np.array([True, False]), "count": np.int64(7), "ratio": np.float32(0.5), "task": "pick",
               "nested": {"ids": np.array([1, 2], dtype=">i2")}, "list": [1, 2.5, "x", None]}
    source, echoed = tmp_path / "in.msgpack", tmp_path / "out.msgpack"
    source.write_bytes(wire.pack(message))
    code = ("import sys; from openpi_client import msgpack_numpy as m; "
            "data = m.unpackb(open(sys.argv[1], 'rb').read()); open(sys.argv[2], 'wb').write(m.packb(data))")
    subprocess.run([str(OPENPI), "-c", code, str(source), str(echoed)], check=True, timeout=60)
    assert echoed.read_bytes() == source.read_bytes()
    back = wire.unpack(echoed.read_bytes())
    assert back["nested"]["ids"].dtype == np.dtype(">i2") and back["count"] == 7 and back["list"] == [1, 2.5, "x", None]
    np.testing.assert_array_equal(back["pixels"]["image"], message["pixels"]["image"])


def test_resize_with_pad_matches_openpi(tmp_path):
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(256, 256), (480, 640), (100, 300), (224, 224), (31, 17)]):
        image = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        np.save(tmp_path / f"{i}.npy", image)
        peer("resize", "--input", str(tmp_path / f"{i}.npy"), "--output", str(tmp_path / f"{i}-out.npy"),
             "--height", "224", "--width", "224")
        np.testing.assert_array_equal(request.resize_with_pad(image, 224, 224), np.load(tmp_path / f"{i}-out.npy"))


# ── openpi's client against runner serve ─────────────────────────────────────────────────────────────────────


def test_openpis_client_gets_the_actions_of_a_local_run(tmp_path):
    spec = write_spec_data(tmp_path, {"env": {"type": "metaworld", "task": "push-v3"}, "policy": {"type": "random"}},
                           folder="specs")
    with served(spec, log_dir=tmp_path) as server:
        got = json.loads(peer("client", "--url", server.url, "--seed", "1234", "--steps", "5").stdout)
    assert got["ack"] == {"__ack__": "episode_start"} and got["metadata"]["server"] == "runner"
    local = RandomPolicy()
    import gymnasium as gym

    local.reset(EpisodeStart(0, TaskRef("push-v3", 0, "push-v3", "push"), 0, 1234,
                             gym.spaces.Box(-1.0, 1.0, (4,), np.float32)))
    expected = [[local.act({}).tolist()] for _ in range(5)]  # runner serve answers chunks of one action
    assert got["actions"] == expected


def metaworld_spec(tmp_path: Path, policy: str, *, task: str = "push-v3,reach-v3", max_steps: int = 40,
                   n: int = 1, **env) -> Path:
    """A cheap Meta-World spec (no videos, offscreen GL)."""
    return write_spec_data(tmp_path, {"install": {"env": {"MUJOCO_GL": "egl"}},
                                      "env": {"type": "metaworld", "task": task, "max_steps": max_steps, **env},
                                      "policy": {"type": policy}, "eval": {"n_episodes": n, "videos": 0}},
                           folder="specs")


def client_openpi(url: str, prompt: str, *args: str) -> dict:
    """openpi's WebsocketClientPolicy as openpi's examples use it (tests/openpi_peer.py client-openpi)."""
    return json.loads(peer("client-openpi", "--url", url, "--prompt", prompt, *args).stdout)


def random_actions(seed: int, n: int) -> list[list[float]]:
    """What runner's random policy does in an episode of seed `seed` on Meta-World's action space."""
    import gymnasium as gym

    local = RandomPolicy()
    local.reset(EpisodeStart(0, TaskRef("push-v3", 0, "push-v3", "push"), 0, seed,
                             gym.spaces.Box(-1.0, 1.0, (4,), np.float32)))
    return [local.act({}).tolist() for _ in range(n)]


def server_text(error: str) -> str:
    """The server's text frame, from what openpi's client raised."""
    prefix = "Error in inference server:\n"
    assert error.startswith(prefix), error
    return error[len(prefix):]


@needs_openpi_server
def test_openpis_client_without_episode_start_gets_implicit_episodes(tmp_path):
    """Each connection of a client that sends no episode_start is the server's next episode (seeded eval.seed + n);
    openpi's ActionChunkBroker with the metadata's action_horizon takes the replies' chunks one action at a time."""
    spec = metaworld_spec(tmp_path, "random")
    with served(spec, log_dir=tmp_path) as server:
        two = client_openpi(server.url, "Push the puck to a goal", "--steps", "3", "--connections", "2")
        broker = client_openpi(server.url, "reach-v3", "--steps", "3", "--horizon", "metadata")
    assert two["metadata"]["action_horizon"] == 1
    assert [c["error"] for c in two["connections"] + broker["connections"]] == [None] * 3
    assert [c["actions"] for c in two["connections"]] == [[[a] for a in random_actions(1000 + n, 3)] for n in (0, 1)]
    assert broker["connections"][0]["actions"] == random_actions(1002, 3)  # the server's third episode


@needs_openpi_server
def test_openpis_client_gets_the_scripted_experts_actions(tmp_path):
    """The prompt names the task by its text or its name."""
    spec = metaworld_spec(tmp_path, "scripted")
    states = np.random.default_rng(0).uniform(-0.3, 0.9, size=(4, 39))
    np.save(tmp_path / "states.npy", states)
    with served(spec, log_dir=tmp_path) as server:
        by_text = client_openpi(server.url, "Push the puck to a goal", "--steps", "4", "--states",
                                str(tmp_path / "states.npy"))
        by_name = client_openpi(server.url, "reach-v3", "--steps", "4", "--states", str(tmp_path / "states.npy"))
    for got, task in ((by_text, "push-v3"), (by_name, "reach-v3")):
        (connection,) = got["connections"]
        assert connection["error"] is None
        expert = expert_for(task)
        assert connection["actions"] == [[expert.get_action(state).tolist()] for state in states], task


@needs_openpi_server
def test_openpis_libero_layout_through_a_request_mapping(tmp_path):
    """`runner serve --request` with openpi's LIBERO example's keys (two images, the state, the prompt); a request
    key the mapping does not name (a NumPy scalar) is ignored."""
    spec = metaworld_spec(tmp_path, "random", camera_name_mapping={"corner2": "image", "gripperPOV": "wrist_image"},
                          kwargs={"observation_width": 224, "observation_height": 224})
    mapping = {"observation/image": "pixels.image", "observation/wrist_image": "pixels.wrist_image",
               "observation/state": "agent_pos", "prompt": "task"}
    with served(spec, args=("--request", json.dumps(mapping)), log_dir=tmp_path) as server:
        got = client_openpi(server.url, "Push the puck to a goal", "--steps", "3", "--layout", "libero")
    (connection,) = got["connections"]
    assert connection["error"] is None
    assert connection["actions"] == [[a] for a in random_actions(1000, 3)]


@needs_openpi_server
def test_a_wrong_prompt_gets_one_line_and_the_server_serves_on(tmp_path):
    spec = metaworld_spec(tmp_path, "scripted")
    with served(spec, log_dir=tmp_path) as server:
        wrong = client_openpi(server.url, "fly-to-the-moon", "--steps", "2")
        right = client_openpi(server.url, "reach-v3", "--steps", "2")
    (connection,) = wrong["connections"]
    assert connection["actions"] == []
    text = server_text(connection["error"])
    assert "fly-to-the-moon" in text and "push-v3" in text and "reach-v3" in text  # the tasks there are
    assert "Traceback" not in text and not re.search(r"\b[A-Z]\w*(Error|Exception):", text), text
    assert len(text.strip().splitlines()) == 1, text
    assert right["connections"][0]["error"] is None and len(right["connections"][0]["actions"]) == 2


def test_an_action_horizon_a_policy_cannot_give_is_refused_at_start(tmp_path):
    """openpi's ActionChunkBroker(horizon 5) needs chunks of 5: `runner serve --action-horizon 5` of a policy
    that predicts one action at a time stops before it listens."""
    spec = metaworld_spec(tmp_path, "random")
    proc = runner_cli("serve", spec, "--port", "0", "--action-horizon", "5", timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = one_error_line(proc)
    assert "policy 'random' gives one action a request, not chunks" in line and "--action-horizon 5 needs" in line
    assert " on ws://" not in proc.stdout


# ── runner's client against an openpi-style server ────────────────────────────────────────────────────────────

MAPPING = {"observation/state": "agent_pos", "observation/env": "environment_state", "prompt": "task"}


def test_runner_against_an_openpi_server_equals_the_same_policy_run_locally(tmp_path):
    """A request mapping, chunks of 10 of which 3 are executed, no control messages (openpi's metadata has none)."""
    data = {"install": {"env": {"MUJOCO_GL": "egl"}},
            "env": {"type": "metaworld", "task": "push-v3,reach-v3", "max_steps": 40},
            "policy": {"type": "python", "path": "tests.policies_for_tests:chunked", "kwargs": {"replan": 3}},
            "eval": {"n_episodes": 2, "batch_size": 2, "videos": 0}}
    spec = write_spec_data(tmp_path, data, folder="specs")
    local = run(spec, tmp_path / "local")
    assert local.returncode == 0, local.stderr
    with openpi_server(tmp_path) as (url, log):
        remote = run(spec, tmp_path / "remote", "policy.type=remote", "policy.path=null", f"policy.url={url}",
                     f"policy.kwargs={json.dumps({'request': MAPPING, 'replan_steps': 3})}")
        assert remote.returncode == 0, remote.stderr
    assert episodes_of(tmp_path / "remote") == episodes_of(tmp_path / "local")
    seen = requests(log)
    steps = [r.steps for r in load_ledger(tmp_path / "remote" / "episodes.jsonl").records]
    assert len(seen) == sum(math.ceil(s / 3) for s in steps)  # one request per 3 actions; no control message
    assert all(r["keys"] == ["observation/env", "observation/state", "prompt"] for r in seen)
    assert {tuple(r["shapes"]["observation/env"]) for r in seen} == {(39,)}
    texts = {t.text for t in get_adapter("metaworld").tasks(load_spec(spec).env)}
    assert {r["prompt"] for r in seen} == texts


def test_an_openpi_server_error_ends_the_run_with_its_message(tmp_path):
    spec = write_spec_data(tmp_path, {"install": {"env": {"MUJOCO_GL": "egl"}},
                                      "env": {"type": "metaworld", "task": "push-v3", "max_steps": 20},
                                      "policy": {"type": "random"}, "eval": {"n_episodes": 1, "videos": 0}},
                           folder="specs")
    with openpi_server(tmp_path) as (url, _):
        proc = run(spec, tmp_path / "out", "policy.type=remote", f"policy.url={url}",
                   'policy.kwargs={"request": {"state": agent_pos}}')
    assert proc.returncode == 4
    assert f"the policy server at {url} reported an error: Traceback" in proc.stderr
    assert "KeyError: 'observation/state'" in proc.stderr and "retrying" not in proc.stderr


# openpi's LIBERO inputs, as a server may declare them in its metadata (runner.contract's form)
LIBERO_CONTRACT = {"inputs": {"observation/image": {"shape": [224, 224, 3]},
                              "observation/wrist_image": {"shape": [224, 224, 3]}, "observation/state": {"shape": [8]}},
                   "action_dim": 7, "chunk_size": 10}


def test_an_openpi_server_declaring_other_inputs_is_refused_before_any_episode(tmp_path):
    """A server whose metadata declares LIBERO's inputs and actions, asked to drive Meta-World: one message naming
    both sides of each mismatch (the camera the request does not send, the state, the action), nothing run."""
    spec = write_spec_data(tmp_path, {"install": {"env": {"MUJOCO_GL": "egl"}},
                                      "env": {"type": "metaworld", "task": "push-v3", "max_steps": 20},
                                      "policy": {"type": "random"}, "eval": {"n_episodes": 1, "videos": 0}},
                           folder="specs")
    mapping = {"observation/image": {"from": "pixels", "resize": [224, 224]}, "observation/state": "agent_pos",
               "prompt": "task"}
    with openpi_server(tmp_path, action_dim=7, metadata={"contract": LIBERO_CONTRACT}) as (url, log):
        proc = run(spec, tmp_path / "out", "policy.type=remote", f"policy.url={url}",
                   f"policy.kwargs={json.dumps({'request': mapping})}")
        assert requests(log) == []
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc)
    server = f"the policy server at {url}"
    assert f"{server} reads observation/wrist_image (224x224x3), which no env observation is mapped to; map the " \
           "env's keys to the policy's with policy.kwargs.request" in line
    assert f"{server} reads observation/state (8,) but env metaworld gives observation/state (4,) (its agent_pos)" \
        in line
    assert f"{server} returns actions of 7 numbers but env metaworld takes 4" in line
    assert "reads observation/image" not in line  # resized by the request: any size fits
    assert not (tmp_path / "out" / "episodes.jsonl").exists()


# ── runner's client against openpi-server's own WebsocketPolicyServer ───────────────────────────────────────

OPENPI_METADATA = {"reset_pose": [0.0, -1.5, 1.5, 0.0, 0.0, 0.0]}  # a policy's metadata, as serve_policy sends it


def holds(value: object, wanted: dict) -> bool:
    """Whether `value` is `wanted` or holds it somewhere inside."""
    if value == wanted:
        return True
    inside = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return any(holds(v, wanted) for v in inside)


@needs_openpi_server
def test_runner_against_openpi_servers_own_server_equals_a_local_run(tmp_path):
    """openpi-server's WebsocketPolicyServer serving runner's scripted experts: with openpi's keys through a request
    mapping, and without one (its metadata declares no inputs: runner's layout without images, one warning); the
    server's metadata is kept in run.json."""
    spec = metaworld_spec(tmp_path, "scripted")
    local = run(spec, tmp_path / "local")
    assert local.returncode == 0, local.stderr
    mapping = {"observation/state": "environment_state", "prompt": "task"}
    with peer_server(tmp_path, "serve-scripted", "--tasks", "push-v3,reach-v3",
                     "--metadata", json.dumps(OPENPI_METADATA)) as (url, log):
        mapped = run(spec, tmp_path / "mapped", "policy.type=remote", f"policy.url={url}",
                     f"policy.kwargs={json.dumps({'request': mapping})}")
        assert mapped.returncode == 0, mapped.stderr
        n_mapped = len(requests(log))
        plain = run(spec, tmp_path / "plain", "policy.type=remote", f"policy.url={url}", batch_size=2)
        assert plain.returncode == 0, plain.stderr
    for out in ("mapped", "plain"):
        assert episodes_of(tmp_path / out) == episodes_of(tmp_path / "local"), out
    seen = requests(log)
    steps = sum(r.steps for r in load_ledger(tmp_path / "local" / "episodes.jsonl").records)
    assert n_mapped == steps and len(seen) == 2 * steps  # one request (one action) per step
    assert {r["task"] for r in seen} == {"push-v3", "reach-v3"}
    assert all(r["keys"] == ["observation/state", "prompt"] and r["shapes"] == {"observation/state": [39]}
               for r in seen[:n_mapped])
    assert all(r["keys"] == ["agent_pos", "environment_state", "task"] for r in seen[n_mapped:])  # no pixels
    assert "declares no inputs" not in mapped.stderr
    assert sum("declares no inputs" in line for line in plain.stderr.splitlines()) == 1, plain.stderr
    for out in ("mapped", "plain"):
        assert holds(read_run_file(tmp_path / out).provenance["policy"], OPENPI_METADATA), out


@pytest.mark.slow
@pytest.mark.skipif(libero_test_assets() is None, reason="the LIBERO test assets are missing: run .ci/setup-libero.sh")
def test_libero_with_openpis_conventions_is_yaml_only(tmp_path):
    """specs/_openpi_libero.yaml through `extends`: what openpi's LIBERO example sends, 5 actions per chunk."""
    user = tmp_path / "specs" / "pi05_libero.yaml"
    user.parent.mkdir(parents=True)
    partial = os.path.relpath(REPO / "specs" / "_openpi_libero.yaml", user.parent)
    with openpi_server(tmp_path, action_dim=7) as (url, log):
        user.write_text(f"name: pi05_libero\nextends: {partial}\npolicy: {{url: '{url}'}}\n")
        env = {**os.environ, "RUNNER_LIBERO_ASSETS": str(libero_test_assets()), "HF_HUB_OFFLINE": "1",
               "LIBERO_CONFIG_PATH": str(tmp_path / "libero-config")}
        proc = run(user, tmp_path / "out", "env.task_ids=[0]", "eval.n_episodes=1", "env.max_steps=7",
                   "eval.videos=0", env=env)
        assert proc.returncode == 0, proc.stderr
    seen = requests(log)
    assert len(seen) == 2  # 7 steps: a chunk of which 5 run, then one of which 2 run
    for r in seen:
        assert r["keys"] == ["observation/image", "observation/state", "observation/wrist_image", "prompt"]
        assert r["shapes"] == {"observation/image": [224, 224, 3], "observation/wrist_image": [224, 224, 3],
                               "observation/state": [8]}
        assert r["dtypes"]["observation/image"] == "uint8"
        assert r["prompt"] == "pick up the black bowl between the plate and the ramekin and place it on the plate"
    (record,) = load_ledger(tmp_path / "out" / "episodes.jsonl").records
    assert record.ok and record.steps == 7
