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


# ── vla-eval's protocol, and what a server declares (tiny servers in this process) ────────────────────────────

import io  # noqa: E402
import threading  # noqa: E402
import zlib  # noqa: E402

import msgpack  # noqa: E402
from helpers import one_error_line  # noqa: E402
from PIL import Image  # noqa: E402

from runner.errors import ConfigError, EvaluationError  # noqa: E402
from runner.policies.base import EpisodeStart  # noqa: E402
from runner.policies.remote import vlaeval  # noqa: E402
from runner.policies.remote.client import Connection, Endpoint  # noqa: E402
from runner.tasks import TaskRef  # noqa: E402

ACTIONS_4 = {"action": {"name": "action", "dims": 4, "format": "raw"}}
IMAGE_SPEC = {"image": {"name": "image", "dims": 0, "format": "rgb_hwc_uint8"},
              "state": {"name": "state", "dims": 4, "format": "raw"}}
# hostile metadata: what run.json must keep bounded (arrays named, long text cut, deep nesting and many keys counted)
HOSTILE_META = {"notes": "x" * 5000, "weights": np.zeros((3, 4), np.float32), "nan": float("nan"),
                "deep": functools.reduce(lambda inner, _: {"d": inner}, range(20), {"bottom": 1}),
                "many": {f"k{i}": i for i in range(500)}, "blob": b"\x00" * 10, "list": list(range(300))}


@contextlib.contextmanager
def ws_server(handler):
    """A WebSocket server on loopback in a thread of this process, `handler(ws)` per connection; yields its URL."""
    from websockets.sync.server import serve

    server = serve(handler, "127.0.0.1", 0, compression=None, max_size=None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}"
    finally:
        server.shutdown()
        thread.join(10)


def vla_eval_handler(hello: dict, log: list, actions=lambda payload: np.zeros(4, np.float32)):
    """A vla-eval model server (vla-eval's serve.py's exchanges, with runner's codec): HELLO answered with `hello`,
    each OBSERVATION with an ACTION of the same seq; every message received is appended to `log`."""
    from websockets.exceptions import ConnectionClosed

    def handle(ws) -> None:
        with contextlib.suppress(ConnectionClosed):
            for data in ws:
                message = vlaeval.unpack(data)
                log.append(message)
                if message.type == vlaeval.HELLO:
                    ws.send(vlaeval.pack(vlaeval.HELLO, hello, message.seq))
                elif message.type == vlaeval.OBSERVATION:
                    ws.send(vlaeval.pack(vlaeval.ACTION, {"actions": actions(message.payload)}, message.seq))

    return handle


def openpi_handler(metadata: dict, log: list):
    """A server in the shape of openpi's: `metadata` on connect, then {"actions": (4,)} for every request."""
    from websockets.exceptions import ConnectionClosed

    def handle(ws) -> None:
        ws.send(wire.pack(metadata))
        with contextlib.suppress(ConnectionClosed):
            for data in ws:
                log.append(wire.unpack(data))
                ws.send(wire.pack({"actions": np.zeros(4, np.float32)}))

    return handle


def meta_world_spec(tmp_path: Path, url: str, kwargs: dict, n: int = 2) -> Path:
    return write_spec(tmp_path, task="push-v3", n=n, max_steps=5,
                      policy={"type": "remote", "url": url, "kwargs": kwargs})


