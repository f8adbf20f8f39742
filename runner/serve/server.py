"""`runner serve`: a spec's policy behind a WebSocket server speaking openpi's wire format.

Per connection: the metadata map on connect; then each binary message is a request map, answered by one map:
- a control message ("__ctrl__": episode_start / episode_end, runner.policies.remote.protocol) -> {"__ack__": ...};
  episode_start resets the connection's policy state with the episode's seed, task and action space, so a served
  episode equals a local one;
- an observation in runner's layout (pixels, agent_pos, environment_state, task; "prompt" is taken for "task")
  -> {"actions": (1, *action_shape), "server_timing": {...}}. An observation with no episode_start before it
  starts an episode of its own (seed `eval.seed`, the task text as the task), as openpi's clients never send one.
Each connection is a slot of the policy, freed when it closes: the slot number its episode_start asks for (runner's
worker index, so a served run lays out the policy's batch rows as a local one) when free, else the lowest free
one. Observations from all
connections are batched (runner.serve.batcher). A malformed request, or a policy that raises on it, gets a text
frame with the message and the connection closes (openpi's convention); the server serves on. A message over
the size limit closes the connection with code 1009 (the WebSocket protocol's "message too big").

SIGTERM / SIGINT: stop accepting connections, answer the requests in flight, close every connection (1001),
exit 0; a second signal closes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import http
import ipaddress
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runner import contract
from runner.errors import ConfigError, RunnerError
from runner.policies.base import AGENT_POS, ENV_STATE, PIXELS, EpisodeStart, stack_observations
from runner.policies.remote import protocol, wire
from runner.serve.batcher import Batcher, Request
from runner.serve.stats import ServerStats
from runner.spec import Spec
from runner.spec.derived import policy_label
from runner.spec.limits import MAX_BATCH_SIZE
from runner.tasks import TaskRef
from runner.text import with_article

MIB = 1024 * 1024
MAX_CAMERAS = 32
ARRAY_KEYS = (AGENT_POS, ENV_STATE)
TEXT_KEYS = ("task", "prompt")
CLOSE_BAD_DATA, CLOSE_POLICY_ERROR, CLOSE_GOING_AWAY = 1007, 1011, 1001


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 8
    max_wait_ms: float = 5.0
    api_key_env: str | None = None
    insecure: bool = False
    max_message_mb: float = 64.0
    max_connections: int = 256
    log_every_s: float = 10.0
    drain_s: float = 30.0

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be 0..65535, not {self.port}")
        if not 1 <= self.max_batch <= MAX_BATCH_SIZE:
            raise ConfigError(f"--max-batch must be 1..{MAX_BATCH_SIZE}, not {self.max_batch}")
        if not 0 <= self.max_wait_ms <= 60_000:
            raise ConfigError(f"--max-wait-ms must be 0..60000, not {self.max_wait_ms}")
        if not 0 < self.max_message_mb <= 4096:
            raise ConfigError(f"--max-message-mb must be more than 0 and at most 4096, not {self.max_message_mb}")
        if not 1 <= self.max_connections <= 100_000:
            raise ConfigError(f"--max-connections must be 1..100000, not {self.max_connections}")
        if not self.log_every_s >= 0:
            raise ConfigError(f"--log-every must be a number of seconds >= 0, not {self.log_every_s}")

    def api_key(self) -> str | None:
        """The key clients must send; ConfigError when a non-loopback bind has none (and is not --insecure)."""
        key = None
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise ConfigError(f"--api-key-env names ${self.api_key_env}, which is not set")
        if key is None and not self.insecure and not is_loopback(self.host):
            raise ConfigError(f"--host {self.host} lets other machines reach the policy: give clients a key with "
                              f"--api-key-env NAME (they send Authorization: Api-Key <key>), or pass --insecure")
        return key


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class BadRequest(Exception):
    """A request this server cannot take (malformed, unknown keys, wrong types)."""


class PolicyFailed(Exception):
    """The policy raised on a request: the message goes to that client."""


@dataclass
class Client:
    number: int  # the connection's, for the log
    ws: Any
    slot: int | None = None  # its policy slot, from its first episode start (or observation)
    in_episode: bool = False
    busy: bool = False  # a request is being answered


@dataclass
class Slots:
    """Slot numbers of the open connections: the lowest free one for a new connection."""

    used: set[int] = field(default_factory=set)

    def take(self, preferred: int | None = None) -> int:
        slot = preferred if preferred is not None and preferred not in self.used else 0
        while slot in self.used:
            slot += 1
        self.used.add(slot)
        return slot

    def free(self, slot: int) -> None:
        self.used.discard(slot)


class PolicyServer:
    def __init__(self, spec: Spec, options: ServeOptions, policy: Any, *, identity: Mapping[str, Any],
                 log: Callable[[str], None]) -> None:
        from runner import __version__

        self.spec = spec
        self.options = options
        self.policy = policy
        self.name = policy_label(spec)
        self.key = options.api_key()
        self.log = log
        self.limit = int(options.max_message_mb * MIB)
        self.stats = ServerStats()
        self.clients: dict[int, Client] = {}
        self.slots = Slots()
        self.draining = False
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runner-policy")
        keys = policy.observation_keys
        self.metadata = protocol.metadata(policy=identity, observation_keys=None if keys is None else frozenset(keys),
                                          max_batch=options.max_batch, version=__version__,
                                          contract=contract.to_data(policy.contract()))
        self.batcher: Batcher | None = None

    # -- HTTP before the handshake: health, stats, auth, capacity -------------------------------------------

    def process_request(self, connection: Any, request: Any) -> Any:
        if request.path == protocol.HEALTH_PATH:
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if self.key is not None:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Api-Key {self.key}".encode()):
                self.log(f"refused a connection from {_peer(connection)}: missing or wrong API key")
                return connection.respond(http.HTTPStatus.UNAUTHORIZED, "missing or wrong API key "
                                                                        "(send Authorization: Api-Key <key>)\n")
        if request.path == protocol.STATS_PATH:
            response = connection.respond(http.HTTPStatus.OK, json.dumps(self.snapshot()) + "\n")
            response.headers["Content-Type"] = "application/json"
            return response
        if self.draining:
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "server shutting down\n")
        if len(self.clients) >= self.options.max_connections:
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE,
                                      f"server full ({self.options.max_connections} connections)\n")
        return None

    def snapshot(self) -> dict[str, Any]:
        return self.stats.snapshot(connections=len(self.clients), slots_in_use=len(self.slots.used),
                                   policy=self.name, max_batch=self.options.max_batch,
                                   max_wait_ms=self.options.max_wait_ms)

    # -- one connection --------------------------------------------------------------------------------------

    async def handle(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        self.stats.connections_total += 1
        client = Client(self.stats.connections_total, ws)
        self.clients[client.number] = client
        try:
            await ws.send(wire.pack(self.metadata))
            while not self.draining:
                try:
                    data = await ws.recv()
                except ConnectionClosed:
                    break
                client.busy = True
                t0 = time.monotonic()
                try:
                    reply, acted = await self._answer(client, data)
                except Exception as exc:  # noqa: BLE001 - that client's error frame; the server serves on
                    self.stats.errors += 1
                    bad = isinstance(exc, BadRequest)
                    if not isinstance(exc, (BadRequest, PolicyFailed)):
                        exc = PolicyFailed(f"internal error: {type(exc).__name__}: {exc}")
                    self.log(f"connection {client.number} ({_peer(ws)}): {'bad request: ' if bad else ''}{exc}; "
                             "closed it")
                    with contextlib.suppress(ConnectionClosed):
                        await ws.send(("bad request: " if bad else "") + str(exc))
                        await ws.close(CLOSE_BAD_DATA if bad else CLOSE_POLICY_ERROR,
                                       "bad request" if bad else "policy error")
                    break
                try:
                    await ws.send(wire.pack(reply))
                except ConnectionClosed:
                    break
                finally:
                    client.busy = False
                if acted:
                    self.stats.request_done(time.monotonic() - t0)
            if self.draining:
                with contextlib.suppress(ConnectionClosed):
                    await ws.close(CLOSE_GOING_AWAY, "server shutting down")
        except ConnectionClosed:
            pass
        finally:
            del self.clients[client.number]
            if self.batcher is not None:
                self.batcher.wake()
            if client.slot is not None:
                await self._release(client.slot)

    async def _answer(self, client: Client, data: Any) -> tuple[dict[str, Any], bool]:
        """The reply to one message, and whether it was an observation (not a control message)."""
        if isinstance(data, str):
            raise BadRequest("a text frame; requests are binary msgpack maps")
        try:
            message = wire.unpack(data, self.limit)
        except wire.WireError as exc:
            raise BadRequest(str(exc)) from None
        if not isinstance(message, dict):
            raise BadRequest(f"a request must be a map, not {with_article(type(message).__name__)}")
        if protocol.is_control(message):
            self.stats.controls += 1
            return await self._control(client, message), False
        observation, text = parse_observation(message)
        if not client.in_episode:  # a client without control messages (openpi's): one episode per connection
            task = TaskRef("remote", 0, text, text)
            await self._reset(client, EpisodeStart(self._slot(client), task, 0, self.spec.eval.seed, None, 1))
        assert self.batcher is not None
        t0 = time.monotonic()
        action, batch_size = await self.batcher.submit(client.slot, observation, text)
        return {"actions": np.asarray(action)[None], "server_timing": {
            "infer_ms": round((time.monotonic() - t0) * 1000, 3), "batch_size": batch_size}}, True

    async def _control(self, client: Client, message: dict[str, Any]) -> dict[str, Any]:
        kind = message[protocol.CTRL]
        if kind == protocol.EPISODE_START:
            try:
                start = protocol.parse_episode_start(message, self._slot(client, protocol.requested_slot(message)))
            except protocol.ProtocolError as exc:
                raise BadRequest(f"episode_start: {exc}") from None
            await self._reset(client, start)
        elif kind == protocol.EPISODE_END:
            client.in_episode = False
            if self.batcher is not None:
                self.batcher.wake()
        else:
            raise BadRequest(f"unknown control message {kind!r} (episode_start, episode_end)")
        return protocol.ack(kind)

    def _slot(self, client: Client, preferred: int | None = None) -> int:
        if client.slot is None:
            client.slot = self.slots.take(preferred)
        return client.slot

    async def _reset(self, client: Client, start: EpisodeStart) -> None:
        def call() -> None:
            try:
                self.policy.reset([start])
            except (Exception, SystemExit) as exc:
                hint = "" if start.action_space is not None else \
                    " (the episode's action space is unknown: send an episode_start control message with it)"
                raise PolicyFailed(_raised(self.name, "reset", exc) + hint) from None

        await asyncio.get_running_loop().run_in_executor(self.executor, call)
        client.in_episode = True

    async def _release(self, slot: int) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self.executor, self.policy.release, slot)
        except Exception as exc:  # noqa: BLE001 - a clean-up failure is logged; the slot is freed anyway
            self.log(f"releasing slot {slot}: {type(exc).__name__}: {exc}")
        finally:
            self.slots.free(slot)

    def select(self, requests: list[Request]) -> list[Any]:
        """One batched policy call (on the policy's thread): one action per request."""
        try:
            observation = stack_observations([r.observation for r in requests])
            actions = np.asarray(self.policy.select_action(observation, [r.text for r in requests],
                                                           [r.slot for r in requests]))
        except (Exception, SystemExit) as exc:
            raise PolicyFailed(_raised(self.name, "select_action", exc)) from None
        if actions.ndim == 0 or actions.shape[0] != len(requests) or actions.dtype.kind not in "biuf":
            raise PolicyFailed(f"policy {self.name!r} returned actions of shape {actions.shape} and dtype "
                               f"{actions.dtype} for {len(requests)} observations")
        return [actions[i] for i in range(len(requests))]

    def in_episode(self) -> int:
        return sum(1 for c in self.clients.values() if c.in_episode)

    # -- the server's life -------------------------------------------------------------------------------------

    async def run(self, ready: Callable[[str], None]) -> None:
        from websockets.asyncio.server import serve

        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        signals = _Signals(loop, stop)
        self.batcher = Batcher(self.select, self.executor, max_batch=self.options.max_batch,
                               max_wait_s=self.options.max_wait_ms / 1000.0, expected=self.in_episode,
                               on_batch=self.stats.batch)
        batching = asyncio.create_task(self.batcher.run())
        logging = asyncio.create_task(self._log_periodically()) if self.options.log_every_s else None
        try:
            async with serve(self.handle, self.options.host, self.options.port, process_request=self.process_request,
                             max_size=self.limit, compression=None, server_header="runner") as server:
                port = server.sockets[0].getsockname()[1]
                ready(f"runner serve: policy {self.name!r} on ws://{_host(self.options.host)}:{port} (max batch "
                      f"{self.options.max_batch}, max wait {self.options.max_wait_ms:g} ms"
                      f"{', API key required' if self.key else ''}); stop with Ctrl-C or SIGTERM")
                await stop.wait()
                self.draining = True
                busy = sum(1 for c in self.clients.values() if c.busy)
                self.log(f"{signals.name}: draining {busy} request{'' if busy == 1 else 's'} in flight, then closing "
                         f"{len(self.clients)} connection{'' if len(self.clients) == 1 else 's'}")
                server.close(close_connections=False)
                for client in list(self.clients.values()):
                    if not client.busy:
                        loop.create_task(client.ws.close(CLOSE_GOING_AWAY, "server shutting down"))
                stop.clear()
                done = asyncio.create_task(server.wait_closed())
                forced = asyncio.create_task(stop.wait())
                await asyncio.wait({done, forced}, timeout=self.options.drain_s, return_when=asyncio.FIRST_COMPLETED)
                if not done.done():
                    self.log("closing the remaining connections now")
                    for client in list(self.clients.values()):
                        loop.create_task(client.ws.close(CLOSE_GOING_AWAY, "server shutting down"))
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(done, 5.0)
                forced.cancel()
        finally:
            signals.restore()
            batching.cancel()
            if logging is not None:
                logging.cancel()
            self.executor.shutdown(wait=True, cancel_futures=True)
        line = self.stats.window_line(0)
        self.log(f"stopped after {self.stats.requests} requests from {self.stats.connections_total} connections"
                 + (f"; last {line}" if line else ""))

    async def _log_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.options.log_every_s)
            line = self.stats.window_line(len(self.clients))
            if line:
                self.log(line)


