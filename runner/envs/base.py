"""The env adapter protocol: what the engine needs from a simulator family.

An adapter runs in two places:
- in the main process, cheaply and without importing the simulator: `check()`, `tasks()`, `max_steps()`;
- inside a worker process: `make()`, which imports the simulator and returns one task's env.

The env `make()` returns is a Gymnasium env (`TaskEnv`) with LeRobot's observation conventions:

- `reset(seed=k)` -> `(observation, info)`; the episode is fully determined by the seed, whatever
  the env ran before (so an env can be reused for the next episode of its task); the engine also
  passes `options={"episode_index": k}` (LIBERO picks its fixed init state k from it);
- `step(action)` -> `(observation, reward, terminated, truncated, info)` with `info["is_success"]` (left out by
  an env that cannot tell: the run then says its env reports no success instead of a silent 0 %);
- `render()` -> the RGB video frame (H, W, 3) uint8 of the current state;
- `control_fps`: control steps per simulated second (videos are written at this rate).

Observation keys (only those requested are produced, so images are rendered only when needed):
- `pixels`: one uint8 HWC image, or a dict camera name -> image when `camera_name_mapping` is set;
- `agent_pos`: the robot state a policy sees (LeRobot's `observation.state`);
- `environment_state`: the full simulator state (LeRobot's `observation.env_state`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym

from runner.errors import ConfigError
from runner.envs.state import SimState, default_state
from runner.spec import EnvSpec
from runner.tasks import TaskRef, repeated_item

PIXELS = "pixels"
AGENT_POS = "agent_pos"
ENV_STATE = "environment_state"
OBSERVATION_KEYS = (PIXELS, AGENT_POS, ENV_STATE)



class TaskEnv(gym.Env):
    """One task's env as the engine drives it (see the module docstring)."""

    task: TaskRef
    control_fps: float = 30.0


class EnvAdapter:
    """One simulator family (`env.type` in a spec). Subclass it: `tasks`, `max_steps` and `make` are required,
    every other hook has a default. A family's adapter class is checked when it is first looked up
    (`runner.envs.adapter_class`): not a subclass, or a hook whose parameters differ from these, is refused
    with the family's name."""

    name: ClassVar[str] = ""
    # Modules a forkserver may import before forking workers (no GL context or thread at import).
    preload: ClassVar[tuple[str, ...]] = ()

    def check(self) -> None:
        """Raise `MissingDependencyError` (with install advice) when the simulator is not installed. Default:
        nothing to check (the family needs only runner's own dependencies)."""

    def tasks(self, env: EnvSpec) -> list[TaskRef]:
        """The tasks `env.task` names (groups expanded, `env.task_ids` applied), with their task text."""
        raise NotImplementedError

    def preflight(self, env: EnvSpec) -> None:
        """In the main process, before any output is written or worker started: raise `MissingDependencyError` /
        `ConfigError` for anything a run would need and lack (data files, assets), so that a missing dependency
        never leaves an empty ledger behind. Default: the family needs no data of its own."""

    def needs_gl(self, env: EnvSpec, obs_keys: frozenset[str] | None, video: bool) -> bool:
        """Whether the run renders with MuJoCo's OpenGL (images for the policy, or videos); the engine then checks
        offscreen GL first (runner.envs.gl). Default: it never does."""
        return False

    def provides(self, env: EnvSpec) -> Any:
        """A `runner.contract.EnvProvides`: what the env gives the policy (observation keys after camera_name_mapping,
        with shapes, and the action size), known from the spec alone without importing the simulator; the pre-run
        "contract" step checks the policy's declared inputs against it. Default: None (unknown: not checked)."""
        return None

    def max_steps(self, task: TaskRef, env: EnvSpec) -> int:
        """Episode length cap: `env.max_steps` or the benchmark's own limit."""
        raise NotImplementedError

    def make(self, task: TaskRef, env: EnvSpec, *, obs_keys: frozenset[str] | None, video: bool) -> TaskEnv:
        """Build the task's env (inside the worker). `obs_keys`: keys the policy needs (None: all the env
        offers); `video`: whether `render()` will be called for video frames."""
        raise NotImplementedError

    def prepare(self, env: EnvSpec, *, assets_from: Path | None = None, copy: bool = False,
                say: Callable[[str], None] = print) -> bool:
        """`runner prepare`: install the data the family needs (e.g. LIBERO's assets), from `assets_from` when
        given (linked, or copied with `copy`), saying what it does with `say`. Returns False when there is nothing
        to prepare (the default: the family's package ships what it needs)."""
        return False

    def state(self, env: TaskEnv, observation: Any) -> SimState:
        """The simulator's state now; called right after `reset()` in the worker, its digest is the episode's
        initial state in the ledger (runner.envs.state). Default: MuJoCo's full physics state when the env is built
        on MuJoCo (found on the env or the env it wraps), else the observation. A family with task state outside
        the simulator (a goal drawn at reset) appends it."""
        return default_state(env, observation)

    def asset_dirs(self, env: EnvSpec) -> dict[str, Path]:
        """The directories of data files the family loads (scenes, meshes, task files), by name; their content is
        hashed into the run's fingerprint (runner.engine.fingerprint; cached, so a run pays for it once per asset
        set). Default: none (the family's package holds nothing that is not code)."""
        return {}


REQUIRED_HOOKS = ("tasks", "max_steps", "make")


def select_task_ids(group: str, names: Sequence[str], task_ids: Sequence[int] | None) -> list[tuple[int, str]]:
    """(task id, name) pairs of a group, keeping only `task_ids` when given."""
    if task_ids is None:
        return list(enumerate(names))
    out = []
    for task_id in task_ids:
        if task_id >= len(names):
            raise ConfigError(f"env.task_ids: task id {task_id} is out of range for {group!r} "
                              f"(ids 0..{len(names) - 1})")
        out.append((task_id, names[task_id]))
    return out


def unique_groups(items: Sequence[str]) -> list[str]:
    """The comma-list items of `env.task`, refusing duplicates (they would collide in the results)."""
    twice = repeated_item(items)
    if twice is not None:
        raise ConfigError(f"env.task lists {twice!r} twice")
    if not items:
        raise ConfigError("env.task names no task")
    return list(items)


def renders(obs_keys: frozenset[str] | None, video: bool) -> bool:
    """Whether an env renders images: for the policy (pixels requested) or for videos."""
    return video or wants(obs_keys, PIXELS)


def wants(obs_keys: frozenset[str] | None, key: str) -> bool:
    """Whether an observation key was requested (None requests every key)."""
    return obs_keys is None or key in obs_keys


def rename_cameras(images: Mapping[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    """Apply `camera_name_mapping` (simulator name -> name the policy sees) to a dict of images."""
    return {mapping.get(name, name): image for name, image in images.items()}
