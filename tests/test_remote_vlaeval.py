"""Interop with allenai's vla-evaluation-harness (PyPI's vla-eval in .venv-openpi, driven by tests/vlaeval_peer.py):
runner's client (`policy.kwargs.protocol: vla-eval`) runs Meta-World against a PredictModelServer served by vla-eval's
own serve code (runner's scripted experts inside) as a local run, raw and with PNG images, and refuses one whose
action spec does not fit the env; vla-eval's own Connection drives `runner serve --protocol vla-eval` through whole
Meta-World episodes with the expert's actions, gets ERROR messages on a connection that stays open, and GET /health.
"""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    PEER_PYTHON,
    REPO,
    episodes_of,
    one_error_line,
    peer_server,
    run_peer,
    runner_run,
    served,
    write_spec_data,
)

from runner.policies.scripted.policy import expert_for
from runner.results import load_ledger

OPENPI = PEER_PYTHON
TIMEOUT_S = 300

pytestmark = [
    pytest.mark.skipif(not any(REPO.glob(".venv-openpi/lib/python3*/site-packages/vla_eval")),
                       reason="vla-eval is not installed in .venv-openpi: run .ci/setup-openpi.sh"),
    pytest.mark.skipif(not OPENPI.exists(), reason=".venv-openpi is missing: run .ci/setup-openpi.sh"),
]

run = functools.partial(runner_run, timeout=TIMEOUT_S)  # runner run SPEC OUT *SETS


def peer(*args: str) -> subprocess.CompletedProcess:
    return run_peer("vlaeval_peer.py", *args)


def vlaeval_server(tmp_path: Path, *args: str) -> contextlib.AbstractContextManager[tuple[str, Path]]:
    """tests/vlaeval_peer.py serve (vla-eval's serve_async of a PredictModelServer) until SIGTERM; yields its URL and
    message log."""
    return peer_server("vlaeval_peer.py", "serve", tmp_path, *args)


def messages(log: Path, kind: str | None = None) -> list[dict]:
    entries = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [e for e in entries if kind is None or e["message"] == kind]


def metaworld_spec(tmp_path: Path, policy: str = "scripted", *, task: str = "push-v3,reach-v3", max_steps: int = 40,
                   n: int = 1, **env) -> Path:
    return write_spec_data(tmp_path, {"install": {"env": {"MUJOCO_GL": "egl"}},
                                      "env": {"type": "metaworld", "task": task, "max_steps": max_steps, **env},
                                      "policy": {"type": policy}, "eval": {"n_episodes": n, "videos": 0}},
                           folder="specs")


def remote(url: str, **kwargs) -> tuple[str, ...]:
    """--set overrides that evaluate a vla-eval server."""
    options = json.dumps({"protocol": "vla-eval", **kwargs})
    return ("policy.type=remote", f"policy.url={url}", f"policy.kwargs={options}")


# ── runner's client against vla-eval's own server ───────────────────────────────────────────────────────────


def test_runner_against_vlaevals_own_server_equals_a_local_run(tmp_path):
    """runner's vla-eval layout (state, environment_state, task_description; no images: the server declares
    none), EPISODE_START with the task, EPISODE_END with the result, HELLO with the spec's name as benchmark."""
    spec = metaworld_spec(tmp_path)
    local = run(spec, tmp_path / "local")
    assert local.returncode == 0, local.stderr
    with vlaeval_server(tmp_path) as (url, log):
        proc = run(spec, tmp_path / "remote", *remote(url))
        assert proc.returncode == 0, proc.stderr
    assert episodes_of(tmp_path / "remote") == episodes_of(tmp_path / "local")
    records = {r.task: r for r in load_ledger(tmp_path / "local" / "episodes.jsonl").records}
    starts = [m["payload"]["task"] for m in messages(log, "episode_start")]
    assert sorted((t["name"], t["seed"], t["episode_idx"]) for t in starts) == [("push-v3", 1000, 0),
                                                                                ("reach-v3", 1000, 0)]
    assert {t["name"]: t["description"] for t in starts} == {"push-v3": "Push the puck to a goal",
                                                             "reach-v3": "Reach a goal position"}
    ends = [m["payload"] for m in messages(log, "episode_end")]
    assert sorted((e["metrics"]["success"], e["steps"]) for e in ends) == sorted(
        (r.success, r.steps) for r in records.values())
    seen = messages(log, "observation")
    assert len(seen) == sum(r.steps for r in records.values())
    assert all(m["keys"] == ["environment_state", "state", "task_description"] for m in seen)
    assert all(m["shapes"] == {"environment_state": [39], "state": [4]} for m in seen)
    assert {m["task_description"] for m in seen} == {"Push the puck to a goal", "Reach a goal position"}
    hellos = [m["payload"].get("benchmark") for m in messages(log, "hello")]
    # the check before the run knows no env yet; the workers name theirs (the default of policy.kwargs.benchmark)
    assert hellos[0] is None and hellos[1:] and set(hellos[1:]) == {"metaworld"}


