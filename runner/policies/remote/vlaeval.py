"""vla-eval's protocol (allenai's vla-evaluation-harness, `vla_eval.protocol`): what differs from openpi's.

Every message is an envelope {"type", "payload", "seq", "timestamp"}: type hello / observation / action /
episode_start / episode_end / error, payload a map. The client speaks first (HELLO with "protocol_version" and
"benchmark"); the server answers HELLO (echoing seq) with its capabilities and optionally "action_spec" and
"observation_spec" ({component: {"name", "dims", "format", "range"?, ...}}). An OBSERVATION is answered by an
ACTION with the same seq ({"actions": (A,) or (H, A)}) or an ERROR ({"error": text}); the connection stays open
after an error. EPISODE_START ({"task": {...}}) and EPISODE_END ({"metrics": {...}, ...}) get no answer. Arrays
and images travel as wire.pack(..., vla_eval=True) writes them.

`Client` is runner's client side of it (`policy.kwargs.protocol: vla-eval`; runner.policies.remote.client.Protocol):
HELLO on connect (its reply's payload is the server's metadata), EPISODE_START with vla-eval's task and runner's own
episode_start under "runner" (so `runner serve --protocol vla-eval` starts the exact episode), one OBSERVATION per
request answered by the ACTION or ERROR of its seq (older replies skipped, a few at most), EPISODE_END with the
success and the steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from runner.contract import AGENT_POS, ENV_STATE, PIXELS, Input, PolicyContract
from runner.policies.remote import protocol, wire
from runner.policies.remote.client import Connection, Inputs, Protocol
from runner.text import one_line, with_article

PROTOCOL_VERSION = 1
HELLO, OBSERVATION, ACTION = "hello", "observation", "action"
EPISODE_START, EPISODE_END, ERROR = "episode_start", "episode_end", "error"
TYPES = (HELLO, OBSERVATION, ACTION, EPISODE_START, EPISODE_END, ERROR)
HEALTH_PATH = "/health"
MAX_COMPONENTS = 64
MAX_STALE = 8  # replies to earlier messages skipped while waiting for one, at most
# vla-eval's default layout (vla_eval.types): images by camera, the task's text, the robot's state
IMAGES, TASK_DESCRIPTION, STATE = "images", "task_description", "state"


class Envelope(NamedTuple):
    type: str
    payload: dict[str, Any]
    seq: int
    timestamp: float


def pack(kind: str, payload: Mapping[str, Any], seq: int, *, image_format: str = "raw") -> bytes:
    """One message's bytes."""
    return wire.pack({"type": kind, "payload": dict(payload), "seq": seq, "timestamp": time.time()}, vla_eval=True,
                     image_format=image_format)


def unpack(data: Any, max_bytes: int = wire.DEFAULT_MAX_BYTES) -> Envelope:
    """One message from its bytes; wire.WireError naming what is wrong (as vla-eval's own check does, and more)."""
    raw = wire.unpack(data, max_bytes)
    if not isinstance(raw, dict):
        raise wire.WireError(f"a message must be a map, not {type(raw).__name__}")
    missing = [key for key in ("type", "payload", "seq", "timestamp") if key not in raw]
    if missing:
        raise wire.WireError(f"a message needs type, payload, seq and timestamp; missing {', '.join(missing)}")
    kind, payload, seq, stamp = raw["type"], raw["payload"], raw["seq"], raw["timestamp"]
    if kind not in TYPES:
        raise wire.WireError(f"unknown message type {str(kind)[:40]!r} ({', '.join(TYPES)})")
    if not isinstance(payload, dict):
        raise wire.WireError(f"a {kind} message's payload must be a map")
    if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq < 2**63:
        raise wire.WireError("seq must be an integer >= 0")
    if not isinstance(stamp, (int, float)) or isinstance(stamp, bool) or not math.isfinite(stamp):
        raise wire.WireError("timestamp must be a number")
    return Envelope(kind, payload, seq, float(stamp))


def hello_payload(**extra: Any) -> dict[str, Any]:
    """A HELLO's payload (either side): runner's version where vla-eval puts its harness version."""
    from runner import __version__

    return {"harness_version": f"runner {__version__}", "protocol_version": PROTOCOL_VERSION, **extra}


def error_text(payload: Mapping[str, Any]) -> str:
    """An ERROR message's text, one line, bounded."""
    text = payload.get("error", payload)
    return one_line(text, 2000)


# -- action_spec / observation_spec ---------------------------------------------------------------------------


