"""Interop with openpi's own code (PyPI's openpi-client in .venv-openpi, driven by tests/openpi_peer.py): its
msgpack_numpy decodes and re-encodes runner's bytes unchanged; its WebsocketClientPolicy gets from `runner serve`
the actions a local run takes; runner's client runs Meta-World and LIBERO (specs/_openpi_libero.yaml) against a
server in the shape of openpi's, with a request mapping and action chunks; its image_tools.resize_with_pad and
runner's give the same pixels.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    REPO,
    episodes_of,
    kill_group,
    libero_test_assets,
    one_error_line,
    runner_run,
    served,
    write_spec_data,
)

from runner.envs import get_adapter
from runner.policies.base import EpisodeStart
from runner.policies.random.policy import RandomPolicy
from runner.policies.remote import request, wire
from runner.results import load_ledger
from runner.spec import load_spec
from runner.tasks import TaskRef

OPENPI = REPO / ".venv-openpi" / "bin" / "python"
PEER = REPO / "tests" / "openpi_peer.py"
TIMEOUT_S = 300

pytestmark = pytest.mark.skipif(not OPENPI.exists(), reason="openpi-client is not installed: run .ci/setup-openpi.sh")


def peer(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(OPENPI), str(PEER), *args], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    return proc


@contextlib.contextmanager
def openpi_server(tmp_path: Path, *, horizon: int = 10, action_dim: int = 4,
                  metadata: dict | None = None) -> Iterator[tuple[str, Path]]:
    """A policy server in the shape of openpi's (tests/openpi_peer.py serve), `metadata`'s keys added to its metadata;
    yields its URL and request log."""
    port_file, log = tmp_path / "port", tmp_path / "requests.jsonl"
    proc = subprocess.Popen([str(OPENPI), str(PEER), "serve", "--port-file", str(port_file), "--log", str(log),
                             "--horizon", str(horizon), "--action-dim", str(action_dim),
                             "--metadata", json.dumps(metadata or {})],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr and proc.stderr.read()
            time.sleep(0.05)
        yield f"ws://127.0.0.1:{port_file.read_text()}", log
    finally:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        kill_group(proc)


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
