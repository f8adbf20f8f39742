"""What a policy returns, checked before it reaches the simulator: every action, every step.

An action must be a number array of the env's action shape: no object arrays or ragged lists, no complex or
string dtype, no NaN or infinity, and for discrete spaces an integer in range. Anything else is a policy error
(`EvaluationError`, the run stops with one message naming the episode): a simulator fed NaN does not fail, it
quietly produces an episode that looks like an ordinary failure. Values outside a Box's bounds are allowed:
envs clip them, as they do for every policy in the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from runner.errors import EvaluationError
from runner.text import with_article


class ActionSpec:
    """What an action of one env must look like (built once per episode from its action space)."""

    def __init__(self, space: Any) -> None:
        self.space = space
        self.shape = tuple(getattr(space, "shape", None) or ())
        self.discrete: tuple[np.ndarray, np.ndarray] | None = None  # inclusive (low, high) for integer spaces
        self.kinds = "iuf"
        if isinstance(space, gym.spaces.Discrete):
            self.kinds = "iu"
            self.discrete = (np.asarray(space.start), np.asarray(space.start + space.n - 1))
        elif isinstance(space, gym.spaces.MultiDiscrete):
            self.kinds = "iu"
            self.discrete = (np.asarray(space.start), np.asarray(space.start + space.nvec - 1))
        elif isinstance(space, gym.spaces.MultiBinary):
            self.kinds = "biu"
            self.discrete = (np.asarray(0), np.asarray(1))

    def problem(self, action: np.ndarray) -> str | None:
        """Why `action` (already an array) is not an action of this space, or None."""
        if action.dtype.kind not in self.kinds:
            wanted = "integers" if "f" not in self.kinds else "numbers"
            return f"an action of dtype {action.dtype} (the env takes {wanted})"
        if action.shape != self.shape:
            return f"an action of shape {action.shape}; the env expects shape {self.shape}"
        if action.dtype.kind == "f" and not _finite(action):
            bad = np.flatnonzero(~np.isfinite(action.reshape(-1)))
            return f"a non-finite action ({action.reshape(-1)[bad[0]]} at index {int(bad[0])}: NaN or infinity)"
        if self.discrete is not None and ((action < self.discrete[0]) | (action > self.discrete[1])).any():
            return f"the action {_short(action)}, outside the env's range {_short(self.discrete[0])}.." \
                   f"{_short(self.discrete[1])}"
        return None


def _finite(array: np.ndarray) -> bool:
    """No NaN or infinity (for the few numbers of one action, plain Python is 5x faster than NumPy's ufunc)."""
    if array.size <= 64:
        return all(map(math.isfinite, array.ravel().tolist()))
    return bool(np.isfinite(array).all())


def as_array(value: Any) -> np.ndarray | None:
    """`value` as a NumPy array, or None when it is not one (ragged lists, objects NumPy cannot convert)."""
    try:
        array = np.asarray(value)
    except Exception:  # ragged lists, objects NumPy cannot convert, tensors that require grad
        return None
    return None if array.dtype.kind in "OSUVc" else array


def check_action(action: Any, spec: ActionSpec, where: Callable[[], str], policy: str = "policy") -> np.ndarray:
    """The action as an array, or EvaluationError naming the episode (`where()`, called only for a message)."""
    array = as_array(action)
    problem = f"an action that is not a number array ({describe(action)})" if array is None else spec.problem(array)
    if problem:
        raise EvaluationError(f"the {policy} returned {problem} in {where()}")
    return array  # type: ignore[return-value]


def check_batch(actions: Any, specs: list[ActionSpec], where: Callable[[int], str],
                policy: str = "policy") -> np.ndarray:
    """A batched policy's actions, one row per env: shape (len(specs), *shape), every row checked; `where(i)`
    names row i's episode (called only for a message)."""
    array = as_array(actions)
    n = len(specs)
    if array is None or array.ndim == 0 or array.shape[0] != n:
        shape = "that are not a number array" if array is None else f"of shape {array.shape}"
        raise EvaluationError(f"the {policy} returned actions {shape} ({describe(actions)}) for {n} env"
                              f"{'s' if n != 1 else ''}; expected an array of shape ({n}, "
                              f"{', '.join(map(str, specs[0].shape))})")
    for i, spec in enumerate(specs):
        problem = spec.problem(array[i])
        if problem:
            raise EvaluationError(f"the {policy} returned {problem} (row {i}) in {where(i)}")
    return array


def describe(value: Any) -> str:
    """'a list', 'a ndarray of dtype object': what a policy returned, for a message."""
    kind = type(value).__name__
    dtype = getattr(value, "dtype", None)
    return with_article(kind) + (f" of dtype {dtype}" if dtype is not None else "")


def _short(array: np.ndarray) -> str:
    text = np.array2string(np.asarray(array), threshold=8, max_line_width=120)
    return text if len(text) <= 80 else text[:77] + "..."


__all__ = ["ActionSpec", "as_array", "check_action", "check_batch", "describe"]
