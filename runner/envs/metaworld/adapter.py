"""Meta-World v3 (`env.type: metaworld`), built and reset exactly like LeRobot's `MetaworldEnv`.

Tasks: any of the 50 v3 tasks (with or without the `metaworld-` prefix), the groups easy / medium /
hard / very_hard / mt50, or a comma list; group = the item as written, task id = index in the group.

Per task (as LeRobot): `MT1(name, seed=42).train_tasks[0]` is set, the `corner2` camera is moved and
its images turned upright (as every camera's: `upside_down`), then the goal is unfrozen and seeded, so
`reset(seed=k)` (= `env.seed(k)` then `env.reset(seed=k)`) alone decides the episode. Success ends the episode;
at most 500 steps.

Observation: `pixels` (480x480 `corner2` image; a dict of cameras when `camera_name_mapping` is set),
`agent_pos` (the first 4 numbers of the raw state: hand xyz and gripper), `environment_state` (the raw
39-number state, which the scripted experts read). `env.kwargs`: `camera_name`, `observation_width`,
`observation_height` (LeRobot's names and defaults), and `video_quality`: videos of policies that
see images are their observation frames; for other policies `fast` (default) renders video frames
without shadows and anti-aliasing (about 7x cheaper in software GL), `full` with LeRobot's settings.
"""

from __future__ import annotations

import importlib.util
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from runner.envs.base import (
    AGENT_POS,
    ENV_STATE,
    PIXELS,
    EnvAdapter,
    TaskEnv,
    renders,
    select_task_ids,
    unique_groups,
    wants,
)
from runner.adapters import option_defaults
from runner.contract import EnvProvides
from runner.envs.metaworld import FAMILY, task_names
from runner.envs.metaworld.catalog import METAWORLD_TASKS
from runner.envs.state import SimState, mujoco_state
from runner.errors import ConfigError, MissingDependencyError
from runner.spec import EnvSpec
from runner.tasks import TaskRef

MAX_STEPS = 500  # MT1 envs refuse to step past max_path_length = 500
CORNER2_POS = (0.75, 0.075, 0.7)  # LeRobot moves the corner2 camera here
UPRIGHT_TOLERANCE = 0.05  # |up.z| below this: a camera looking (nearly) straight down, which has no up
TASK_SEED = 42  # LeRobot builds each task from MT1(name, seed=42).train_tasks[0]
STATE_SIZE, ACTION_SIZE = 39, 4  # the raw state (environment_state); actions: hand xyz deltas and the gripper
KWARGS = option_defaults(FAMILY)  # env.kwargs' defaults, from the family's kwargs schema
INSTALL = "pip install 'runner[metaworld]' (metaworld==3.0.0, mujoco==3.8.1)"


class MetaWorldAdapter(EnvAdapter):
    name: ClassVar[str] = "metaworld"
    preload: ClassVar[tuple[str, ...]] = ("metaworld", "runner.envs.metaworld.preload")

    def check(self) -> None:
        for module in ("metaworld", "mujoco"):
            if importlib.util.find_spec(module) is None:
                raise MissingDependencyError(f"Meta-World needs the {module!r} package: {INSTALL}")

    def tasks(self, env: EnvSpec) -> list[TaskRef]:
        out = []
        for group in unique_groups(env.tasks):
            names = task_names(group)
            if names is None:
                raise ConfigError(f"env.task: unknown Meta-World task or group {group!r}")
            for task_id, name in select_task_ids(group, names, env.task_ids):
                out.append(TaskRef(group, task_id, name, METAWORLD_TASKS[name]))
        return out

    def needs_gl(self, env: EnvSpec, obs_keys: frozenset[str] | None, video: bool) -> bool:
        return renders(obs_keys, video)

    def provides(self, env: EnvSpec) -> EnvProvides:
        """One image (or the cameras camera_name_mapping names), agent_pos 4, the raw state 39, actions of 4."""
        opts = options(env)
        size = (int(opts["observation_height"]), int(opts["observation_width"]), 3)
        mapping = dict(env.camera_name_mapping)
        cameras = {f"{PIXELS}.{name}": camera for camera, name in mapping.items()} or {PIXELS: opts["camera_name"]}
        return EnvProvides({**{key: size for key in cameras}, AGENT_POS: (4,), ENV_STATE: (STATE_SIZE,)},
                           action_dim=ACTION_SIZE, cameras=cameras,
                           image_size=("env.kwargs.observation_height", "env.kwargs.observation_width"),
                           note="after env.camera_name_mapping" if mapping else "", one_image=True)

    def max_steps(self, task: TaskRef, env: EnvSpec) -> int:
        if env.max_steps is not None and env.max_steps > MAX_STEPS:
            raise ConfigError(f"env.max_steps: Meta-World episodes are at most {MAX_STEPS} steps, not {env.max_steps}")
        return env.max_steps or MAX_STEPS

    def make(self, task: TaskRef, env: EnvSpec, *, obs_keys: frozenset[str] | None, video: bool) -> TaskEnv:
        return MetaWorldEnv(task, options(env), dict(env.camera_name_mapping), obs_keys)

    def asset_dirs(self, env: EnvSpec) -> dict[str, Path]:
        """Meta-World's MuJoCo XMLs, meshes and textures, inside its package."""
        spec = importlib.util.find_spec("metaworld")
        if spec is None or not spec.submodule_search_locations:
            return {}
        return {"metaworld/assets": Path(list(spec.submodule_search_locations)[0]) / "assets"}

    def state(self, env: TaskEnv, observation: Any) -> SimState:
        """MuJoCo's physics plus the task state drawn at reset outside it: the goal and object layout (a goal site
        moves in the model, not in the data)."""
        raw = env._env  # type: ignore[attr-defined]
        return mujoco_state(raw.model, raw.data, raw._last_rand_vec, raw._target_pos)