class _Signals:
    """SIGTERM and SIGINT set `stop` (the first drains, a second one forces) while the server runs."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        self.loop = loop
        self.name = "stopping"
        self.installed: list[int] = []
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._fire, signum, stop)
            self.installed.append(signum)

    def _fire(self, signum: int, stop: asyncio.Event) -> None:
        self.name = signal.Signals(signum).name
        stop.set()

    def restore(self) -> None:
        for signum in self.installed:
            self.loop.remove_signal_handler(signum)


def parse_observation(message: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """An observation in runner's layout and its task text; BadRequest for anything else."""
    observation: dict[str, Any] = {}
    text = ""
    for key, value in message.items():
        if key in TEXT_KEYS:
            if not isinstance(value, str) or len(value) > protocol.MAX_TEXT:
                raise BadRequest(f"{key!r} must be a string of at most {protocol.MAX_TEXT:,} characters")
            text = value
        elif key in ARRAY_KEYS:
            observation[key] = _array(key, value)
        elif key == PIXELS:
            if isinstance(value, Mapping):
                if not 0 < len(value) <= MAX_CAMERAS or not all(isinstance(k, str) for k in value):
                    raise BadRequest(f"'pixels' must map 1..{MAX_CAMERAS} camera names to images")
                observation[key] = {k: _array(f"pixels.{k}", v) for k, v in value.items()}
            else:
                observation[key] = _array(key, value)
        else:
            raise BadRequest(f"unknown request key {str(key)[:100]!r}: runner serve reads {PIXELS}, {AGENT_POS}, "
                             f"{ENV_STATE} and task (docs/remote-policies.md)")
    if not observation and not text:
        raise BadRequest("an empty request")
    return observation, text


