"""Meta-World (`env.type: metaworld`): the descriptor, known without importing the simulator (its catalog in
`catalog.py`, the adapter that builds envs in `adapter.py`, the forkserver's asset warm-up in `preload.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.adapters import EnvFamily, Needs
from runner.envs.metaworld.catalog import METAWORLD_CAMERAS, METAWORLD_GROUPS, METAWORLD_TASK_PREFIX, METAWORLD_TASKS


def task_names(item: str) -> tuple[str, ...] | None:
    """The tasks a task item names (a task, with or without the `metaworld-` prefix, or a group); None if unknown."""
    if item in METAWORLD_GROUPS:
        return METAWORLD_GROUPS[item]
    name = item.removeprefix(METAWORLD_TASK_PREFIX)
    return (name,) if name in METAWORLD_TASKS else None


KWARGS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "camera_name": {"description": "The camera of `pixels` and of videos (LeRobot's default), its image "
                                       "always upright (LeRobot turns only corner2's; corner and corner3 too here).",
                        "enum": list(METAWORLD_CAMERAS), "default": "corner2"},
        "observation_width": {"description": "Width of `pixels` in pixels (LeRobot's).", "type": "integer",
                              "minimum": 8, "maximum": 4096, "default": 480},
        "observation_height": {"description": "Height of `pixels` in pixels (LeRobot's).", "type": "integer",
                               "minimum": 8, "maximum": 4096, "default": 480},
        "video_quality": {"description": "fast: video frames without shadows and anti-aliasing (policies that do not "
                                         "see images); full: LeRobot's settings.", "enum": ["fast", "full"],
                          "default": "fast"},
    },
}

def pixel_names(env: Mapping[str, Any]) -> tuple[str, ...] | None:
    """One image, or a map of the cameras camera_name_mapping names (by their new names)."""
    mapping = env.get("camera_name_mapping") or {}
    return tuple(mapping.values()) or None


FAMILY = EnvFamily(
    name="metaworld",
    runtime="runner.envs.metaworld.adapter:MetaWorldAdapter",
    reference_policy="scripted",
    summary="Meta-World v3: 50 tasks (groups easy, medium, hard, very_hard, mt50), as LeRobot builds them",
    title="Meta-World",
    item_name="task or group",
    kwargs_schema=KWARGS_SCHEMA,
    items={**{group: len(names) for group, names in METAWORLD_GROUPS.items()}, **{t: 1 for t in METAWORLD_TASKS}},
    normalize_item=lambda item: item.removeprefix(METAWORLD_TASK_PREFIX),
    item_hint=f"groups: {', '.join(METAWORLD_GROUPS)}; `runner list` shows the tasks",
    cameras=METAWORLD_CAMERAS,
    pixel_names=pixel_names,
    needs=Needs(("metaworld", "mujoco"), "add install.extras: [metaworld]", renders_with_mujoco=None,
                extras=("metaworld",)),
    success_text="Meta-World's own: info['success'] true at any step (the episode ends there, as in LeRobot)",
)