def options(env: EnvSpec) -> dict[str, Any]:
    """env.kwargs over the defaults (checked against the family's kwargs schema when the spec was loaded)."""
    return {**KWARGS, **env.kwargs}


def build_lerobot_env(name: str, **kwargs: Any) -> Any:
    """The raw Meta-World env for `name`, set up exactly as LeRobot's `MetaworldEnv._ensure_env` does,
    except that `MT1(name, seed=42).train_tasks[0]` is computed on the env itself with one reset
    (Meta-World's `_make_tasks` builds a separate env and resets it 50 times).

    The task data is identical (tests/test_envs.py compares it with MT1 for every task). The env has
    one extra reset in its history, which no episode can see: every episode starts with
    `seed(k)` + `reset(seed=k)`, and episodes do not depend on what the env ran before.
    """
    import metaworld
    from metaworld import env_dict

    cls = env_dict.ALL_V3_ENVIRONMENTS[name]
    task_kwargs = dict(env_dict.ML1_args_kwargs[name]["kwargs"])
    del task_kwargs["task_id"]
    state = np.random.get_state()
    np.random.seed(TASK_SEED)  # as _make_tasks: seeded before the env is built
    try:
        env = cls(**kwargs)
        env._freeze_rand_vec = False
        env._set_task_called = True
        env._set_task_inner(**task_kwargs)
        env.reset()  # _make_tasks' first goal: drawn from the global RNG
        rand_vec = env._last_rand_vec
    finally:
        np.random.set_state(state)
    data = {**task_kwargs, "rand_vec": rand_vec, "env_cls": cls, **metaworld._MT_OVERRIDE}
    env.set_task(metaworld.Task(env_name=name, data=pickle.dumps(data)))
    return env


def upside_down(model: Any, camera_ids: Mapping[str, int]) -> dict[str, bool]:
    """Which cameras' images come out upside down: those whose up axis (the y axis of MuJoCo's camera frame) points
    below the horizon in the initial state (Meta-World's corner, corner2 and corner3). Their images are turned 180
    degrees (LeRobot turns corner2's). Cameras that look straight down (topview) have no up and are left as they are."""
    import mujoco

    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    return {camera: bool(data.cam_xmat[i].reshape(3, 3)[2, 1] < -UPRIGHT_TOLERANCE) for camera, i in camera_ids.items()}