def action_dims(spec: Any) -> int | None:
    """The numbers of one action an "action_spec" declares (the sum of its components' dims); None when it declares
    none or a component of unknown size; ValueError when it is malformed."""
    components = _components(spec, "action_spec")
    if not components:
        return None
    dims = [component["dims"] for component in components.values()]
    return sum(dims) if all(d > 0 for d in dims) else None


def _components(spec: Any, what: str) -> dict[str, dict[str, Any]]:
    if spec is None:
        return {}
    if not isinstance(spec, Mapping) or len(spec) > MAX_COMPONENTS:
        raise ValueError(f"{what}: not a map of at most {MAX_COMPONENTS} components")
    out = {}
    for key, value in spec.items():
        dims = value.get("dims") if isinstance(value, Mapping) else None
        if not isinstance(dims, int) or isinstance(dims, bool) or not 0 <= dims <= 1_000_000:
            raise ValueError(f"{what}.{str(key)[:100]}: needs dims, an integer >= 0")
        out[str(key)[:100]] = {"dims": dims, "format": str(value.get("format", ""))[:100]}
    return out


def contract(hello: Any, *, who: str, state_source: str | None = AGENT_POS) -> PolicyContract | None:
    """What a server's HELLO declares, as runner's contract: its action size (action_spec), and its state's size
    (observation_spec "state", read from `state_source`: what the request's "state" holds); None when it declares
    neither. ValueError when a spec is malformed."""
    if not isinstance(hello, Mapping):
        return None
    action_dim = action_dims(hello.get("action_spec"))
    observed = _components(hello.get("observation_spec"), "observation_spec")
    state = observed.get(STATE)
    inputs = None
    if state is not None and state["dims"] > 0 and state_source is not None:
        inputs = (Input(STATE, state_source, (state["dims"],)),)
    if action_dim is None and inputs is None:
        return None
    return PolicyContract(inputs=inputs, action_dim=action_dim, who=who, names={state_source: STATE}
                          if inputs else {})


def specs(declared: PolicyContract | None, *, images: bool) -> dict[str, Any]:
    """What `runner serve --protocol vla-eval` declares in its HELLO from its policy's contract: "action_spec" when
    the action size is known, "observation_spec" (state size, images, language) when inputs are declared."""
    out: dict[str, Any] = {}
    if declared is None:
        return out
    if declared.action_dim is not None:
        out["action_spec"] = {"action": {"name": "action", "dims": declared.action_dim, "format": "raw"}}
    if declared.inputs is not None:
        observed: dict[str, Any] = {"language": {"name": "language", "dims": 0, "format": "language"}}
        for item in declared.inputs:
            if item.source == AGENT_POS and len(item.shape) == 1:
                observed[STATE] = {"name": STATE, "dims": item.shape[0], "format": "raw"}
        if images:
            observed["image"] = {"name": "image", "dims": 0, "format": "rgb_hwc_uint8"}
        out["observation_spec"] = observed
    return out


# -- the client's side -------------------------------------------------------------------------------------


