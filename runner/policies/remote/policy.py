"""`remote`: a policy served over WebSocket in openpi's wire format (`runner serve`, openpi's serve_policy.py, ...).

Each slot runs a `RemotePolicy` of its own, inside its worker process when there are workers: one connection per
worker, so one worker's simulation overlaps with another's inference, and a server that batches sees requests
from every worker at once. Per episode: `reset` sends "episode_start" (when the server speaks control messages)
and empties the action queue; `act` sends the observation (runner's layout, or `policy.kwargs.request`) when the
queue is empty and queues the first `replan_steps` actions of the reply (a reply of shape (H, *action_shape) is a
chunk, (*action_shape) one action); the episode's end sends "episode_end" with its success.

A connection that drops mid-episode fails the episode as `PolicyUnavailable` (transient): the engine runs it
again from its start on a fresh worker, which reconnects (with retries and backoff); then it is recorded as an
error. Between episodes a closed connection is simply opened again.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from runner.adapters import option_defaults
from runner.contract import PolicyContract, from_data
from runner.errors import ConfigError, EvaluationError, RunnerError
from runner.policies.base import AGENT_POS, ENV_STATE, PIXELS, EpisodeStart, PerEnvBatch, PerEnvPolicy
from runner.policies.remote import TYPE, protocol, request
from runner.policies.remote.client import Connection, Endpoint
from runner.spec import EnvSpec, PolicySpec
from runner.text import with_article

MIB = 1024 * 1024
KNOWN_KEYS = frozenset({PIXELS, AGENT_POS, ENV_STATE})


@dataclass(frozen=True)
class Options:
    endpoint: Endpoint
    control: str | bool  # "auto": when the server's metadata says it speaks control messages
    items: tuple[request.Item, ...] | None
    actions_key: str
    replan_steps: int | None


def options(policy: PolicySpec) -> Options:
    """The spec's remote options (policy.kwargs was checked against the type's kwargs schema when loaded)."""
    if not policy.url:
        raise ConfigError("policy type 'remote' needs policy.url (ws://host:port of the policy server)")
    kw = {**option_defaults(TYPE), **policy.kwargs}
    endpoint = Endpoint(url=policy.url, api_key_env=kw["api_key_env"],
                        connect_timeout_s=float(kw["connect_timeout_s"]), connect_retries=int(kw["connect_retries"]),
                        backoff_s=float(kw["backoff_s"]), request_timeout_s=float(kw["request_timeout_s"]),
                        max_message_bytes=int(float(kw["max_message_mb"]) * MIB))
    return Options(endpoint, kw["control_messages"], request.parse(kw.get("request")), kw["actions_key"],
                   kw["replan_steps"])


@functools.cache
def _metadata(endpoint: Endpoint) -> Any:
    """The server's metadata (one connection, closed again); cached for the main process's preflight and make."""
    connection = Connection(endpoint)
    try:
        return connection.open()
    finally:
        connection.close()


def preflight(policy: PolicySpec) -> dict[str, Any]:
    """The server is reachable (with the spec's retries) and what it says of itself, for the run's provenance."""
    opts = options(policy)
    meta = _metadata(opts.endpoint)
    identity: dict[str, Any] = {"url": opts.endpoint.url}
    if isinstance(meta, Mapping):
        if isinstance(meta.get("server"), str):
            version = meta.get("runner_version")
            identity["server"] = meta["server"] + (f" {version}" if isinstance(version, str) else "")
        served = meta.get("policy")
        if isinstance(served, Mapping):
            for key, value in list(served.items())[:10]:
                if isinstance(key, str) and isinstance(value, (str, bool, int)):
                    identity[f"server_{key}"[:100]] = value[:2000] if isinstance(value, str) else value
    return identity


def make(policy: PolicySpec, env: EnvSpec) -> PerEnvBatch:
    opts = options(policy)
    meta = _metadata(opts.endpoint)
    if opts.items is not None:
        keys: frozenset[str] | None = request.observation_keys(opts.items)
    else:
        listed = meta.get("observation_keys") if isinstance(meta, Mapping) else None
        keys = None if not isinstance(listed, list) else frozenset(k for k in listed if k in KNOWN_KEYS)
    return PerEnvBatch(functools.partial(RemotePolicy, opts), keys, contract=served_contract(meta, opts))


def served_contract(meta: Any, opts: Options) -> PolicyContract | None:
    """What the server's metadata declares under "contract" (runner.contract's `to_data`: `runner serve` sends its
    policy's), its keys read through `policy.kwargs.request` when the spec has one; None when it declares nothing."""
    declared = meta.get(protocol.CONTRACT) if isinstance(meta, Mapping) else None
    if declared is None:
        return None
    url = opts.endpoint.url
    sources = None
    if opts.items is not None:
        sources = {item.key: (".".join(item.source), item.resize is not None) for item in opts.items
                   if item.source != (request.TASK,)}
        texts = {item.key for item in opts.items if item.source == (request.TASK,)}
        if isinstance(declared, Mapping) and isinstance(declared.get("inputs"), Mapping):
            declared = {**declared, "inputs": {k: v for k, v in declared["inputs"].items() if k not in texts}}
    try:
        found = from_data(declared, who=f"the policy server at {url}", sources=sources)
    except ValueError as exc:
        raise EvaluationError(f"the policy server at {url} declares a malformed contract in its metadata: "
                              f"{exc}") from None
    option = "policy.kwargs.request" if opts.items is not None else None
    return dataclasses.replace(found, rename_option=option, rename_form="{policy}: {source}")


class RemotePolicy(PerEnvPolicy):
    """A per-env policy whose actions come from the server (see the module docstring)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.connection = Connection(opts.endpoint)
        self.start: EpisodeStart | None = None
        self.queue: deque[np.ndarray] = deque()
        self.shape: tuple[int, ...] = ()
        self.control = False

    def reset(self, start: EpisodeStart) -> None:
        self.start = start
        self.queue.clear()
        shape = getattr(start.action_space, "shape", None)
        self.shape = tuple(shape) if shape is not None else ()
        if not self.connection.is_open:
            self._open()
        if not self.control:
            return
        try:
            reply = self.connection.request(protocol.episode_start(start))
        except RunnerError as exc:
            if not getattr(exc, "transient", False):
                raise
            self._open()  # the server went away between episodes: nothing of this episode is lost yet
            reply = self.connection.request(protocol.episode_start(start))
        if not (isinstance(reply, Mapping) and reply.get(protocol.ACK) == protocol.EPISODE_START):
            raise EvaluationError(f"the policy server at {self.opts.endpoint.url} answered episode_start with "
                                  f"{_keys(reply)}, not an acknowledgement; if it does not speak control messages, "
                                  "set policy.kwargs.control_messages: false")

    def _open(self) -> None:
        meta = self.connection.open()
        if self.opts.control == "auto":
            self.control = isinstance(meta, Mapping) and meta.get("control_messages") is True
        else:
            self.control = self.opts.control is True

    def act(self, observation: Mapping[str, Any]) -> np.ndarray:
        if not self.queue:
            assert self.start is not None
            reply = self.connection.request(request.build(self.opts.items, observation, self.start.task.text))
            self.queue.extend(self._actions(reply))
        return self.queue.popleft()

    def _actions(self, reply: Any) -> list[np.ndarray]:
        key = self.opts.actions_key
        url = self.opts.endpoint.url
        if not isinstance(reply, Mapping) or key not in reply:
            raise EvaluationError(f"the policy server at {url} replied without {key!r} ({_keys(reply)}); "
                                  "policy.kwargs.actions_key names the reply's key of the actions")
        actions = np.asarray(reply[key])
        if actions.dtype.kind not in "biuf":
            raise EvaluationError(f"the policy server at {url} sent {key!r} of dtype {actions.dtype}, not numbers")
        if actions.ndim == len(self.shape):
            return [actions]
        if actions.ndim == len(self.shape) + 1 and len(actions) > 0:
            steps = self.opts.replan_steps or len(actions)
            return list(actions[:steps])
        raise EvaluationError(f"the policy server at {url} sent {key!r} of shape {actions.shape}; the env's actions "
                              f"have shape {self.shape} (a chunk: (H, {', '.join(map(str, self.shape))}))")

    def episode_end(self, success: bool) -> None:
        """Tell the server the episode is over (its result is already known: a failure here changes nothing)."""
        if not (self.control and self.start is not None and self.connection.is_open):
            return
        try:
            self.connection.request(protocol.episode_end(self.start, success))
        except RunnerError:
            self.connection.close()

    def close(self) -> None:
        self.connection.close()


def _keys(reply: Any) -> str:
    if isinstance(reply, Mapping):
        return f"keys: {', '.join(sorted(map(str, reply))[:20]) or 'none'}"
    return with_article(type(reply).__name__)
