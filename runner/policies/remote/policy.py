"""`remote`: a policy served over WebSocket, in openpi's protocol (`runner serve`, openpi's serve_policy.py, ...) or
vla-eval's (`policy.kwargs.protocol: vla-eval`: vla-eval's model servers, `runner serve --protocol vla-eval`).

Each slot runs a `RemotePolicy` of its own, inside its worker process when there are workers: one connection per
worker, so one worker's simulation overlaps with another's inference, and a server that batches sees requests
from every worker at once. Per episode: `reset` tells the server the episode starts (when the protocol and the
server speak episode messages) and empties the action queue; `act` sends the observation (the protocol's layout,
or `policy.kwargs.request`) when the queue is empty and queues the first `replan_steps` actions of the reply (a
reply of shape (H, *action_shape) is a chunk, (*action_shape) one action); the episode's end is told to the server
with its success and steps. What differs between the protocols is a `client.Protocol`; the rest is written once.

Without a request mapping, the env gives (and runner sends) what the server's metadata declares its policy reads;
a server that declares no inputs (openpi's) gets no images, so nothing is rendered for it, and the main process
says so once on stderr.

A connection that drops mid-episode fails the episode as `PolicyUnavailable` (transient): the engine runs it
again from its start on a fresh worker, which reconnects (with retries and backoff); then it is recorded as an
error. Between episodes a closed connection is simply opened again.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from runner.adapters import option_defaults
from runner.contract import PolicyContract
from runner.errors import ConfigError, EvaluationError, RunnerError
from runner.policies.base import PIXELS, EpisodeStart, PerEnvBatch, PerEnvPolicy
from runner.policies.remote import OPENPI, TYPE, VLA_EVAL, protocol, request
from runner.policies.remote.client import Connection, Endpoint, Protocol
from runner.policies.remote.metadata import json_safe
from runner.spec import EnvSpec, PolicySpec
from runner.text import one_line, with_article

MIB = 1024 * 1024
RENDER_MS_PER_MEGAPIXEL = 200  # software rendering (Mesa llvmpipe): ~47 ms a 480x480 frame (benchmarks/README.md)


@dataclass(frozen=True)
class Options:
    endpoint: Endpoint
    control: str | bool  # "auto": when the protocol and the server's metadata say it speaks episode messages
    items: tuple[request.Item, ...] | None
    actions_key: str
    replan_steps: int | None
    protocol: str = OPENPI
    image_format: str = "raw"  # vla-eval
    benchmark: str | None = None  # vla-eval: HELLO's benchmark
    keys: frozenset[str] | None = None  # the observation keys sent (set by `make`; None: all the env gives)

    def speaker(self) -> Protocol:
        """A new protocol side for one connection."""
        return speaker(self.protocol, self.image_format, self.benchmark)


def speaker(protocol: str, image_format: str = "raw", benchmark: str | None = None) -> Protocol:
    """Protocol `protocol`'s side of one connection."""
    if protocol == VLA_EVAL:
        from runner.policies.remote.vlaeval import Client

        return Client(image_format, benchmark)
    from runner.policies.remote.protocol import OpenPI

    return OpenPI()


def options(policy: PolicySpec, env: EnvSpec | None = None) -> Options:
    """The spec's remote options (policy.kwargs was checked against the type's kwargs schema when loaded); `env`
    names vla-eval's benchmark when the spec does not."""
    if not policy.url:
        raise ConfigError("policy type 'remote' needs policy.url (ws://host:port of the policy server)")
    kw = {**option_defaults(TYPE), **policy.kwargs}
    endpoint = Endpoint(url=policy.url, api_key_env=kw["api_key_env"],
                        connect_timeout_s=float(kw["connect_timeout_s"]), connect_retries=int(kw["connect_retries"]),
                        backoff_s=float(kw["backoff_s"]), request_timeout_s=float(kw["request_timeout_s"]),
                        max_message_bytes=int(float(kw["max_message_mb"]) * MIB))
    benchmark = kw["benchmark"] or (env.type if env is not None else None)
    return Options(endpoint, kw["control_messages"], request.parse(kw.get("request")), kw["actions_key"],
                   kw["replan_steps"], kw["protocol"], kw["image_format"], benchmark)


