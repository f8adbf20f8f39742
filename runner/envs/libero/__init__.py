"""LIBERO (`env.type: libero`): the descriptor, known without importing hf-libero (the adapter that builds envs,
finds and prepares the assets is `adapter.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.adapters import EnvFamily, Needs

# suite -> (number of tasks, max steps per episode as LeRobot sets them)
LIBERO_SUITES: dict[str, tuple[int, int]] = {
    'libero_spatial': (10, 280),
    'libero_object': (10, 280),
    'libero_goal': (10, 300),
    'libero_10': (10, 520),
    'libero_90': (90, 400),
}
LIBERO_CAMERAS = ("agentview_image", "robot0_eye_in_hand_image")
DEFAULT_CAMERA_NAMES = {"agentview_image": "image", "robot0_eye_in_hand_image": "image2"}  # LeRobot's names

KWARGS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "observation_width": {"description": "Width of each camera's image in pixels (LeRobot's).", "type": "integer",
                              "minimum": 8, "maximum": 4096, "default": 360},
        "observation_height": {"description": "Height of each camera's image in pixels (LeRobot's).",
                               "type": "integer", "minimum": 8, "maximum": 4096, "default": 360},
        "camera_name": {
            "description": "The cameras of `pixels`: a comma string or a list (LeRobot's camera_name).",
            "default": ",".join(LIBERO_CAMERAS),
            "oneOf": [
                {"type": "string", "pattern": "^(agentview_image|robot0_eye_in_hand_image)"
                                              "(,(agentview_image|robot0_eye_in_hand_image))*$",
                 "description": "LIBERO cameras, comma-separated: agentview_image, robot0_eye_in_hand_image"},
                {"type": "array", "items": {"enum": list(LIBERO_CAMERAS)}, "minItems": 1, "uniqueItems": True},
            ],
        },
        "init_states": {"description": "true: episode k starts from the suite's stored init state k (LeRobot's); "
                                       "false: placements drawn from the seed.", "type": "boolean", "default": True},
        "control_mode": {"description": "relative: actions are end-effector deltas (LeRobot's); absolute: targets.",
                         "enum": ["relative", "absolute"], "default": "relative"},
        "assets_dir": {"description": "Where the LIBERO assets are (null: $RUNNER_LIBERO_ASSETS, then hf-libero's).",
                       "type": ["string", "null"], "maxLength": 1000, "default": None},
    },
}

def pixel_names(env: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of env.kwargs.camera_name's cameras in `pixels` (LeRobot's image, image2 unless renamed)."""
    value = (env.get("kwargs") or {}).get("camera_name", KWARGS_SCHEMA["properties"]["camera_name"]["default"])
    cameras = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    mapping = env.get("camera_name_mapping") or {}
    return tuple(mapping.get(c.strip(), DEFAULT_CAMERA_NAMES.get(c.strip(), c.strip())) for c in cameras if c.strip())


FAMILY = EnvFamily(
    name="libero",
    runtime="runner.envs.libero.adapter:LiberoAdapter",
    summary="LIBERO (hf-libero 0.1.4): suites libero_spatial, libero_object, libero_goal, libero_10, libero_90",
    title="LIBERO",
    item_name="suite",
    kwargs_schema=KWARGS_SCHEMA,
    items={suite: n for suite, (n, _) in LIBERO_SUITES.items()},
    item_hint=f"suites: {', '.join(LIBERO_SUITES)}",
    cameras=LIBERO_CAMERAS,
    pixel_names=pixel_names,
    needs=Needs(("hf-libero", "mujoco"), "add install.extras: [libero]", apt=("cmake", "make", "g++"),
                renders_with_mujoco=True, extras=("libero",)),
    success_text="LIBERO's own: the task's goal predicates hold (the env reports done; the episode ends there)",
)