def _array(key: str, value: Any) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        raise BadRequest(f"{key!r} must be a numeric array (msgpack_numpy), not {with_article(type(value).__name__)}")
    return value


def _raised(name: str, what: str, exc: BaseException) -> str:
    if isinstance(exc, RunnerError):
        return f"policy {name!r}: {exc}"
    return f"policy {name!r} raised in {what}: {type(exc).__name__}: {exc}"


def _peer(ws: Any) -> str:
    address = getattr(ws, "remote_address", None)
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else "?"


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def serve(spec: Spec, options: ServeOptions, *, ready: Callable[[str], None] | None = None,
          log: Callable[[str], None] | None = None) -> None:
    """Build the spec's policy and serve it until SIGTERM or SIGINT (drained, then returns)."""
    from runner.engine.preflight import POLICY_STEPS, Preflight
    from runner.results.provenance import policy_identity
    from runner.spec.model import thaw

    log = log or _stderr
    options.api_key()  # refuse an open bind before loading anything
    prepared = Preflight(spec).run(only=POLICY_STEPS)
    policy = prepared.policy
    try:
        server = PolicyServer(spec, options, policy,
                              identity={**policy_identity(thaw(spec.policy)), **prepared.served}, log=log)
        try:
            asyncio.run(server.run(ready or _stdout))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {options.host}:{options.port}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(Exception):
            policy.close()


def _stdout(text: str) -> None:
    print(text, flush=True)


def _stderr(text: str) -> None:
    print(f"runner serve: {text}" if not text.startswith("runner serve:") else text, file=sys.stderr, flush=True)


__all__ = ["PolicyServer", "ServeOptions", "is_loopback", "parse_observation", "serve"]
