"""Reading a client's request into runner's observation layout (pixels, agent_pos, environment_state) and its task
text: runner's own layout, vla-eval's default one, or a request mapping (`runner serve --request`, the same form as
`policy.kwargs.request`) read backwards.

A mapping names, for each request key, what it holds: `task`, `agent_pos`, `environment_state`, `pixels` (the one
image) or `pixels.<camera>`. Image options are undone where they can be: `flip` (flipped back), `layout: CHW`
(transposed to HWC), `dtype: float32` (scaled back to uint8); `resize` cannot be, so the image is taken at the size
sent. Under vla-eval a dot in a request key nests (`images.agentview` is `images` -> `agentview`). Keys a mapping
(or vla-eval's layout) does not name are ignored; runner's own layout refuses them, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from runner.policies.base import AGENT_POS, ENV_STATE, PIXELS
from runner.policies.remote import protocol, request, vlaeval

MAX_CAMERAS = 32
ARRAY_KEYS = (AGENT_POS, ENV_STATE)
TEXT_KEYS = ("task", "prompt")


class BadRequest(Exception):
    """A request this server cannot take (malformed, unknown keys, wrong types)."""


class Layout:
    """How requests are read: `items` (a mapping) or None (the protocol's own layout); `nested`: vla-eval's keys."""

    def __init__(self, items: tuple[request.Item, ...] | None, *, vla_eval: bool) -> None:
        self.items = items
        self.vla_eval = vla_eval

    def read(self, message: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        """The observation (unbatched, runner's layout) and the task text; BadRequest for anything else."""
        if self.items is not None:
            observation, text = self._mapped(message)
        elif self.vla_eval:
            observation, text = _vla_eval(message)
        else:
            observation, text = parse_observation(message)
        if not observation and not text:
            raise BadRequest("an empty request")
        return observation, text

    def _mapped(self, message: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        assert self.items is not None
        observation: dict[str, Any] = {}
        text = ""
        for item in self.items:
            value = _lookup(message, item.key, nested=self.vla_eval)
            if value is None:
                raise BadRequest(f"the request has no {item.key!r} (--request maps it to {'.'.join(item.source)}; "
                                 f"the request has {', '.join(sorted(map(str, message))[:20]) or 'nothing'})")
            root = item.source[0]
            if root == request.TASK:
                text = _text(item.key, value)
            elif root == PIXELS:
                image = _restore(item, _array(item.key, value))
                if len(item.source) == 2:
                    observation.setdefault(PIXELS, {})[item.source[1]] = image
                else:
                    observation[PIXELS] = image
            else:
                observation[root] = _array(item.key, value)
        return observation, text


def _lookup(message: Mapping[str, Any], key: str, *, nested: bool) -> Any:
    if key in message:
        return message[key]
    if not nested or "." not in key:
        return None
    value: Any = message
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _restore(item: request.Item, image: np.ndarray) -> np.ndarray:
    """Undo what the client's mapping did to an image, where it can be undone (see the module docstring)."""
    if item.layout == "CHW":
        if image.ndim != 3:
            raise BadRequest(f"{item.key!r} must be a CHW image, not shape {image.shape}")
        image = image.transpose(1, 2, 0)
    if item.dtype == "float32" or image.dtype.kind == "f":
        image = np.clip(np.rint(np.asarray(image, dtype=np.float64) * 255.0), 0, 255).astype(np.uint8)
    if item.flip in ("vertical", "both"):
        image = image[::-1]
    if item.flip in ("horizontal", "both"):
        image = image[:, ::-1]
    if image.ndim != 3 or image.dtype != np.uint8:
        raise BadRequest(f"{item.key!r} must be a uint8 HWC image, not {image.dtype} {image.shape}")
    return np.ascontiguousarray(image)


def _vla_eval(message: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """vla-eval's layout: images (camera -> image; the one camera "image" is the env's one image), state (or
    runner's agent_pos), environment_state, task_description (or task / prompt). Other keys are ignored."""
    observation: dict[str, Any] = {}
    images = message.get(vlaeval.IMAGES)
    if images is not None:
        if not isinstance(images, Mapping) or not 0 < len(images) <= MAX_CAMERAS or \
                not all(isinstance(k, str) for k in images):
            raise BadRequest(f"'images' must map 1..{MAX_CAMERAS} camera names to images")
        cameras = {k: _array(f"images.{k}", v) for k, v in images.items()}
        observation[PIXELS] = cameras["image"] if list(cameras) == ["image"] else cameras
    for key, target in ((vlaeval.STATE, AGENT_POS), (AGENT_POS, AGENT_POS), (ENV_STATE, ENV_STATE)):
        if key in message:
            observation[target] = _array(key, message[key])
    text = ""
    for key in (vlaeval.TASK_DESCRIPTION, *TEXT_KEYS):
        if key in message:
            text = _text(key, message[key])
            break
    return observation, text


def parse_observation(message: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """An observation in runner's layout and its task text ("prompt" is taken for "task"); BadRequest for anything
    else."""
    observation: dict[str, Any] = {}
    text = ""
    for key, value in message.items():
        if key in TEXT_KEYS:
            text = _text(key, value)
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
                             f"{ENV_STATE} and task or prompt; other layouts need --request (docs/remote-policies.md)")
    return observation, text


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or len(value) > protocol.MAX_TEXT:
        raise BadRequest(f"{key!r} must be a string of at most {protocol.MAX_TEXT:,} characters")
    return value


def _array(key: str, value: Any) -> np.ndarray:
    """A numeric array (a NumPy scalar, or a plain number, is taken as a 0-d one)."""
    if isinstance(value, (np.generic, int, float)) and not isinstance(value, bool):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        what = type(value).__name__ if not isinstance(value, np.ndarray) else f"an array of dtype {value.dtype}"
        raise BadRequest(f"{key!r} must be a numeric array (msgpack_numpy), not {what}")
    return value


__all__ = ["BadRequest", "Layout", "parse_observation"]
