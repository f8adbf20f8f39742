"""`policy.type: remote`: a policy served over WebSocket, in openpi's protocol or vla-eval's (the client is
`policy.py` and `client.py`, each protocol's side `protocol.py` (openpi) and `vlaeval.py`, the wire format
`wire.py`, the request mapping `request.py`; `runner serve` is runner.serve)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from runner.adapters import PolicyType

CAMERA = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}"
SOURCE = rf"^(task|agent_pos|environment_state|pixels(\.{CAMERA})?)$"
IMAGE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["from"],
    "properties": {
        "from": {"type": "string", "pattern": SOURCE, "description": "task, agent_pos, environment_state, pixels, "
                                                                      "or pixels.<camera>"},
        "resize": {"description": "[height, width]: scaled to fit with the aspect ratio kept, zero padding around "
                                  "(openpi's resize_with_pad); images only",
                   "type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 4096},
                   "minItems": 2, "maxItems": 2},
        "flip": {"description": "images only; both = 180 degrees", "enum": ["none", "vertical", "horizontal", "both"]},
        "layout": {"description": "images only", "enum": ["HWC", "CHW"]},
        "dtype": {"description": "images only: uint8, or float32 in [0, 1]", "enum": ["uint8", "float32"]},
    },
}

OPENPI, VLA_EVAL = PROTOCOLS = ("openpi", "vla-eval")
VLA_EVAL_ONLY = ("image_format", "benchmark")

KWARGS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "protocol": {"description": "The server's protocol: openpi (openpi's serve_policy.py, runner serve) or "
                                    "vla-eval (allenai's vla-evaluation-harness model servers, runner serve "
                                    "--protocol vla-eval)",
                     "enum": list(PROTOCOLS), "default": "openpi"},
        "image_format": {"description": "vla-eval only: how images travel (raw bytes, or PNG / JPEG compressed)",
                         "enum": ["raw", "png", "jpeg"], "default": "raw"},
        "benchmark": {"description": "vla-eval only: the benchmark name sent in HELLO (default: the env type)",
                      "type": ["string", "null"], "minLength": 1, "maxLength": 200, "default": None},
        "api_key_env": {"description": "The environment variable holding the server's API key (sent as "
                                       "Authorization: Api-Key <key>); never the key itself",
                        "type": "string", "pattern": "^[A-Z_][A-Z0-9_]*$", "maxLength": 100, "default": None},
        "request": {"description": "Request key -> what it holds (a source, or an image source with options); "
                                   "under vla-eval a dot in a key nests (images.agentview); default: the "
                                   "protocol's layout (openpi: pixels, agent_pos, environment_state, task; vla-eval: "
                                   "images, state, environment_state, task_description), images only when the "
                                   "server's metadata declares it reads them",
                    "type": "object", "minProperties": 1, "maxProperties": 32,
                    "propertyNames": {"pattern": "^[A-Za-z0-9_][A-Za-z0-9_./:-]{0,99}$"},
                    "additionalProperties": {"oneOf": [
                        {"type": "string", "pattern": SOURCE,
                         "description": "task, agent_pos, environment_state, pixels or pixels.<camera>"}, IMAGE]}},
        "actions_key": {"description": "The reply's key holding the actions: (*action_shape) or a chunk "
                                       "(H, *action_shape)",
                        "type": "string", "minLength": 1, "maxLength": 100, "default": "actions"},
        "replan_steps": {"description": "Actions of a chunk to execute before asking again (default: all of it)",
                         "type": ["integer", "null"], "minimum": 1, "maximum": 10000, "default": None},
        "control_messages": {"description": "Send episode_start / episode_end control messages: auto = when the "
                                            "server's metadata says it speaks them (runner serve does; openpi's "
                                            "servers do not); under vla-eval, always",
                             "enum": ["auto", True, False], "default": "auto"},
        "connect_timeout_s": {"description": "How long connecting, and the server's metadata, may take (seconds)",
                              "type": "number", "exclusiveMinimum": 0, "maximum": 600, "default": 10.0},
        "connect_retries": {"description": "Further connection attempts, with a doubling backoff",
                            "type": "integer", "minimum": 0, "maximum": 100, "default": 3},
        "backoff_s": {"description": "Wait before the first retry (doubled each time, at most 10 s)",
                      "type": "number", "minimum": 0, "maximum": 60, "default": 0.5},
        "request_timeout_s": {"description": "How long one reply may take (seconds)", "type": "number",
                              "exclusiveMinimum": 0, "maximum": 86400, "default": 300.0},
        "max_message_mb": {"description": "Largest reply accepted (MiB)", "type": "number", "exclusiveMinimum": 0,
                           "maximum": 4096, "default": 64},
    },
}

IMAGE_OPTIONS = ("resize", "flip", "layout", "dtype")


def check(policy: Mapping[str, Any], env: Mapping[str, Any], family: Any) -> list[tuple[tuple, str, str | None]]:
    """vla-eval's options under openpi; request keys that cannot nest (vla-eval); image options on a source that is
    not an image; image sources the env will not give (when its family knows the names of its images before it
    runs)."""
    problems: list[tuple[tuple, str, str | None]] = []
    kwargs = policy["kwargs"]
    vla_eval = kwargs.get("protocol") == "vla-eval"
    if not vla_eval:
        problems.extend((("policy", "kwargs", option), f"{option} is an option of protocol vla-eval, not of "
                                                       f"{kwargs.get('protocol', 'openpi')}: set policy.kwargs."
                                                       f"protocol: vla-eval, or leave {option} out", None)
                        for option in VLA_EVAL_ONLY if option in kwargs)
    mapping = kwargs.get("request") or {}
    if vla_eval:
        problems.extend(_nesting(mapping))
    names = family.pixel_names(env) if family.pixel_names is not None else ...
    for key, value in mapping.items():
        options = value if isinstance(value, Mapping) else {"from": value}
        source = str(options["from"])
        path = ("policy", "kwargs", "request", key)
        if not source.startswith("pixels"):
            problems.extend((path + (option,), f"{option} is for images (from: pixels or pixels.<camera>), not "
                                               f"{source}", None) for option in IMAGE_OPTIONS if option in options)
            continue
        camera = source.partition(".")[2]
        where = path + ("from",) if isinstance(value, Mapping) else path
        if names is ... or (not camera and names is None):
            continue
        if names is None:
            problems.append((where, f"the {family.title or family.name} env gives one image, not cameras by name: "
                                    "use pixels (or name cameras with env.camera_name_mapping)", "pixels"))
        elif not camera:
            problems.append((where, f"the env gives several images; name one: pixels.<camera> ({', '.join(names)})",
                             None))
        elif camera not in names:
            close = difflib.get_close_matches(camera, names, n=1)
            problems.append((where, f"the env has no camera {camera!r} in pixels (it has {', '.join(names)}; "
                                    "env.camera_name_mapping renames them)", f"pixels.{close[0]}" if close else None))
    return problems


def _nesting(mapping: Mapping[str, Any]) -> list[tuple[tuple, str, str | None]]:
    """vla-eval's request keys nest at dots: each part non-empty, and no key both a value and a map of others."""
    problems: list[tuple[tuple, str, str | None]] = []
    keys = list(mapping)
    for key in keys:
        path = ("policy", "kwargs", "request", key)
        if not all(key.split(".")):
            problems.append((path, "an empty part between dots: under vla-eval a dot nests (images.agentview)", None))
            continue
        inner = next((other for other in keys if other.startswith(key + ".")), None)
        if inner is not None:
            problems.append((path, f"{key} holds a value and {inner} nests under it: under vla-eval a dot nests; "
                                   "use another key", None))
    return problems


TYPE = PolicyType(
    name="remote",
    runtime="runner.policies.remote.policy:make",
    summary="A policy served over WebSocket (openpi's protocol or vla-eval's): runner serve, openpi's "
            "serve_policy.py, vla-eval's model servers, ...",
    kwargs_schema=KWARGS_SCHEMA,
    url="ws:// or wss:// URL of the policy server",
    images=True,
    check=check,
    preflight="runner.policies.remote.policy:preflight",
)