def test_runner_against_a_vla_eval_server(tmp_path):
    """HELLO, EPISODE_START (vla-eval's task and runner's exact episode), OBSERVATIONs with nested request keys and
    PNG images, EPISODE_END with the success and the steps; the HELLO kept bounded in run.json, which loads."""
    log: list = []
    hello = vlaeval.hello_payload(model_server="Tiny", capabilities={}, action_spec=ACTIONS_4,
                                  observation_spec=IMAGE_SPEC, extra=HOSTILE_META)
    mapping = {"images.corner": {"from": "pixels", "resize": [32, 32]}, "state": "agent_pos",
               "task_description": "task"}
    with ws_server(vla_eval_handler(hello, log)) as url:
        spec = meta_world_spec(tmp_path, url, {"protocol": "vla-eval", "image_format": "png", "request": mapping})
        proc = run(spec, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "declares no inputs" not in proc.stderr and "Traceback" not in proc.stderr
    hellos = [m.payload for m in log if m.type == vlaeval.HELLO]
    assert all(h["protocol_version"] == 1 and h["harness_version"].startswith("runner ") for h in hellos)
    assert "benchmark" not in hellos[0] and {h.get("benchmark") for h in hellos[1:]} == {"metaworld"}
    starts = [m.payload for m in log if m.type == vlaeval.EPISODE_START]
    assert sorted(s["task"]["episode_idx"] for s in starts) == [0, 1]
    assert {s["task"]["seed"] for s in starts} == {1000, 1001} and {s["task"]["name"] for s in starts} == {"push-v3"}
    assert all(s["runner"]["__ctrl__"] == "episode_start" and s["runner"]["__seed__"] == s["task"]["seed"]
               for s in starts)
    observations = [m.payload for m in log if m.type == vlaeval.OBSERVATION]
    assert all(set(o) == {"images", "state", "task_description"} for o in observations)
    image = observations[0]["images"]["corner"]  # sent as PNG, decoded by the codec
    assert image.shape == (32, 32, 3) and image.dtype == np.uint8 and observations[0]["state"].shape == (4,)
    ends = [m.payload for m in log if m.type == vlaeval.EPISODE_END]
    records = load_ledger(tmp_path / "out" / "episodes.jsonl").records
    assert sorted(e["steps"] for e in ends) == sorted(r.steps for r in records) and len(observations) == 10
    assert all(e["metrics"]["success"] is False for e in ends)
    identity = read_run_file(tmp_path / "out").provenance["policy"]  # checked against schema/run.schema.json
    assert identity["server"] == f"Tiny (vla-eval {hello['harness_version']})"
    kept = identity["server_metadata"]
    assert kept["action_spec"] == ACTIONS_4 and kept["model_server"] == "Tiny"
    extra = kept["extra"]
    assert extra["weights"] == {"dtype": "float32", "shape": [3, 4]} and len(extra["notes"]) == 2000
    assert extra["nan"] == "nan" and extra["blob"] == {"bytes": 10}
    assert json.dumps(kept).count('"d"') <= 6  # nesting cut
    assert len(json.dumps(kept)) < 20_000


def test_a_vla_eval_hello_declaring_other_actions_is_refused_before_any_episode(tmp_path):
    log: list = []
    hello = vlaeval.hello_payload(model_server="Libero", action_spec={
        "position": {"name": "position", "dims": 3, "format": "delta_xyz"},
        "rotation": {"name": "rotation", "dims": 3, "format": "axis_angle"},
        "gripper": {"name": "gripper", "dims": 1, "format": "binary_close_positive"}})
    with ws_server(vla_eval_handler(hello, log)) as url:
        proc = run(meta_world_spec(tmp_path, url, {"protocol": "vla-eval"}), tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    assert f"policy contract: the policy server at {url} returns actions of 7 numbers but env metaworld takes 4" \
        in one_error_line(proc)
    assert not any(m.type == vlaeval.OBSERVATION for m in log)
    assert not (tmp_path / "out" / "episodes.jsonl").exists()


@pytest.mark.parametrize("protocol_", ["openpi", "vla-eval"])
def test_a_server_declaring_no_inputs_gets_no_images_and_one_warning(tmp_path, protocol_):
    """openpi's servers declare nothing: runner sends its layout without images (nothing is rendered for them) and
    says so once, in the main process, however many workers there are."""
    log: list = []
    if protocol_ == "openpi":
        handler = openpi_handler({"policy_name": "pi0", "weights": np.zeros(2)}, log)
    else:
        handler = vla_eval_handler(vlaeval.hello_payload(model_server="Tiny", action_spec=ACTIONS_4), log)
    with ws_server(handler) as url:
        proc = run(meta_world_spec(tmp_path, url, {"protocol": protocol_}), tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "declares no inputs" in line]
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].startswith(f"runner: warning: the policy server at {url} declares no inputs")
    assert "no images (rendering an image of 480x480 for every step costs ~46 ms a step on CPU)" in warnings[0]
    assert "map them in policy.kwargs.request" in warnings[0]
    if protocol_ == "openpi":
        requests = log
        assert all(set(r) == {"agent_pos", "environment_state", "task"} for r in requests)
    else:
        requests = [m.payload for m in log if m.type == vlaeval.OBSERVATION]
        assert all(set(r) == {"state", "environment_state", "task_description"} for r in requests)
    assert len(requests) == 10
    identity = read_run_file(tmp_path / "out").provenance["policy"]
    if protocol_ == "openpi":
        assert identity["server_metadata"] == {"policy_name": "pi0", "weights": {"dtype": "float64", "shape": [2]}}
    else:
        assert identity["server_metadata"]["model_server"] == "Tiny"


# hostile replies to an OBSERVATION: (what the server sends, what the client's one-line error says)
PNG_4x4 = io.BytesIO()
Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(PNG_4x4, format="PNG")


def png_header(width: int, height: int) -> bytes:
    """A grayscale PNG that claims width x height and holds one row: what a decompression bomb starts with."""
    import struct

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * (width + 1))) + \
        chunk(b"IEND", b"")


