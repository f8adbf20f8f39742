"""openpi's remote-policy protocol (the default of `policy.kwargs.protocol`; docs/remote-policies.md): its messages
besides observations and actions, and `OpenPI`, the client's side of it (runner.policies.remote.client.Protocol).

On connect the server sends one metadata map. Control messages are maps with "__ctrl__" (the field's convention,
from vla-eval and others): "episode_start" (with "__task__" and "__episode_id__", and runner's own fields: the
episode's seed, index, task and action space, so a served policy starts the episode exactly as a local one) and
"episode_end" (with "__success__"); the server answers each with {"__ack__": <the control>}. Servers that do not
speak them (openpi's) never get them: runner's client sends them only when the metadata says
"control_messages": true, or when the spec asks. Every request is one msgpack map answered by one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from runner.contract import PolicyContract, from_data
from runner.errors import EvaluationError
from runner.policies.base import AGENT_POS, ENV_STATE, PIXELS, EpisodeStart
from runner.policies.remote import wire
from runner.policies.remote.client import Connection, Inputs, Protocol
from runner.spec.limits import MAX_BATCH_SIZE
from runner.tasks import TaskRef
from runner.text import with_article

PROTOCOL = 1
CTRL, ACK = "__ctrl__", "__ack__"
CONTRACT = "contract"  # metadata: what the served policy reads and returns (runner.contract)
EPISODE_START, EPISODE_END = "episode_start", "episode_end"
HEALTH_PATH, STATS_PATH = "/healthz", "/stats"
MAX_SPACE_ITEMS = 100_000  # elements of an action space's bounds
MAX_TEXT = 10_000
KNOWN_KEYS = frozenset({PIXELS, AGENT_POS, ENV_STATE})  # runner's observation keys
WITHOUT_IMAGES = frozenset({AGENT_POS, ENV_STATE})  # what is sent to a server that declares no inputs
MAX_POLICY_FIELDS = 10  # of the metadata's "policy" map, kept in the run's provenance


class ProtocolError(ValueError):
    """A message that decodes but is not what the protocol allows here."""


def is_control(message: Mapping[str, Any]) -> bool:
    return CTRL in message


def episode_id(start: EpisodeStart) -> str:
    return f"{start.task.key}/{start.episode_index}"


def episode_start(start: EpisodeStart) -> dict[str, Any]:
    return {CTRL: EPISODE_START, "__task__": start.task.name, "__episode_id__": episode_id(start),
            "__task_text__": start.task.text, "__task_group__": start.task.group, "__task_id__": start.task.task_id,
            "__episode_index__": start.episode_index, "__seed__": start.seed, "__n_slots__": start.n_slots,
            "__slot__": start.slot,
            "__action_space__": encode_space(start.action_space)}


def episode_end(start: EpisodeStart, success: bool) -> dict[str, Any]:
    return {CTRL: EPISODE_END, "__episode_id__": episode_id(start), "__success__": bool(success)}


def ack(control: str) -> dict[str, Any]:
    return {ACK: control}


def requested_slot(message: Mapping[str, Any]) -> int | None:
    """The client's own slot number (runner's worker index), which a server may use as its slot for the client."""
    return _int(message, "__slot__", 0, 0, 1023) if "__slot__" in message else None


def parse_episode_start(message: Mapping[str, Any], slot: int) -> EpisodeStart:
    """The EpisodeStart an "episode_start" message describes, for the server's slot `slot`."""
    text = _text(message, "__task_text__", _text(message, "__task__", ""))
    name = _text(message, "__task__", text)
    return EpisodeStart(
        slot=slot,
        task=TaskRef(_text(message, "__task_group__", "remote"), _int(message, "__task_id__", 0, 0, 10**9), name,
                     text),
        episode_index=_int(message, "__episode_index__", 0, 0, 10**9),
        seed=_int(message, "__seed__", 0, 0, 2**63 - 1),
        action_space=decode_space(message.get("__action_space__")),
        n_slots=_int(message, "__n_slots__", 1, 1, MAX_BATCH_SIZE),
    )


def _text(message: Mapping[str, Any], key: str, default: str) -> str:
    value = message.get(key, default)
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ProtocolError(f"{key} must be a string of at most {MAX_TEXT:,} characters")
    return value


