"""Remote policies over real sockets on loopback: `runner serve` in its own process, `runner run` with
policy.type remote against it, on real Meta-World.

A served episode equals the same episode run locally (scripted experts and the seeded random policy); with four
workers the server's batches hold more than one observation; a server killed mid-run costs retries, then error
records, then a stop, and the same command finishes the run once the server is back; wrong keys, garbage,
oversized frames and vanishing clients are refused or cleaned up while the server serves on; SIGTERM drains.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import helpers
import numpy as np
import pytest
from helpers import REPO, RUNNER, eval_info_of, kill_group, runner_cli, runner_run, served, start_server

from runner.policies.remote import protocol, wire
from runner.results import load_ledger, read_run_file

pytest.importorskip("metaworld")
websockets_sync = pytest.importorskip("websockets.sync.client")
from websockets.exceptions import ConnectionClosed  # noqa: E402

TIMEOUT_S = 300
BOX = {"type": "Box", "low": np.full(4, -1.0, np.float32), "high": np.full(4, 1.0, np.float32), "dtype": "<f4"}


write_spec = functools.partial(helpers.write_spec, folder="specs")  # Meta-World, 2 episodes a task, batch size 2
run = functools.partial(runner_run, batch_size=2, timeout=TIMEOUT_S)  # runner run SPEC OUT *SETS


def remote(url: str, **kwargs) -> tuple[str, ...]:
    """--set overrides that turn a spec's policy into a remote one."""
    return ("policy.type=remote", f"policy.url={url}", *(f"policy.kwargs.{k}={v}" for k, v in kwargs.items()))


def results(out: Path) -> dict:
    """Per-episode results (timings aside) of a finished run; a resumed run's ledger keeps the error lines of
    episodes run again, and their later records count (the ledger rules)."""
    latest = {r.key: r for r in load_ledger(out / "episodes.jsonl").records}
    assert all(r.ok for r in latest.values())
    return {"episodes": {k: r.without_timing() for k, r in latest.items()}, "eval_info": eval_info_of(out)}


def connect(url: str, **kwargs):
    ws = websockets_sync.connect(url, compression=None, legacy=True, **kwargs)
    metadata = wire.unpack(ws.recv(timeout=10))
    return ws, metadata


def ask(ws, message) -> object:
    ws.send(wire.pack(message))
    reply = ws.recv(timeout=30)
    return reply if isinstance(reply, str) else wire.unpack(reply)


def start_message(seed: int = 1000, task: str = "push-v3", index: int = 0) -> dict:
    return {protocol.CTRL: protocol.EPISODE_START, "__task__": task, "__task_text__": f"do {task}",
            "__seed__": seed, "__episode_index__": index, "__action_space__": BOX}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ── results ───────────────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("policy", ["scripted", "random"])
def test_a_served_episode_equals_a_local_one(tmp_path, policy):
    spec = write_spec(tmp_path, policy={"type": policy}, max_steps=60 if policy == "random" else None)
    local = run(spec, tmp_path / "local")
    assert local.returncode == 0, local.stderr
    with served(spec, log_dir=tmp_path) as server:
        proc = run(spec, tmp_path / "remote", *remote(server.url))
        assert proc.returncode == 0, proc.stderr + server.log()
        stats = server.stats()
    assert results(tmp_path / "remote") == results(tmp_path / "local")
    steps = sum(r.steps for r in load_ledger(tmp_path / "remote" / "episodes.jsonl").records)
    assert stats["requests"] == steps  # one observation per step (one action a reply), nothing lost or repeated
    assert stats["control_messages"] == 2 * 4  # episode_start and episode_end of every episode
    identity = read_run_file(tmp_path / "remote").provenance["policy"]
    assert identity["url"] == server.url and identity["server_type"] == policy
    assert json.loads((tmp_path / "remote" / "metrics.json").read_text())["policy"] == server.url


def test_four_workers_share_the_servers_batches(tmp_path):
    spec = write_spec(tmp_path, policy={"type": "scripted"}, task="push-v3", n=8)
    with served(spec, log_dir=tmp_path, args=("--max-wait-ms", "20")) as server:
        proc = run(spec, tmp_path / "out", *remote(server.url), batch_size=4)
        assert proc.returncode == 0, proc.stderr
        stats = server.stats()
    sizes = {int(k): v for k, v in stats["batch_sizes"].items()}
    assert max(sizes) > 1 and stats["mean_batch_size"] > 1.2, stats
    assert sum(k * v for k, v in sizes.items()) == stats["requests"]
    assert "requests/s" in server.log() and "batch sizes" in server.log()


# ── faults ────────────────────────────────────────────────────────────────────────────────────────────────