def envelope(kind="action", payload=None, seq=1, **fields) -> bytes:
    message = {"type": kind, "payload": {"actions": [0.0] * 4} if payload is None else payload, "seq": seq,
               "timestamp": 1.0, **fields}
    return msgpack.packb({k: v for k, v in message.items() if v is not ...}, use_bin_type=True)


def image(shape, data: bytes, fmt="png") -> dict:
    return {"__image__": True, "format": fmt, "data": data, "shape": list(shape)}


SEQ = 2  # the OBSERVATION's seq: HELLO was 1
HOSTILE_REPLIES = {
    "not msgpack": (b"\xc1garbage", "not a msgpack message"),
    "missing fields": (msgpack.packb({"type": "action", "payload": {}}), "missing seq, timestamp"),
    "payload not a map": (envelope(payload=[1, 2], seq=SEQ), "payload must be a map"),
    "seq a string": (envelope(seq="2"), "seq must be an integer"),
    "seq too large": (envelope(seq=2**64 - 1), "seq must be an integer"),
    "seq of no message": (envelope(seq=2**62), f"seq {2**62} answers a message not sent \\(the last was {SEQ}\\)"),
    "unknown type": (envelope(kind="reboot", seq=SEQ), "unknown message type 'reboot'"),
    "a HELLO for an answer": (envelope(kind="hello", seq=SEQ), "a hello message answers observation 2"),
    "PNG whose size lies": (envelope(payload={"actions": image((8, 8, 3), PNG_4x4.getvalue())}, seq=SEQ),
                            "is 4x4, not the 8x8 its shape says"),
    "decompression bomb": (envelope(payload={"image": image((10_000, 10_000, 1), png_header(10_000, 10_000))},
                                    seq=SEQ), "DecompressionBomb"),
    "image shape too large": (envelope(payload={"image": image((2**20, 2**20, 3), b"")}, seq=SEQ), "at most"),
    "text frame": ("Traceback (most recent call last):\nKeyError: 'x'", "reported an error: Traceback"),
    "error": (envelope(kind="error", payload={"error": "observation_failed: KeyError:\n 'state'"}, seq=SEQ),
              "reported an error: observation_failed: KeyError: 'state'$"),
    "stale replies only": ([envelope(seq=1)] * (vlaeval.MAX_STALE + 1),
                           "9 replies to earlier messages in a row, none to observation 2"),
}


def scripted(replies) -> object:
    """A vla-eval server answering HELLO, then the first OBSERVATION with `replies` (raw frames), then closing."""

    def handle(ws) -> None:
        hello = vlaeval.unpack(ws.recv(timeout=10))
        ws.send(vlaeval.pack(vlaeval.HELLO, vlaeval.hello_payload(model_server="Hostile"), hello.seq))
        while True:
            message = vlaeval.unpack(ws.recv(timeout=10))
            if message.type == vlaeval.OBSERVATION:
                break
        for frame in replies if isinstance(replies, list) else [replies]:
            ws.send(frame)
        with contextlib.suppress(Exception):
            ws.recv(timeout=10)

    return handle


def vla_eval_connection(url: str) -> Connection:
    return Connection(Endpoint(url, connect_retries=0, request_timeout_s=10), vlaeval.Client())