@functools.cache
def _metadata(endpoint: Endpoint, protocol: str, image_format: str) -> Any:
    """The server's metadata (one connection, closed again); cached for the main process's preflight and make (the
    env, and so vla-eval's benchmark name, is not known to preflight: its HELLO names none unless the spec does)."""
    connection = Connection(endpoint, speaker(protocol, image_format))
    try:
        return connection.open()
    finally:
        connection.close()


def _server_metadata(opts: Options) -> Any:
    return _metadata(opts.endpoint, opts.protocol, opts.image_format)


def preflight(policy: PolicySpec) -> dict[str, Any]:
    """The server is reachable (with the spec's retries) and what it says of itself, for the run's provenance: a few
    readable fields, and its whole metadata as bounded JSON (`server_metadata`)."""
    opts = options(policy)
    meta = _server_metadata(opts)
    identity: dict[str, Any] = {"url": opts.endpoint.url, **opts.speaker().identity(meta)}
    identity["server_metadata"] = json_safe(meta) if isinstance(meta, Mapping) else {"value": json_safe(meta)}
    return identity


def make(policy: PolicySpec, env: EnvSpec) -> PerEnvBatch:
    """One `RemotePolicy` per slot; the observation keys and the contract from the server's metadata."""
    opts = options(policy, env)
    meta = _server_metadata(opts)
    _check_layout(meta, opts)
    side = opts.speaker()
    found = served_contract(meta, opts, side)
    if opts.items is not None:
        keys: frozenset[str] | None = request.observation_keys(opts.items)
    else:
        inputs = side.inputs(meta)
        keys = inputs.keys
        if not inputs.declared:
            _warn_once(opts, env, keys)
    opts = dataclasses.replace(opts, keys=keys)
    return PerEnvBatch(functools.partial(RemotePolicy, opts), keys, contract=found)


def _check_layout(meta: Any, opts: Options) -> None:
    """A `runner serve --request` server says the request keys it reads ("request" in its metadata, under "runner"
    in vla-eval's HELLO): the spec's mapping must send those keys, before any episode runs."""
    if not isinstance(meta, Mapping):
        return
    inner = meta.get("runner")
    layout = meta.get("request") if opts.protocol == OPENPI else inner.get("request") if isinstance(inner, Mapping) \
        else None
    if not isinstance(layout, Mapping):
        return
    theirs = sorted(str(key)[:100] for key in list(layout)[:100])
    ours = sorted(item.key for item in opts.items) if opts.items is not None else None
    if ours is not None and set(theirs) <= set(ours):
        return
    sent = f"policy.kwargs.request sends {', '.join(ours)}" if ours is not None else \
        "the spec has no policy.kwargs.request (runner's layout)"
    raise ConfigError(f"the policy server at {opts.endpoint.url} reads requests with the keys {', '.join(theirs)} "
                      f"(runner serve --request); {sent}: map the env's observations to those keys in "
                      "policy.kwargs.request")


def served_contract(meta: Any, opts: Options, side: Protocol | None = None) -> PolicyContract | None:
    """What the server's metadata declares of its policy (openpi's metadata: "contract", runner.contract's `to_data`;
    vla-eval's HELLO: action_spec and observation_spec), its keys read through `policy.kwargs.request` when the
    spec has one; None when it declares nothing. A malformed declaration is an EvaluationError."""
    side = side or opts.speaker()
    url = opts.endpoint.url
    try:
        found = side.contract(meta, opts.items, f"the policy server at {url}")
    except ValueError as exc:
        what = "HELLO" if opts.protocol == VLA_EVAL else "metadata"
        raise EvaluationError(f"the policy server at {url} declares a malformed contract in its {what}: "
                              f"{one_line(exc, 1000)}") from None
    if found is None:
        return None
    option = "policy.kwargs.request" if opts.items is not None else None
    return dataclasses.replace(found, rename_option=option, rename_form="{policy}: {source}")


def _warn_once(opts: Options, env: EnvSpec, keys: frozenset[str] | None) -> None:
    """A server that declares no inputs gets no images: say so once per server (main process, stderr), with what
    the images would cost and how to send them."""
    url = opts.endpoint.url
    if url in _WARNED:
        return
    _WARNED.add(url)
    cost, example = _rendering_cost(env)
    sent = ", ".join(sorted(keys or ())) + (" and the task text" if keys else "the task text")
    example_key = f"images.{example.partition('.')[2] or 'image'}" if opts.protocol == VLA_EVAL else "image"
    print(f"runner: warning: the policy server at {url} declares no inputs: runner sends it {sent}, no images "
          f"({cost}); to send images, map them in policy.kwargs.request (e.g. {example_key}: {example})",
          file=sys.stderr, flush=True)


