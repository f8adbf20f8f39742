"""What runner sends a policy server for one observation.

Without a mapping, runner's own layout (what `runner serve` reads): the observation's keys as the env gives them
(`pixels`: one image or a map camera -> image, `agent_pos`, `environment_state`) plus `task`, the task text.
With `policy.kwargs.request`, one request key per item, each taken from a source:

    task | agent_pos | environment_state | pixels | pixels.<camera>

Image sources take options: `resize: [H, W]` (scaled to fit with the aspect ratio kept and zero padding around,
bilinear: openpi's `resize_with_pad`), `flip` (none, vertical, horizontal, both = 180 degrees), `layout` (HWC or
CHW), `dtype` (uint8, or float32 in [0, 1]). Order: flip, resize, dtype, layout. Under vla-eval (`nested`) a dot in
a request key nests: `images.agentview` is {"images": {"agentview": ...}}.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from runner.errors import ConfigError
from runner.policies.base import AGENT_POS, ENV_STATE, PIXELS

TASK = "task"
SOURCES = (TASK, AGENT_POS, ENV_STATE, PIXELS)


@dataclass(frozen=True)
class Item:
    key: str  # the request key
    source: tuple[str, ...]  # ("pixels", "image"), ("agent_pos",), ("task",), ...
    resize: tuple[int, int] | None = None  # (height, width)
    flip: str = "none"
    layout: str = "HWC"
    dtype: str | None = None  # None: as the env gives it

    @property
    def image(self) -> bool:
        return self.source[0] == PIXELS


def parse(mapping: Mapping[str, Any] | None) -> tuple[Item, ...] | None:
    """The items of `policy.kwargs.request` (already checked against the remote type's kwargs schema)."""
    if not mapping:
        return None
    items = []
    for key, value in mapping.items():
        options = {"from": value} if isinstance(value, str) else dict(value)
        source = tuple(str(options["from"]).split(".", 1))
        resize = options.get("resize")
        items.append(Item(key, source, tuple(resize) if resize else None, options.get("flip", "none"),
                          options.get("layout", "HWC"), options.get("dtype")))
    return tuple(items)


def observation_keys(items: tuple[Item, ...]) -> frozenset[str]:
    """The env observation keys a mapping reads (so envs render only when an item needs images)."""
    return frozenset(item.source[0] for item in items if item.source[0] != TASK)


def build(items: tuple[Item, ...] | None, observation: Mapping[str, Any], task_text: str, *,
          nested: bool = False) -> dict[str, Any]:
    """The request for one (unbatched) observation (without items: runner's own layout); `nested`: dots in the
    request keys nest."""
    if items is None:
        return {**observation, TASK: task_text}
    values = {item.key: task_text if item.source == (TASK,) else _value(item, observation) for item in items}
    return nest(values) if nested else values


def nest(values: Mapping[str, Any]) -> dict[str, Any]:
    """{"images.agentview": x, "state": y} -> {"images": {"agentview": x}, "state": y}; ConfigError when a key is
    both a value and a map of others, or has an empty part."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        *parents, leaf = key.split(".")
        if not all((*parents, leaf)):
            raise ConfigError(f"policy.kwargs.request.{key}: an empty part between dots")
        where = out
        for depth, part in enumerate(parents):
            where = where.setdefault(part, {})
            if not isinstance(where, dict):
                raise ConfigError(f"policy.kwargs.request: {key} nests under {'.'.join(parents[:depth + 1])}, "
                                  "which is a request key of its own")
        if leaf in where:
            raise ConfigError(f"policy.kwargs.request: {key} is a request key and holds others nested under it")
        where[leaf] = value
    return out


def _value(item: Item, observation: Mapping[str, Any]) -> Any:
    root = item.source[0]
    if root not in observation:
        raise ConfigError(f"policy.kwargs.request.{item.key}: the env's observation has no {root!r} "
                          f"(it has {', '.join(sorted(observation)) or 'nothing'})")
    value = observation[root]
    if root != PIXELS:
        return np.asarray(value)
    if isinstance(value, Mapping):
        if len(item.source) == 1:
            raise ConfigError(f"policy.kwargs.request.{item.key}: the env gives several cameras; name one as "
                              f"pixels.<camera> ({', '.join(sorted(value))})")
        camera = item.source[1]
        if camera not in value:
            raise ConfigError(f"policy.kwargs.request.{item.key}: the env has no camera {camera!r} "
                              f"(cameras: {', '.join(sorted(value))}; env.camera_name_mapping renames them)")
        value = value[camera]
    elif len(item.source) == 2:
        raise ConfigError(f"policy.kwargs.request.{item.key}: the env gives one image, not cameras by name; "
                          f"use from: pixels (or set env.camera_name_mapping)")
    return transform_image(np.asarray(value), item)


def transform_image(image: np.ndarray, item: Item) -> np.ndarray:
    if image.ndim != 3 or image.dtype != np.uint8:
        raise ConfigError(f"policy.kwargs.request.{item.key}: expected a uint8 HWC image, got {image.dtype} "
                          f"{image.shape}")
    if item.flip in ("vertical", "both"):
        image = image[::-1]
    if item.flip in ("horizontal", "both"):
        image = image[:, ::-1]
    if item.resize is not None:
        image = resize_with_pad(image, *item.resize)
    if item.dtype == "float32":
        image = image.astype(np.float32) / np.float32(255.0)
    if item.layout == "CHW":
        image = image.transpose(2, 0, 1)
    return np.ascontiguousarray(image)


def resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Scale a uint8 HWC image to fit (height, width) keeping its aspect ratio (bilinear), centred on zeros."""
    h, w = image.shape[:2]
    if (h, w) == (height, width):
        return image
    from PIL import Image

    ratio = max(w / width, h / height)
    new_h, new_w = int(h / ratio), int(w / ratio)
    channels = image.shape[2]
    pil = Image.fromarray(np.ascontiguousarray(image if channels != 1 else image[..., 0]))
    resized = np.asarray(pil.resize((new_w, new_h), resample=Image.BILINEAR)).reshape(new_h, new_w, channels)
    out = np.zeros((height, width, channels), dtype=np.uint8)
    top, left = max(0, int((height - new_h) / 2)), max(0, int((width - new_w) / 2))
    out[top:top + new_h, left:left + new_w] = resized
    return out


__all__ = ["SOURCES", "TASK", "Item", "build", "nest", "observation_keys", "parse", "resize_with_pad",
           "transform_image"]