def test_server_killed_mid_run_then_resumed(tmp_path):
    """kill -9 of the server: episodes in flight are retried, then recorded as errors, then the run stops; the
    ledger stays intact and the same command finishes the run, equal to a local one, once the server is back."""
    spec = write_spec(tmp_path, policy={"type": "random"}, task="push-v3", n=10, max_steps=150)
    reference = run(spec, tmp_path / "local")
    assert reference.returncode == 0, reference.stderr
    port = free_port()
    url = f"ws://127.0.0.1:{port}"
    out = tmp_path / "out"
    overrides = remote(url, connect_retries=1, backoff_s=0.1)
    args = ["run", str(spec), "--output-dir", str(out), "--no-progress", "--max-retries", "1"]
    for override in overrides:
        args += ["--set", override]
    server = start_server(spec, log_dir=tmp_path, port=port)
    client = subprocess.Popen([*RUNNER, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        ledger = out / "episodes.jsonl"
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and client.poll() is None:
            if ledger.exists() and len(ledger.read_text().splitlines()) >= 2:
                break
            time.sleep(0.02)
        server.proc.kill()
        stdout, stderr = client.communicate(timeout=TIMEOUT_S)
    finally:
        kill_group(client)
        kill_group(server.proc)
    assert client.returncode == 4, stderr
    assert "retrying on a fresh worker" in stderr and f"cannot reach the policy server at {url}" in stderr
    assert "the policy server was unreachable for the last 3 episodes in a row" in stderr
    assert "Traceback" not in stderr
    first = load_ledger(ledger).records  # every line valid
    errors = [r for r in first if not r.ok]
    assert len(errors) >= 3 and all(not r.ok for r in first[-3:]) and len(first) < 10
    assert all(r.error and url in r.error for r in errors)
    assert read_run_file(out).state == "failed"
    with served(spec, log_dir=tmp_path, port=port):
        again = runner_cli(*args, timeout=TIMEOUT_S)
    assert again.returncode == 0, again.stderr
    assert results(out) == results(tmp_path / "local")
    assert read_run_file(out).state == "complete"


def test_a_server_that_closes_during_the_handshake_is_unreachable():
    """A server going away while the client sends its handshake (what a killed server does to a reconnecting
    client): each attempt is a transient PolicyUnavailable, never websockets' own ConnectionClosedError."""
    import threading

    from runner.errors import PolicyUnavailable
    from runner.policies.remote.client import Connection, Endpoint

    listener = socket.create_server(("127.0.0.1", 0))
    url = f"ws://127.0.0.1:{listener.getsockname()[1]}"

    def close_each() -> None:
        with contextlib.suppress(OSError):
            while True:
                peer, _ = listener.accept()
                peer.shutdown(socket.SHUT_RDWR)
                peer.close()

    threading.Thread(target=close_each, daemon=True).start()
    try:
        for _ in range(30):  # websockets raises ConnectionClosedError for most of these, InvalidMessage for the rest
            with pytest.raises(PolicyUnavailable, match=f"cannot reach the policy server at {url}"):
                Connection(Endpoint(url, connect_retries=0, connect_timeout_s=5)).open()
    finally:
        listener.close()


def test_api_key(tmp_path):
    spec = write_spec(tmp_path, policy={"type": "scripted"}, task="push-v3", n=1)
    env = {**os.environ, "RUNNER_KEY": "wrong"}
    with served(spec, log_dir=tmp_path, api_key="s3cret") as server:
        missing = run(spec, tmp_path / "a", *remote(server.url, connect_retries=0))
        wrong = run(spec, tmp_path / "b", *remote(server.url, api_key_env="RUNNER_KEY"), env=env)
        unset = run(spec, tmp_path / "c", *remote(server.url, api_key_env="RUNNER_NO_SUCH_KEY"))
        right = run(spec, tmp_path / "d", *remote(server.url, api_key_env="RUNNER_KEY"),
                    env={**env, "RUNNER_KEY": "s3cret"})
        import urllib.error
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10) as health:
            assert health.status == 200
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/stats", timeout=10)
        assert server.stats()["requests"] > 0  # with the key
    assert missing.returncode == 2 and "wants an API key (HTTP 401)" in missing.stderr, missing.stderr
    assert wrong.returncode == 2 and "refused the API key in $RUNNER_KEY (HTTP 401)" in wrong.stderr, wrong.stderr
    assert unset.returncode == 2 and "$RUNNER_NO_SUCH_KEY, which is not set" in unset.stderr
    assert right.returncode == 0, right.stderr
    for proc in (missing, wrong, unset):
        assert "Traceback" not in proc.stderr and not (tmp_path / "a" / "episodes.jsonl").exists()


def test_a_non_loopback_bind_needs_a_key(tmp_path):
    spec = write_spec(tmp_path, policy={"type": "scripted"})
    proc = runner_cli("serve", spec, "--host", "0.0.0.0", timeout=60)
    assert proc.returncode == 2
    assert "--host 0.0.0.0 lets other machines reach the policy" in proc.stderr and "--insecure" in proc.stderr


def test_garbage_and_oversized_frames_close_only_their_connection(tmp_path):
    spec = write_spec(tmp_path, policy={"type": "scripted"})
    bad_array = {"agent_pos": {b"__ndarray__": True, b"data": b"\0" * 12, b"dtype": "<f8", b"shape": [4]}}
    object_array = {"agent_pos": {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|O", b"shape": [1]}}
    frames = {
        "not msgpack": b"\xc1\xc1garbage",
        "text": "hello",
        "a list": wire.pack([1, 2, 3]),
        "unknown key": wire.pack({"observation/image": np.zeros(3)}),
        "lying shape": wire.pack(bad_array),
        "object dtype": wire.pack(object_array),
        "deep nesting": b"\x91" * 100_000 + b"\xc0",
        "bad episode_start": wire.pack({**start_message(), "__seed__": "x"}),
        "unknown control": wire.pack({protocol.CTRL: "reboot"}),
    }
    expected = {"not msgpack": "not a msgpack message", "text": "a text frame", "a list": "must be a map",
                "unknown key": "unknown request key 'observation/image'", "lying shape": "needs 32 bytes, not 12",
                "object dtype": "unsupported dtype", "deep nesting": "not a msgpack message",
                "bad episode_start": "__seed__ must be an integer", "unknown control": "unknown control message"}
    with served(spec, log_dir=tmp_path, args=("--max-message-mb", "1")) as server:
        good, metadata = connect(server.url)
        assert metadata["control_messages"] is True and metadata["observation_keys"] == ["environment_state"]
        assert ask(good, start_message()) == {protocol.ACK: protocol.EPISODE_START}
        state = np.zeros(39)
        for name, frame in frames.items():
            ws, _ = connect(server.url)
            ws.send(frame)
            error = ws.recv(timeout=30)
            assert isinstance(error, str) and expected[name] in error, (name, error)
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=30)
            assert closed.value.rcvd.code == 1007, name
            reply = ask(good, {"environment_state": state, "task": "push"})  # the server serves on
            assert reply["actions"].shape == (1, 4)
        ws, _ = connect(server.url, max_size=None)
        ws.send(b"\0" * (2 * 1024 * 1024))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
        assert closed.value.rcvd.code == 1009  # the WebSocket protocol's "message too big"
        assert ask(good, {"environment_state": state, "task": "push"})["actions"].shape == (1, 4)
        stats = server.stats()
        good.close()
    assert stats["errors"] == len(frames) and stats["connections"] == 1
    assert "Traceback" not in server.log()


def test_clients_that_vanish_leave_nothing_behind(tmp_path):
    """1,000 connections that each start an episode, ask for an action and drop their socket mid-episode."""
    spec = write_spec(tmp_path, policy={"type": "scripted"})
    state = np.zeros(39)

    def churn(n: int) -> None:
        for i in range(n):
            ws, _ = connect(server.url)
            ask(ws, start_message(index=i % 50))
            ask(ws, {"environment_state": state, "task": "push"})
            ws.socket.shutdown(socket.SHUT_RDWR)  # no closing handshake
            ws.socket.close()

    def settled() -> dict:
        for _ in range(200):
            stats = server.stats()
            if stats["connections"] == 0 and stats["slots_in_use"] == 0:
                return stats
            time.sleep(0.05)
        raise AssertionError(f"connections left open: {stats}")

    with served(spec, log_dir=tmp_path) as server:
        churn(100)
        settled()
        rss_100 = rss_kib(server.proc.pid)
        churn(900)
        stats = settled()
        rss_1000 = rss_kib(server.proc.pid)
        fresh, _ = connect(server.url)
        assert ask(fresh, start_message()) == {protocol.ACK: protocol.EPISODE_START}
        fresh.close()
    assert stats["connections_total"] == 1000 and stats["requests"] == 1000
    assert rss_1000 - rss_100 < 8 * 1024, f"server RSS grew {rss_1000 - rss_100} KiB over 900 connections"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_sigterm_answers_requests_in_flight_then_closes(tmp_path):
    spec = write_spec(tmp_path, policy={"type": "python", "path": "tests.policies_for_tests:per_env",
                                 "kwargs": {"delay_s": 1.5, "slow_episodes": [0]}})
    server = start_server(spec, log_dir=tmp_path)
    try:
        busy, _ = connect(server.url)
        idle, _ = connect(server.url)
        assert ask(busy, start_message()) == {protocol.ACK: protocol.EPISODE_START}
        busy.send(wire.pack({"agent_pos": np.zeros(4), "task": "push"}))
        time.sleep(0.5)  # the policy is in its 1.5 s step
        server.proc.send_signal(signal.SIGTERM)
        reply = wire.unpack(busy.recv(timeout=30))
        assert reply["actions"].shape == (1, 4)
        for ws in (busy, idle):
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=30)
            assert closed.value.rcvd.code == 1001
        assert server.proc.wait(30) == 0
    finally:
        kill_group(server.proc)
    log = server.log()
    assert "SIGTERM: draining 1 request in flight, then closing 2 connections" in log
    assert "stopped after 1 requests from 2 connections" in log and "Traceback" not in log
