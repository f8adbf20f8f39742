"""`runner serve`: a spec's policy behind a WebSocket server speaking openpi's protocol (runner.serve.openpi) or
vla-eval's (runner.serve.vlaeval); this module is what both share: HTTP before the handshake (health, stats, API
key, capacity), connections and their policy slots, episodes, the batched policy calls, the server's life.

Each connection is a slot of the policy, freed when it closes: the slot number its episode_start asks for (runner's
worker index, so a served run lays out the policy's batch rows as a local one) when free, else the lowest free one.
Observations from all connections are batched (runner.serve.batcher). A client that sends no runner episode_start
gets implicit episodes (runner.serve.episodes). Requests are read by runner.serve.layout (runner's layout, vla-eval's,
or `--request`). Replies carry `--action-horizon` actions: one (the default) is `select_action`'s, more are the
policy's chunk (`select_chunk`). A message over the size limit closes the connection with code 1009.

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
from runner.policies.base import EpisodeStart, stack_observations
from runner.policies.remote import OPENPI, PROTOCOLS, VLA_EVAL, protocol, request, vlaeval
from runner.serve.batcher import Batcher, Request
from runner.serve.episodes import ImplicitEpisodes
from runner.serve.layout import BadRequest, Layout
from runner.serve.session import CLOSE_GOING_AWAY
from runner.serve.stats import ServerStats
from runner.spec import Spec
from runner.spec.derived import policy_label
from runner.spec.limits import MAX_BATCH_SIZE
from runner.text import one_line

MIB = 1024 * 1024
MAX_HORIZON = 10_000


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
    protocol: str = OPENPI
    request: tuple[request.Item, ...] | None = None  # --request: how requests are laid out (None: the protocol's)
    action_horizon: int | None = None  # --action-horizon (None: the policy's own for openpi, 1 for vla-eval)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"--protocol must be one of {', '.join(PROTOCOLS)}, not {self.protocol!r}")
        if self.action_horizon is not None and not 1 <= self.action_horizon <= MAX_HORIZON:
            raise ConfigError(f"--action-horizon must be 1..{MAX_HORIZON}, not {self.action_horizon}")
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


class PolicyFailed(Exception):
    """The policy raised on a request: the message goes to that client."""


@dataclass
class Client:
    number: int  # the connection's, for the log
    ws: Any
    slot: int | None = None  # its policy slot, from its first episode start (or observation)
    in_episode: bool = False
    busy: bool = False  # a request is being answered
    implicit: bool = False  # its episode is an implicit one (runner.serve.episodes)
    said: str = ""  # what the client said of its implicit episode's task
    failed_start: str | None = None  # why its episode could not start (vla-eval: told at each observation)


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
                 log: Callable[[str], None], needs_action_space: bool = False) -> None:
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
        self.vla_eval = options.protocol == VLA_EVAL
        self.layout = Layout(options.request, vla_eval=self.vla_eval)
        self.implicit = ImplicitEpisodes(spec, needs_action_space=needs_action_space, log=log)
        declared = policy.contract()
        self.horizon = action_horizon(self.name, policy, declared, options)
        keys = policy.observation_keys
        self.reads = None if keys is None else frozenset(keys)  # what a request must hold for the policy
        if options.request is not None:
            keys = request.observation_keys(options.request)
        keys = None if keys is None else frozenset(keys)
        self.metadata = {**protocol.metadata(policy=identity, observation_keys=keys, max_batch=options.max_batch,
                                             version=__version__, contract=contract.to_data(declared)),
                         "action_horizon": self.horizon}
        if options.request is not None:
            self.metadata["request"] = {item.key: ".".join(item.source) for item in options.request}
        self.hello = vlaeval.hello_payload(model_server="runner", capabilities={"action_horizon": self.horizon},
                                           **vlaeval.specs(declared, images=keys is None or any(
                                               k.startswith("pixels") for k in keys)), runner=self.metadata)
        self.batcher: Batcher | None = None

    # -- HTTP before the handshake: health, stats, auth, capacity -------------------------------------------

    def process_request(self, connection: Any, request: Any) -> Any:
        if request.path == protocol.HEALTH_PATH:
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if request.path == vlaeval.HEALTH_PATH:  # vla-eval's readiness probe
            return _json(connection.respond(http.HTTPStatus.OK, '{"status": "ok"}\n'))
        if self.key is not None:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Api-Key {self.key}".encode()):
                self.log(f"refused a connection from {_peer(connection)}: missing or wrong API key")
                return connection.respond(http.HTTPStatus.UNAUTHORIZED, "missing or wrong API key "
                                                                        "(send Authorization: Api-Key <key>)\n")
        if request.path == protocol.STATS_PATH:
            return _json(connection.respond(http.HTTPStatus.OK, json.dumps(self.snapshot()) + "\n"))
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

        from runner.serve import openpi
        from runner.serve import vlaeval as vlaeval_session

        self.stats.connections_total += 1
        client = Client(self.stats.connections_total, ws)
        self.clients[client.number] = client
        session = (vlaeval_session.Session if self.vla_eval else openpi.Session)(self, client)
        try:
            await session.run()
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

    def failed(self, client: Client, exc: BaseException) -> str:
        """Count and log a request that failed; the one line its client is told."""
        self.stats.errors += 1
        bad = isinstance(exc, BadRequest)
        if not isinstance(exc, (BadRequest, PolicyFailed)):
            exc = PolicyFailed(f"internal error ({type(exc).__name__}): {one_line(exc, 2000)}")
        text = ("bad request: " if bad else "") + one_line(exc, 2000)
        self.log(f"connection {client.number} ({_peer(client.ws)}): {text}")
        return text

    async def act(self, client: Client, observation: dict[str, Any], text: str) -> tuple[np.ndarray, int, float]:
        """The reply's actions for one observation ((horizon, *A), or (*A) for vla-eval's one action), the size
        of the batch they were computed in, and the milliseconds it took; an implicit episode first when the client
        is in none."""
        missing = sorted(self.reads - set(observation)) if self.reads is not None else []
        if missing:
            raise BadRequest(f"the request has no {', '.join(missing)}, which policy {self.name!r} reads (runner's "
                             f"layout: {', '.join(sorted(self.reads))}, task; other keys are mapped with --request)")
        if not client.in_episode:
            await self.start_implicit(client, text)
        assert self.batcher is not None
        t0 = time.monotonic()
        actions, batch_size = await self.batcher.submit(client.slot, observation, text)
        return np.asarray(actions), batch_size, (time.monotonic() - t0) * 1000

    async def start_episode(self, client: Client, message: Mapping[str, Any]) -> None:
        """runner's own episode_start (the exact episode: seed, task, action space)."""
        try:
            start = protocol.parse_episode_start(message, self._slot(client, protocol.requested_slot(message)))
        except protocol.ProtocolError as exc:
            raise BadRequest(f"episode_start: {exc}") from None
        client.implicit = False
        await self._reset(client, start)

    async def start_implicit(self, client: Client, *said: str) -> None:
        """An implicit episode (runner.serve.episodes) for what the client said of its task (names or texts, the
        first the spec knows wins)."""
        number, seed = self.implicit.next_seed()
        slot = self._slot(client)

        def call() -> EpisodeStart:
            return self.implicit.start(slot, number, seed, said)

        start = await asyncio.get_running_loop().run_in_executor(self.executor, call)
        client.implicit, client.said = True, said[0] if said else ""
        await self._reset(client, start)

    def end_episode(self, client: Client) -> None:
        client.in_episode = False
        if self.batcher is not None:
            self.batcher.wake()

    def _slot(self, client: Client, preferred: int | None = None) -> int:
        if client.slot is None:
            client.slot = self.slots.take(preferred)
        return client.slot

    async def _reset(self, client: Client, start: EpisodeStart) -> None:
        def call() -> None:
            try:
                self.policy.reset([start])
            except (Exception, SystemExit) as exc:
                raise PolicyFailed(_raised(self.name, "reset", exc) + self._reset_hint(start, client)) from None

        await asyncio.get_running_loop().run_in_executor(self.executor, call)
        client.in_episode = True

    def _reset_hint(self, start: EpisodeStart, client: Client) -> str:
        if not client.implicit:
            return ""
        hints = []
        known = self.implicit.known()
        if not start.task.name:
            hints.append("the request names no task: send the prompt (or task) with it")
        elif start.task.group == "remote" and known:
            hints.append(f"the task {start.task.name[:100]!r} is none of the spec's ({known}): a client names a "
                         "task by its name or text")
        if start.action_space is None and self.implicit.needs_action_space:
            hints.append("the episode's action space is unknown here (the spec's env cannot be made on this machine)")
        return f" ({'; '.join(hints)})" if hints else ""

    async def _release(self, slot: int) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self.executor, self.policy.release, slot)
        except Exception as exc:  # noqa: BLE001 - a clean-up failure is logged; the slot is freed anyway
            self.log(f"releasing slot {slot}: {type(exc).__name__}: {exc}")
        finally:
            self.slots.free(slot)

    def select(self, requests: list[Request]) -> list[Any]:
        """One batched policy call (on the policy's thread): one action, or a chunk of `horizon`, per request."""
        what = "select_action" if self.horizon == 1 else "select_chunk"
        try:
            observation = stack_observations([r.observation for r in requests])
            texts, slots = [r.text for r in requests], [r.slot for r in requests]
            if self.horizon == 1:
                actions = np.asarray(self.policy.select_action(observation, texts, slots))
            else:
                actions = np.asarray(self.policy.select_chunk(observation, texts, slots, self.horizon))
        except (Exception, SystemExit) as exc:
            raise PolicyFailed(_raised(self.name, what, exc)) from None
        rows = actions.shape[:2] if self.horizon > 1 else actions.shape[:1]
        if actions.ndim < len(rows) or rows != (len(requests), self.horizon)[:len(rows)] or \
                actions.dtype.kind not in "biuf":
            raise PolicyFailed(f"policy {self.name!r} returned actions of shape {actions.shape} and dtype "
                               f"{actions.dtype} from {what} for {len(requests)} observations")
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
                per_reply = f"{self.horizon} action{'s' if self.horizon > 1 else ''} a reply"
                ready(f"runner serve: policy {self.name!r} on ws://{_host(self.options.host)}:{port} "
                      f"({self.options.protocol} protocol, {per_reply}, max batch "
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


def action_horizon(name: str, policy: Any, declared: contract.PolicyContract | None, options: ServeOptions) -> int:
    """The actions each reply carries: --action-horizon, else (openpi) the policy's own n_action_steps when it
    predicts chunks, else 1; ConfigError when the policy cannot give that many at once."""
    most = int(policy.max_horizon())
    own = declared.n_action_steps if declared is not None and declared.n_action_steps else 1
    horizon = options.action_horizon or (min(own, most) if options.protocol == OPENPI else 1)
    if horizon > most:
        if most == 1:
            raise ConfigError(f"policy {name!r} gives one action a request, not chunks (it predicts one action at a "
                              "time, or its pipeline keeps state from one step to the next): --action-horizon "
                              f"{horizon} needs a policy with action chunks (ACT, pi0, SmolVLA in LeRobot); clients "
                              "must then ask once a step")
        raise ConfigError(f"policy {name!r} predicts chunks of {most} actions: --action-horizon must be 1..{most}, "
                          f"not {horizon}")
    return horizon


def _json(response: Any) -> Any:
    """An HTTP response whose body is JSON (one Content-Type header, not respond()'s text/plain beside it)."""
    del response.headers["Content-Type"]
    response.headers["Content-Type"] = "application/json"
    return response


def _raised(name: str, what: str, exc: BaseException) -> str:
    if isinstance(exc, RunnerError):
        return f"policy {name!r}: {one_line(exc, 2000)}"
    return f"policy {name!r} failed in {what} ({type(exc).__name__}): {one_line(exc, 2000)}"


def _peer(ws: Any) -> str:
    address = getattr(ws, "remote_address", None)
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else "?"


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def serve(spec: Spec, options: ServeOptions, *, ready: Callable[[str], None] | None = None,
          log: Callable[[str], None] | None = None) -> None:
    """Build the spec's policy and serve it until SIGTERM or SIGINT (drained, then returns)."""
    from runner.adapters import policy_type
    from runner.engine.preflight import POLICY_STEPS, Preflight
    from runner.results.provenance import policy_identity
    from runner.spec.model import thaw

    log = log or _stderr
    options.api_key()  # refuse an open bind before loading anything
    prepared = Preflight(spec).run(only=POLICY_STEPS)
    policy = prepared.policy
    try:
        server = PolicyServer(spec, options, policy,
                              identity={**policy_identity(thaw(spec.policy)), **prepared.served}, log=log,
                              needs_action_space=policy_type(spec.policy.type).needs_action_space)
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


__all__ = ["OPENPI", "PROTOCOLS", "VLA_EVAL", "PolicyServer", "ServeOptions", "action_horizon", "is_loopback", "serve"]