def test_png_images_through_a_request_mapping(tmp_path):
    """`images.corner2` nests under images; `image_format: png` puts PNG on the wire (vla-eval decodes it)."""
    spec = metaworld_spec(tmp_path, task="reach-v3", max_steps=6,
                          kwargs={"observation_width": 64, "observation_height": 64})
    local = run(spec, tmp_path / "local")
    assert local.returncode == 0, local.stderr
    mapping = {"images.corner2": "pixels", "environment_state": "environment_state", "task_description": "task"}
    with vlaeval_server(tmp_path) as (url, log):
        proc = run(spec, tmp_path / "remote", *remote(url, request=mapping, image_format="png"))
        assert proc.returncode == 0, proc.stderr
    assert episodes_of(tmp_path / "remote") == episodes_of(tmp_path / "local")
    seen = messages(log, "observation")
    assert len(seen) == 6
    assert all(m["keys"] == ["environment_state", "images.corner2", "task_description"] for m in seen)
    assert all(m["shapes"]["images.corner2"] == [64, 64, 3] and m["dtypes"]["images.corner2"] == "uint8"
               for m in seen)
    assert seen[-1]["image_formats"] == {"png": 6}  # as they came over the wire
    assert all(m["image_mean"] > 0 for m in seen)  # a picture, not zeros


def test_a_vlaeval_server_with_another_action_size_is_refused_before_any_episode(tmp_path):
    spec = metaworld_spec(tmp_path, task="push-v3")
    with vlaeval_server(tmp_path, "--action-dim", "7") as (url, log):
        proc = run(spec, tmp_path / "out", *remote(url))
        assert [m["message"] for m in messages(log)] == ["hello"]  # not even an EPISODE_START
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc)
    assert "policy contract:" in line
    assert f"the policy server at {url} returns actions of 7 numbers but env metaworld takes 4" in line
    assert not (tmp_path / "out" / "episodes.jsonl").exists()


# ── vla-eval's own client against runner serve ──────────────────────────────────────────────────────────────


def test_vlaevals_connection_drives_whole_episodes_against_runner_serve(tmp_path):
    """Whole episodes (the env in vla-eval's process) as runner runs them locally, every action the expert's, every
    ACTION's seq its OBSERVATION's; images as vla-eval sends them by default (PNG) are read; GET /health."""
    spec = metaworld_spec(tmp_path, task="push-v3", max_steps=60, n=2)
    local = run(spec, tmp_path / "local")
    assert local.returncode == 0, local.stderr
    with served(spec, args=("--protocol", "vla-eval"), log_dir=tmp_path) as server:
        driven = peer("drive", "--url", server.url, "--task", "push-v3", "--episodes", "2", "--seed", "1000",
                      "--max-steps", "60")
        pictured = peer("drive", "--url", server.url, "--task", "push-v3", "--episodes", "1", "--seed", "7",
                        "--max-steps", "4", "--images")
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=10) as response:
            assert response.status == 200 and json.loads(response.read()) == {"status": "ok"}
    episodes = [json.loads(line) for line in driven.stdout.splitlines()]
    assert [(e["task"], e["seed"]) for e in episodes] == [("push-v3", 1000), ("push-v3", 1001)]
    (picture,) = [json.loads(line) for line in pictured.stdout.splitlines()]
    for e in [*episodes, picture]:
        assert e["max_abs_diff"] == 0.0 and e["shapes"] == [[4]] and e["seq_ok"], e
    records = sorted(load_ledger(tmp_path / "local" / "episodes.jsonl").records, key=lambda r: r.seed)
    assert [(e["seed"], e["steps"], e["success"]) for e in episodes] == [(r.seed, r.steps, r.success) for r in records]
    assert picture["steps"] == 4
    assert episodes[0]["server_info"]["protocol_version"] == 1  # runner's HELLO reply, as vla-eval's Connection read it


def test_an_error_is_an_error_message_and_the_connection_stays_open(tmp_path):
    """An episode of a task the policy has no expert for: its observation is answered by one ERROR message (vla-eval's
    Connection.act raises it); the next episode on the same connection gets its action (no stale reply)."""
    spec = metaworld_spec(tmp_path)
    with served(spec, args=("--protocol", "vla-eval"), log_dir=tmp_path) as server:
        got = json.loads(peer("error", "--url", server.url).stdout)
    assert got["first"] is None and got["raised"].startswith("Server error: "), got
    assert "fly-to-the-moon" in got["raised"] and "Traceback" not in got["raised"]
    assert got["then_raised"] is None, got["then_raised"]
    assert got["then"]["actions"] == expert_for("reach-v3").get_action(np.zeros(39)).tolist()