_WARNED: set[str] = set()  # the servers warned of, in this process


def _rendering_cost(env: EnvSpec) -> tuple[str, str]:
    """What rendering the env's images for every step would cost (from its spec), and an image source to name."""
    try:
        from runner.envs import get_adapter

        provides = get_adapter(env.type).provides(env)
    except Exception:  # noqa: BLE001 - an env family not installed here (a relay): the estimate is only a hint
        provides = None
    images = {k: v for k, v in (provides.observations.items() if provides is not None else ())
              if k == PIXELS or k.startswith(PIXELS + ".")}
    example = next(iter(images), PIXELS)
    sizes = [shape for shape in images.values() if shape is not None and len(shape) >= 2]
    if not sizes:
        return "rendering images for every step costs tens of ms a step on CPU", example
    pixels = sum(int(h) * int(w) for h, w, *_ in sizes)
    shown = ", ".join(f"{h}x{w}" for h, w, *_ in sizes)
    ms = max(1, round(pixels / 1e6 * RENDER_MS_PER_MEGAPIXEL))
    return (f"rendering {with_article('image') if len(sizes) == 1 else f'{len(sizes)} images'} of {shown} for "
            f"every step costs ~{ms} ms a step on CPU"), example


class RemotePolicy(PerEnvPolicy):
    """A per-env policy whose actions come from the server (see the module docstring)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.connection = Connection(opts.endpoint, opts.speaker())
        self.start: EpisodeStart | None = None
        self.queue: deque[np.ndarray] = deque()
        self.shape: tuple[int, ...] = ()
        self.control = False
        self.steps = 0

    def reset(self, start: EpisodeStart) -> None:
        self.start = start
        self.queue.clear()
        self.steps = 0
        shape = getattr(start.action_space, "shape", None)
        self.shape = tuple(shape) if shape is not None else ()
        if not self.connection.is_open:
            self._open()
        if not self.control:
            return
        try:
            self.connection.episode_start(start)
        except RunnerError as exc:
            if not getattr(exc, "transient", False):
                raise
            self._open()  # the server went away between episodes: nothing of this episode is lost yet
            self.connection.episode_start(start)

    def _open(self) -> None:
        meta = self.connection.open()
        if self.opts.control == "auto":
            self.control = self.connection.protocol.speaks_control(meta)
        else:
            self.control = self.opts.control is True

    def act(self, observation: Mapping[str, Any]) -> np.ndarray:
        if not self.queue:
            assert self.start is not None
            self.queue.extend(self._actions(self.connection.request(self._request(observation))))
        self.steps += 1
        return self.queue.popleft()

    def _request(self, observation: Mapping[str, Any]) -> dict[str, Any]:
        keys, text = self.opts.keys, self.start.task.text if self.start is not None else ""
        if self.opts.items is not None:
            return request.build(self.opts.items, observation, text, nested=self.connection.protocol.nested_keys)
        if keys is not None:  # only what the server reads (an env may give more, e.g. for videos)
            observation = {k: v for k, v in observation.items() if k in keys}
        return self.connection.protocol.layout(observation, text)

    def _actions(self, reply: Any) -> list[np.ndarray]:
        key = self.opts.actions_key
        url = self.opts.endpoint.url
        if not isinstance(reply, Mapping) or key not in reply:
            raise EvaluationError(f"the policy server at {url} replied without {key!r} "
                                  f"({protocol.reply_keys(reply)}); "
                                  "policy.kwargs.actions_key names the reply's key of the actions")
        try:
            actions = np.asarray(reply[key])
        except (TypeError, ValueError) as exc:
            raise EvaluationError(f"the policy server at {url} sent {key!r} that is not an array: "
                                  f"{one_line(exc, 200)}") from None
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
            self.connection.episode_end(self.start, success, self.steps)
        except RunnerError:
            self.connection.close()

    def close(self) -> None:
        self.connection.close()