class MetaWorldEnv(TaskEnv):
    """One Meta-World task (LeRobot's `MetaworldEnv` with `obs_type=pixels_agent_pos`, plus the raw state)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"]}

    def __init__(self, task: TaskRef, opts: Mapping[str, Any], camera_map: Mapping[str, str],
                 obs_keys: frozenset[str] | None) -> None:
        import mujoco

        self.task = task
        self.obs_keys = obs_keys
        self.camera_map = dict(camera_map)  # simulator camera -> name in observation["pixels"]
        cameras = list(camera_map) or [opts["camera_name"]]
        width, height = int(opts["observation_width"]), int(opts["observation_height"])

        env = build_lerobot_env(task.name, render_mode="rgb_array", camera_name=cameras[0], width=width, height=height)
        self._camera_ids = {}
        for camera in cameras:
            camera_id = mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
            if camera_id < 0:
                raise ConfigError(f"Meta-World has no camera {camera!r}")
            self._camera_ids[camera] = camera_id
        if "corner2" in cameras:
            env.model.cam_pos[self._camera_ids["corner2"]] = CORNER2_POS
        self._upside_down = upside_down(env.model, self._camera_ids)
        env.reset()
        # Meta-World's reset leaves derived data stale (the goal site's world position keeps the value of the last
        # forward pass, which depends on the previous episode), and a rendered goal then moves by a pixel: every
        # reset starts from the simulator data of the env as built, so an episode never depends on what ran
        # before it in this env (as in a fresh env, what lerobot-eval's first episodes see).
        self._built = mujoco.MjData(env.model)
        mujoco.mj_copyData(self._built, env.model, env.data)
        env._freeze_rand_vec = False  # a new goal and object layout at every reset ...
        env.seeded_rand_vec = True  # ... drawn from the env's seeded RNG
        # Frames only ever go to videos: cheap rendering (before the GL context exists) unless asked otherwise.
        self._fast_frames = not wants(obs_keys, PIXELS) and opts["video_quality"] == "fast"
        if self._fast_frames:
            env.model.vis.quality.offsamples = 0
        self._env = env
        self._cameras = cameras
        self._frame: np.ndarray | None = None  # the primary camera's image of the current state
        self.control_fps = 1.0 / env.dt  # frame_skip 5 x timestep 2.5 ms = 80 Hz
        self.action_space = spaces.Box(-1.0, 1.0, shape=(ACTION_SIZE,), dtype=np.float32)
        self.observation_space = self._observation_space(height, width)

    def _observation_space(self, height: int, width: int) -> spaces.Dict:
        parts: dict[str, spaces.Space] = {}
        image = spaces.Box(0, 255, (height, width, 3), np.uint8)
        if wants(self.obs_keys, PIXELS):
            parts[PIXELS] = spaces.Dict({v: image for v in self.camera_map.values()}) if self.camera_map else image
        if wants(self.obs_keys, AGENT_POS):
            parts[AGENT_POS] = spaces.Box(-1000.0, 1000.0, (4,), np.float64)
        if wants(self.obs_keys, ENV_STATE):
            parts[ENV_STATE] = self._env.observation_space
        return spaces.Dict(parts)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        import mujoco

        super().reset(seed=seed)
        mujoco.mj_copyData(self._env.data, self._env.model, self._built)
        if seed is not None:
            self._env.seed(seed)
        raw, _ = self._env.reset(seed=seed)
        return self._observation(raw), {"is_success": False}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        raw, reward, done, truncated, info = self._env.step(action)
        success = bool(info.get("success", 0))
        info["is_success"] = success
        return self._observation(raw), float(reward), bool(done or success), bool(truncated), info

    def render(self) -> np.ndarray:
        if self._frame is None:
            self._frame = self._render(self._cameras[0])
        return self._frame

    def close(self) -> None:
        self._env.close()

    def _observation(self, raw: np.ndarray) -> dict[str, Any]:
        self._frame = None
        obs: dict[str, Any] = {}
        if wants(self.obs_keys, PIXELS):
            images = {camera: self._render(camera) for camera in self._cameras}
            self._frame = images[self._cameras[0]]
            obs[PIXELS] = {self.camera_map[c]: img for c, img in images.items()} if self.camera_map else self._frame
        if wants(self.obs_keys, AGENT_POS):
            obs[AGENT_POS] = raw[:4]
        if wants(self.obs_keys, ENV_STATE):
            obs[ENV_STATE] = raw
        return obs

    def _render(self, camera: str) -> np.ndarray:
        import mujoco

        renderer = self._env.mujoco_renderer
        renderer.camera_id = self._camera_ids[camera]
        viewer = renderer._get_viewer("rgb_array")
        # Freeing any EGL context (e.g. a closed env's, at garbage collection) releases the thread's
        # current one: make ours current before every frame.
        viewer.make_context_current()
        if self._fast_frames:
            viewer.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        image = self._env.render()
        if self._upside_down[camera]:
            image = np.flip(image, (0, 1))  # turned 180 degrees: the world's up is up in the image
        return np.ascontiguousarray(image)