def _int(message: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = message.get(key, default)
    if isinstance(value, np.integer):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ProtocolError(f"{key} must be an integer in {low}..{high}")
    return value


def metadata(*, policy: Mapping[str, Any], observation_keys: frozenset[str] | None, max_batch: int,
             version: str, contract: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What `runner serve` sends on connect; `contract`: what the served policy declares (runner.contract's
    `to_data`), left out when it declares nothing."""
    return {"server": "runner", "runner_version": version, "protocol": PROTOCOL, "control_messages": True,
            "policy": dict(policy), "observation_keys": None if observation_keys is None else sorted(observation_keys),
            "max_batch": max_batch, **({CONTRACT: dict(contract)} if contract is not None else {})}


# -- the client's side -------------------------------------------------------------------------------------


class OpenPI(Protocol):
    """openpi's protocol as runner's client speaks it: the metadata map on connect, one map per request answered by
    one map, control messages (acknowledged) when the server speaks them."""

    name = "openpi"

    def handshake(self, link: Connection) -> Any:
        return link.receive("the metadata", link.endpoint.connect_timeout_s,
                            silence=" (a vla-eval server says nothing before the client's HELLO: if it is one, set "
                                    "policy.kwargs.protocol: vla-eval)")

    def request(self, link: Connection, message: Mapping[str, Any]) -> Any:
        link.send(lambda: wire.pack(message))
        return link.receive("a reply", link.endpoint.request_timeout_s)

    def episode_start(self, link: Connection, start: EpisodeStart) -> None:
        self._control(link, episode_start(start), EPISODE_START)

    def episode_end(self, link: Connection, start: EpisodeStart, success: bool, steps: int) -> None:
        self._control(link, episode_end(start, success), EPISODE_END)

    def _control(self, link: Connection, message: dict[str, Any], control: str) -> None:
        link.send(lambda: wire.pack(message))
        reply = link.receive("a reply", link.endpoint.request_timeout_s)
        if not (isinstance(reply, Mapping) and reply.get(ACK) == control):
            link.close()
            raise EvaluationError(f"the policy server at {link.url} answered {control} with {reply_keys(reply)}, "
                                  "not an acknowledgement; if it does not speak control messages, set "
                                  "policy.kwargs.control_messages: false")

    def speaks_control(self, metadata: Any) -> bool:
        return isinstance(metadata, Mapping) and metadata.get("control_messages") is True

    def inputs(self, metadata: Any) -> Inputs:
        """"observation_keys" (runner serve's; null: every key), else the keys of a declared contract's inputs, else
        nothing declared (openpi's servers): runner's layout without images."""
        meta = metadata if isinstance(metadata, Mapping) else {}
        if "observation_keys" in meta:
            listed = meta["observation_keys"]
            if not isinstance(listed, list):
                return Inputs(None, True)
            return Inputs(frozenset(k for k in listed[:1000] if k in KNOWN_KEYS), True)
        declared = meta.get(CONTRACT)
        inputs = declared.get("inputs") if isinstance(declared, Mapping) else None
        if isinstance(inputs, Mapping) and inputs:
            roots = {str(key).partition(".")[0] for key in list(inputs)[:1000]}
            return Inputs(frozenset(roots & KNOWN_KEYS), True)
        return Inputs(WITHOUT_IMAGES, False)

    def layout(self, observation: Mapping[str, Any], task_text: str) -> dict[str, Any]:
        return {**observation, "task": task_text}

    def contract(self, metadata: Any, items: tuple[Any, ...] | None, who: str) -> PolicyContract | None:
        """What the metadata declares under "contract" (runner.contract's `to_data`: `runner serve` sends its
        policy's), its keys read through the request mapping when the spec has one."""
        declared = metadata.get(CONTRACT) if isinstance(metadata, Mapping) else None
        if declared is None:
            return None
        sources = None
        if items is not None:
            sources = {item.key: (".".join(item.source), item.resize is not None) for item in items
                       if item.source != ("task",)}
            texts = {item.key for item in items if item.source == ("task",)}
            if isinstance(declared, Mapping) and isinstance(declared.get("inputs"), Mapping):
                declared = {**declared, "inputs": {k: v for k, v in declared["inputs"].items() if k not in texts}}
        return from_data(declared, who=who, sources=sources)

    def identity(self, metadata: Any) -> dict[str, Any]:
        return server_identity(metadata)


def server_identity(metadata: Any) -> dict[str, Any]:
    """runner serve's account of itself ("server", "runner_version", and its "policy" map as server_* fields)."""
    identity: dict[str, Any] = {}
    if not isinstance(metadata, Mapping):
        return identity
    if isinstance(metadata.get("server"), str):
        version = metadata.get("runner_version")
        identity["server"] = (metadata["server"] + (f" {version}" if isinstance(version, str) else ""))[:200]
    served = metadata.get("policy")
    if isinstance(served, Mapping):
        for key, value in list(served.items())[:MAX_POLICY_FIELDS]:
            if isinstance(key, str) and isinstance(value, (str, bool, int)):
                identity[f"server_{key}"[:100]] = value[:2000] if isinstance(value, str) else value
    return identity


def reply_keys(reply: Any) -> str:
    """What a reply holds, for a message: its first keys, or its type."""
    if isinstance(reply, Mapping):
        return f"keys: {', '.join(sorted(str(k)[:100] for k in list(reply)[:100])[:20]) or 'none'}"
    return with_article(type(reply).__name__)


# -- action spaces -----------------------------------------------------------------------------------------


def encode_space(space: Any) -> dict[str, Any] | None:
    """A Gymnasium action space as plain data (Box, Discrete, MultiDiscrete, MultiBinary); None for others."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "low": np.asarray(space.low), "high": np.asarray(space.high),
                "dtype": np.dtype(space.dtype).str}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec), "start": np.asarray(space.start)}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": [int(n) for n in np.atleast_1d(space.n)]}
    return None


def decode_space(data: Any) -> Any:
    """The inverse of `encode_space` (None stays None); ProtocolError for anything else."""
    if data is None:
        return None
    import gymnasium as gym

    if not isinstance(data, Mapping):
        raise ProtocolError("__action_space__ must be a map")
    kind = data.get("type")
    try:
        if kind == "Box":
            low, high = _bounds(data, "low"), _bounds(data, "high")
            if low.shape != high.shape:
                raise ProtocolError("Box low and high must have the same shape")
            dtype = np.dtype(str(data.get("dtype"))[:16])
            if dtype.kind not in "biuf":
                raise ProtocolError(f"Box dtype {dtype.str!r} is not numeric")
            return gym.spaces.Box(low=low, high=high, shape=low.shape, dtype=dtype)
        if kind == "Discrete":
            return gym.spaces.Discrete(_int(data, "n", 0, 1, 2**62), start=_int(data, "start", 0, -2**62, 2**62))
        if kind == "MultiDiscrete":
            return gym.spaces.MultiDiscrete(_bounds(data, "nvec"), start=_bounds(data, "start"))
        if kind == "MultiBinary":
            n = data.get("n")
            if not (isinstance(n, list) and 0 < len(n) <= 32 and all(isinstance(x, int) and 0 < x for x in n)
                    and math.prod(n) <= MAX_SPACE_ITEMS):
                raise ProtocolError("MultiBinary n must be a list of positive sizes")
            return gym.spaces.MultiBinary(n)
    except (TypeError, ValueError, AssertionError) as exc:
        if isinstance(exc, ProtocolError):
            raise
        raise ProtocolError(f"invalid {kind} action space: {exc}") from None
    raise ProtocolError(f"unknown action space type {kind!r} (Box, Discrete, MultiDiscrete, MultiBinary)")


def _bounds(data: Mapping[str, Any], key: str) -> np.ndarray:
    value = data.get(key)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf" or value.size > MAX_SPACE_ITEMS:
        raise ProtocolError(f"action space {key} must be a numeric array of at most {MAX_SPACE_ITEMS:,} numbers")
    return value


__all__ = ["ACK", "CTRL", "EPISODE_END", "EPISODE_START", "HEALTH_PATH", "PROTOCOL", "STATS_PATH", "OpenPI",
           "ProtocolError", "ack", "decode_space", "encode_space", "episode_end", "episode_id", "episode_start",
           "is_control", "metadata", "parse_episode_start", "reply_keys", "server_identity"]
