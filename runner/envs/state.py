"""A simulator's state as one float64 vector, and its hash: what makes "same seed" checkable as "same start".

An episode's *initial state* is taken right after `reset()` (runner.envs.base.EnvAdapter.state) and written to the
ledger as `<kind>:<16 hex digits>`, the sha256 of the vector's bytes. Kinds:

- `physics`: MuJoCo's full physics state (time, qpos, qvel, actuator activations, mocap bodies, equality constraints,
  user data: `mj_getState` with FULLPHYSICS | MOCAP | EQ_ACTIVE | USERDATA), plus the family's task state kept outside
  MuJoCo (Meta-World's goal and object layout). Controls and warm-start accelerations are left out: they are the
  previous episode's, not part of where this one starts.
- `observation`: engines runner cannot read (pymunk, Box2D, anything else): the first observation's arrays, images
  left out when there is anything else (their pixels depend on the renderer, not only on the start).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

PHYSICS = "physics"
OBSERVATION = "observation"
HEX_DIGITS = 16


@dataclass(frozen=True)
class SimState:
    """A state as `kind` (PHYSICS, OBSERVATION) and a flat float64 vector."""

    kind: str
    vector: np.ndarray

    @property
    def digest(self) -> str:
        """`<kind>:<16 hex digits of the sha256 of the vector's little-endian float64 bytes>`."""
        data = np.ascontiguousarray(self.vector, dtype="<f8").tobytes()
        return f"{self.kind}:{hashlib.sha256(data).hexdigest()[:HEX_DIGITS]}"


def mujoco_state(model: Any, data: Any, *extra: Any) -> SimState:
    """MuJoCo's full physics state of `data` (see the module docstring), `extra` arrays appended (task state)."""
    import mujoco

    what = (mujoco.mjtState.mjSTATE_FULLPHYSICS | mujoco.mjtState.mjSTATE_MOCAP_POS
            | mujoco.mjtState.mjSTATE_MOCAP_QUAT | mujoco.mjtState.mjSTATE_EQ_ACTIVE | mujoco.mjtState.mjSTATE_USERDATA)
    state = np.empty(mujoco.mj_stateSize(model, what), dtype=np.float64)
    mujoco.mj_getState(model, data, state, what)
    parts = [state, *(np.asarray(e, dtype=np.float64).ravel() for e in extra if e is not None)]
    return SimState(PHYSICS, np.concatenate(parts))


def find_mujoco(env: Any) -> tuple[Any, Any] | None:
    """(MjModel, MjData) of an env built on MuJoCo: Gymnasium's MujocoEnv (`model`, `data`), dm_control
    (`physics`), robosuite (`sim`); looked for on the env and its unwrapped env. None: not MuJoCo."""
    try:
        import mujoco
    except ImportError:
        return None
    seen: list[Any] = []
    inner = getattr(getattr(env, "unwrapped", None), "_env", None)  # a TaskEnv's wrapped env (Gymnasium's wrappers
    for candidate in (env, getattr(env, "unwrapped", None), inner, getattr(inner, "unwrapped", None)):  # hide it)
        if candidate is None or any(candidate is s for s in seen):
            continue
        seen.append(candidate)
        for model_of, data_of in ((lambda e: e.model, lambda e: e.data),
                                  (lambda e: e.physics.model.ptr, lambda e: e.physics.data.ptr),
                                  (lambda e: e.sim.model._model, lambda e: e.sim.data._data)):
            try:
                model, data = model_of(candidate), data_of(candidate)
            except Exception:  # noqa: BLE001 - not this kind of env
                continue
            if isinstance(model, mujoco.MjModel) and isinstance(data, mujoco.MjData):
                return model, data
    return None


def observation_state(observation: Any) -> SimState:
    """The OBSERVATION fallback: every array of the observation, flattened in key order, images (uint8 arrays of
    2+ dimensions) only when there is nothing else."""
    arrays = sorted(_arrays(observation, ""), key=lambda item: item[0])
    plain = [a for _, a in arrays if not _is_image(a)]
    chosen = plain or [a for _, a in arrays]
    vector = np.concatenate([a.astype(np.float64).ravel() for a in chosen]) if chosen else np.zeros(0)
    return SimState(OBSERVATION, vector)


def default_state(env: Any, observation: Any) -> SimState:
    """What EnvAdapter.state does unless a family says otherwise: MuJoCo's physics when the env is built on MuJoCo,
    else the first observation."""
    found = find_mujoco(env)
    return mujoco_state(*found) if found is not None else observation_state(observation)


def _arrays(value: Any, prefix: str) -> list[tuple[str, np.ndarray]]:
    if isinstance(value, Mapping):
        out = []
        for key, item in value.items():
            out += _arrays(item, f"{prefix}/{key}")
        return out
    if isinstance(value, tuple | list):
        out = []
        for i, item in enumerate(value):
            out += _arrays(item, f"{prefix}/{i}")
        return out
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - not numeric: not part of the state
        return []
    return [(prefix, array)] if array.dtype.kind in "biuf" else []


def _is_image(array: np.ndarray) -> bool:
    return array.dtype == np.uint8 and array.ndim >= 2


__all__ = ["OBSERVATION", "PHYSICS", "SimState", "default_state", "find_mujoco", "mujoco_state", "observation_state"]