@pytest.mark.parametrize("name", HOSTILE_REPLIES)
def test_hostile_vla_eval_replies_are_one_line_errors(name):
    frames, expected = HOSTILE_REPLIES[name]
    with ws_server(scripted(frames)) as url:
        connection = vla_eval_connection(url)
        assert connection.open()["model_server"] == "Hostile"
        with pytest.raises(EvaluationError, match=expected) as info:
            connection.request({"state": np.zeros(4)})
        connection.close()
    text = str(info.value)
    assert text.startswith(f"the policy server at {url} ") and not getattr(info.value, "transient", False)
    assert "\n" not in text or name == "text frame"  # openpi's convention: a text frame is the server's traceback


def start_of(index: int = 0) -> EpisodeStart:
    import gymnasium as gym

    return EpisodeStart(0, TaskRef("easy", 0, "push-v3", "Push the puck"), index, 1000 + index,
                        gym.spaces.Box(-1.0, 1.0, (4,), np.float32))


def test_vla_eval_replies_are_matched_by_seq():
    """Replies to earlier messages are skipped (a few at most); an ERROR answers its observation only (the
    connection stays open); an ERROR for the episode's EPISODE_START fails its first request."""
    def handle(ws) -> None:
        hello = vlaeval.unpack(ws.recv(timeout=10))
        ws.send(vlaeval.pack(vlaeval.HELLO, {"model_server": "Seq"}, hello.seq))
        for data in ws:
            message = vlaeval.unpack(data)
            if message.type == vlaeval.EPISODE_START and message.payload["task"]["episode_idx"] == 1:
                ws.send(vlaeval.pack(vlaeval.ERROR, {"error": "episode_start_failed: no GPU"}, message.seq))
            if message.type != vlaeval.OBSERVATION:
                continue
            state = float(message.payload["state"][0])
            for old in range(3):  # stale replies first
                ws.send(vlaeval.pack(vlaeval.ACTION, {"actions": np.full(4, -1.0)}, old))
            if state == 7:
                ws.send(vlaeval.pack(vlaeval.ERROR, {"error": "observation_failed: seven"}, message.seq))
            else:
                ws.send(vlaeval.pack(vlaeval.ACTION, {"actions": np.full(4, state)}, message.seq))

    with ws_server(handle) as url:
        connection = vla_eval_connection(url)
        connection.open()
        connection.episode_start(start_of(0))
        assert connection.request({"state": np.full(4, 2.0)})["actions"].tolist() == [2.0] * 4
        with pytest.raises(EvaluationError, match="reported an error: observation_failed: seven"):
            connection.request({"state": np.full(4, 7.0)})
        assert connection.is_open and connection.request({"state": np.full(4, 3.0)})["actions"][0] == 3.0
        connection.episode_end(start_of(0), True, 3)
        connection.episode_start(start_of(1))
        with pytest.raises(EvaluationError, match="reported an error: episode_start_failed: no GPU"):
            connection.request({"state": np.full(4, 1.0)})
        connection.close()


def test_a_vla_eval_hello_answered_otherwise_is_refused():
    def error(ws) -> None:
        hello = vlaeval.unpack(ws.recv(timeout=10))
        ws.send(vlaeval.pack(vlaeval.ERROR, {"error": "unsupported protocol_version"}, hello.seq))
        ws.recv(timeout=10)

    def action(ws) -> None:
        ws.recv(timeout=10)
        ws.send(vlaeval.pack(vlaeval.ACTION, {"actions": [0.0]}, 1))
        ws.recv(timeout=10)

    with ws_server(error) as url:
        with pytest.raises(EvaluationError, match=f"the policy server at {url} reported an error: unsupported"):
            vla_eval_connection(url).open()
    with ws_server(action) as url:
        with pytest.raises(EvaluationError, match="HELLO reply that is not a valid message: an action message"):
            vla_eval_connection(url).open()


def test_an_image_that_jpeg_cannot_take_is_a_config_error():
    log: list = []
    with ws_server(vla_eval_handler({"model_server": "Tiny"}, log)) as url:
        connection = Connection(Endpoint(url, connect_retries=0), vlaeval.Client(image_format="jpeg"))
        connection.open()
        with pytest.raises(ConfigError, match="JPEG takes RGB images, not 4 channels"):
            connection.request({"images": {"rgba": np.zeros((4, 4, 4), np.uint8)}})
        connection.close()