class Client(Protocol):
    """vla-eval's protocol as runner's client speaks it (see the module docstring); one per connection."""

    name = "vla-eval"
    nested_keys = True

    def __init__(self, image_format: str = "raw", benchmark: str | None = None) -> None:
        self.image_format = image_format
        self.benchmark = benchmark
        self.seq = 0  # of the last message sent
        self.started: int | None = None  # the seq of this episode's EPISODE_START

    def _send(self, link: Connection, kind: str, payload: Mapping[str, Any]) -> int:
        self.seq += 1
        seq = self.seq
        link.send(lambda: pack(kind, payload, seq, image_format=self.image_format))
        return seq

    def handshake(self, link: Connection) -> Any:
        self.seq, self.started = 0, None
        extra = {"benchmark": self.benchmark} if self.benchmark else {}
        self._send(link, HELLO, hello_payload(**extra))
        reply = link.receive("the HELLO reply", link.endpoint.connect_timeout_s, _hello_reply)
        if reply.type == ERROR:
            raise link.reported(error_text(reply.payload))
        if reply.type != HELLO:
            raise link.invalid("the HELLO reply", f"{with_article(reply.type)} message answers HELLO")
        return reply.payload

    def request(self, link: Connection, message: Mapping[str, Any]) -> Any:
        seq = self._send(link, OBSERVATION, message)
        timeout = link.endpoint.request_timeout_s
        deadline = time.monotonic() + timeout
        for _ in range(MAX_STALE + 1):
            reply = link.receive("a reply", timeout, unpack, deadline=deadline)
            if reply.seq == seq:
                if reply.type == ACTION:
                    return reply.payload
                if reply.type == ERROR:
                    raise link.reported(error_text(reply.payload))
                raise link.invalid("a reply", f"{with_article(reply.type)} message answers observation {seq}")
            if reply.seq > seq:
                raise link.invalid("a reply", f"seq {reply.seq} answers a message not sent (the last was {seq})")
            if reply.type == ERROR and reply.seq in (0, self.started):  # the episode did not start there
                raise link.reported(error_text(reply.payload))
        raise link.invalid("a reply", f"{MAX_STALE + 1} replies to earlier messages in a row, none to observation "
                                      f"{seq}")

    def episode_start(self, link: Connection, start: Any) -> None:
        task = {"name": start.task.name, "description": start.task.text, "suite": start.task.group,
                "episode_idx": start.episode_index, "seed": start.seed}
        self.started = self._send(link, EPISODE_START, {"task": task, "runner": protocol.episode_start(start)})

    def episode_end(self, link: Connection, start: Any, success: bool, steps: int) -> None:
        self._send(link, EPISODE_END, {"metrics": {"success": bool(success)}, "steps": int(steps)})
        self.started = None

    def speaks_control(self, metadata: Any) -> bool:
        return True  # EPISODE_START and EPISODE_END are part of the protocol

    def inputs(self, metadata: Any) -> Inputs:
        """runner serve's own "observation_keys" (under "runner"), else the HELLO's observation_spec: images when it
        declares an image component (named image, or of an rgb format), the state and the env's raw state always;
        nothing declared: no images."""
        meta = metadata if isinstance(metadata, Mapping) else {}
        runner = meta.get("runner")
        if isinstance(runner, Mapping) and "observation_keys" in runner:
            return protocol.OpenPI().inputs(runner)
        spec = meta.get("observation_spec")
        if not isinstance(spec, Mapping) or not spec:
            return Inputs(protocol.WITHOUT_IMAGES, False)
        images = any(_is_image(key, value) for key, value in list(spec.items())[:MAX_COMPONENTS])
        return Inputs(protocol.WITHOUT_IMAGES | {PIXELS} if images else protocol.WITHOUT_IMAGES, True)

    def layout(self, observation: Mapping[str, Any], task_text: str) -> dict[str, Any]:
        """vla-eval's default observation: images (camera -> image; the env's one image as "image"), state (runner's
        agent_pos), environment_state, task_description."""
        out: dict[str, Any] = {}
        pixels = observation.get(PIXELS)
        if pixels is not None:
            out[IMAGES] = dict(pixels) if isinstance(pixels, Mapping) else {"image": pixels}
        if AGENT_POS in observation:
            out[STATE] = observation[AGENT_POS]
        if ENV_STATE in observation:
            out[ENV_STATE] = observation[ENV_STATE]
        out[TASK_DESCRIPTION] = task_text
        return out

    def contract(self, metadata: Any, items: tuple[Any, ...] | None, who: str) -> PolicyContract | None:
        """The HELLO's action_spec and observation_spec (`contract`); the state is what the request's "state" holds."""
        source: str | None = AGENT_POS
        if items is not None:
            held = [item.source for item in items if item.key == STATE]
            source = ".".join(held[0]) if held and held[0][0] in (AGENT_POS, ENV_STATE) else None
        return contract(metadata, who=who, state_source=source)

    def identity(self, metadata: Any) -> dict[str, Any]:
        """runner serve's own account (under "runner"), else the model server's class and harness version."""
        meta = metadata if isinstance(metadata, Mapping) else {}
        found = protocol.server_identity(meta.get("runner"))
        name, version = meta.get("model_server"), meta.get("harness_version")
        if "server" not in found and isinstance(name, str):
            found["server"] = (name + (f" (vla-eval {version})" if isinstance(version, str) else ""))[:200]
        return found


def _hello_reply(data: Any, max_bytes: int) -> Envelope:
    """The HELLO reply; a frame that is no envelope says which protocol it looks like."""
    try:
        return unpack(data, max_bytes)
    except wire.WireError as exc:
        raise wire.WireError(f"{exc} (an openpi server sends its metadata unasked, without an envelope: if it is "
                             "one, set policy.kwargs.protocol: openpi)") from None


def _is_image(key: Any, value: Any) -> bool:
    if key == "image":
        return True
    return isinstance(value, Mapping) and (value.get("name") == "image" or str(value.get("format", ""))[:100]
                                           .startswith("rgb"))


__all__ = ["ACTION", "EPISODE_END", "EPISODE_START", "ERROR", "HEALTH_PATH", "HELLO", "IMAGES", "OBSERVATION",
           "PROTOCOL_VERSION", "STATE", "TASK_DESCRIPTION", "TYPES", "Client", "Envelope", "action_dims", "contract",
           "error_text", "hello_payload", "pack", "specs", "unpack"]
