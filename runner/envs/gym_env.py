"""Any registered Gymnasium env (`env.type: gym`): a benchmark that is a standard Gym env needs only YAML.

`env.task` is a Gymnasium id or a comma list of ids; `module:Id` imports `module` first (the package
that registers the id). Tasks are group `gym`, task id = position in the list (LeRobot names a
single-task env `<type>_0` the same way). `env.kwargs` go to `gymnasium.make`, except
`task_description`, the task text given to the policy (default: the id). Success is
`info[env.success_key]` (default `is_success`); episodes end at termination, truncation or
`env.max_steps` (default: the id's registered `max_episode_steps`).

Observations: a dict observation is passed through (`pixels` cameras renamed by `camera_name_mapping`);
any other observation becomes `agent_pos`. `pixels` is rendered with `render()` when the policy asks
for it and the env does not provide it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from runner.envs.base import (
    AGENT_POS,
    PIXELS,
    TaskEnv,
    rename_cameras,
    renders,
    select_task_ids,
    unique_groups,
    wants,
)
from runner.errors import ConfigError, MissingDependencyError
from runner.spec import EnvSpec
from runner.tasks import TaskRef

GROUP = "gym"
DEFAULT_SUCCESS_KEY = "is_success"
TEXT_KWARG = "task_description"


class GymAdapter:
    name: ClassVar[str] = "gym"

    def check(self) -> None:
        pass  # gymnasium is a dependency of runner; modules named in ids are checked by tasks()

    def tasks(self, env: EnvSpec) -> list[TaskRef]:
        ids = unique_groups(env.tasks)
        for env_id in ids:
            registered_spec(env_id)
        text = env.kwargs.get(TEXT_KWARG)
        if text is not None and not isinstance(text, str):
            raise ConfigError(f"env.kwargs.{TEXT_KWARG} must be a string")
        return [TaskRef(GROUP, task_id, env_id, text or env_id)
                for task_id, env_id in select_task_ids(GROUP, ids, env.task_ids)]

    def max_steps(self, task: TaskRef, env: EnvSpec) -> int:
        if env.max_steps is not None:
            return env.max_steps
        limit = registered_spec(task.name).max_episode_steps
        if limit is None:
            raise ConfigError(f"Gymnasium env {task.name!r} has no time limit: set env.max_steps")
        return limit

    def make(self, task: TaskRef, env: EnvSpec, *, obs_keys: frozenset[str] | None, video: bool) -> TaskEnv:
        return GymTaskEnv(task, env, obs_keys, video)

    def needs_gl(self, env: EnvSpec, obs_keys: frozenset[str] | None, video: bool) -> bool:
        """MuJoCo-based ids (gymnasium's own MuJoCo envs and any entry point in a `mujoco` module) that render."""
        if not renders(obs_keys, video):
            return False
        return any("mujoco" in str(registered_spec(env_id).entry_point) for env_id in env.tasks)


def registered_spec(env_id: str) -> Any:
    """The id's registration (importing `module` of `module:Id` first); clear errors otherwise."""
    from gymnasium.envs.registration import registry

    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise MissingDependencyError(f"env.task {env_id!r}: cannot import {module!r} ({exc}); "
                                         f"install the package that registers the env") from None
    spec = registry.get(name)
    if spec is None:
        close = difflib.get_close_matches(name, list(registry), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"env.task: unknown Gymnasium env id {name!r}{hint} "
                          f"(use module:Id to import the package that registers it)")
    return spec


class GymTaskEnv(TaskEnv):
    """A Gymnasium env with LeRobot-style observations and `info["is_success"]`."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"]}

    def __init__(self, task: TaskRef, env: EnvSpec, obs_keys: frozenset[str] | None, video: bool) -> None:
        import gymnasium

        self.task = task
        self.obs_keys = obs_keys
        self.camera_map = dict(env.camera_name_mapping)
        self.success_key = env.success_key or DEFAULT_SUCCESS_KEY
        kwargs = {k: v for k, v in env.kwargs.items() if k != TEXT_KWARG}
        self._render_needed = video or wants(obs_keys, PIXELS)
        if env.max_steps is not None:
            kwargs.setdefault("max_episode_steps", env.max_steps)
        try:
            self._env = gymnasium.make(task.name, render_mode="rgb_array" if self._render_needed else None,
                                       disable_env_checker=True, **kwargs)
        except TypeError as exc:
            raise ConfigError(f"env.kwargs do not fit {task.name!r}: {exc}") from None
        except gymnasium.error.DependencyNotInstalled as exc:
            raise MissingDependencyError(f"{task.name}: {exc}") from None
        self._frame: np.ndarray | None = None
        self.action_space = self._env.action_space
        self.observation_space = self._env.observation_space
        unwrapped = self._env.unwrapped
        dt = getattr(unwrapped, "dt", None)
        fps = self._env.metadata.get("render_fps")
        self.control_fps = float(1.0 / dt if dt else fps or 30.0)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        options = {k: v for k, v in (options or {}).items() if k != "episode_index"} or None  # runner's, not the env's
        obs, info = self._env.reset(seed=seed, options=options)
        info = dict(info)
        info["is_success"] = self._success(info)
        return self._observation(obs), info

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self._env.step(action)
        info = dict(info)
        info["is_success"] = self._success(info)
        return self._observation(obs), float(reward), bool(terminated), bool(truncated), info

    def render(self) -> np.ndarray:
        if self._frame is None:
            from gymnasium.error import DependencyNotInstalled

            try:
                self._frame = np.asarray(self._env.render())
            except DependencyNotInstalled as exc:
                raise MissingDependencyError(f"{self.task.name} cannot render: {exc}") from None
        return self._frame

    def close(self) -> None:
        self._env.close()

    def _success(self, info: Mapping[str, Any]) -> bool:
        return bool(np.any(info.get(self.success_key, False)))

    def _observation(self, raw: Any) -> dict[str, Any]:
        self._frame = None
        obs = dict(raw) if isinstance(raw, Mapping) else {AGENT_POS: np.asarray(raw)}
        if isinstance(obs.get(PIXELS), Mapping):
            obs[PIXELS] = rename_cameras(obs[PIXELS], self.camera_map)
        if self.obs_keys is not None:
            obs = {k: v for k, v in obs.items() if k in self.obs_keys}
        if self.obs_keys is not None and PIXELS in self.obs_keys and PIXELS not in obs:
            obs[PIXELS] = self.render()
        return obs
