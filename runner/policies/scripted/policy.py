"""`scripted`: Meta-World's own expert for each task (`metaworld.policies`), reading the raw state."""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from runner.errors import ConfigError, MissingDependencyError
from runner.policies.base import ENV_STATE, EpisodeStart, PerEnvBatch, PerEnvPolicy
from runner.policies.scripted import EXPERTS
from runner.spec import EnvSpec, PolicySpec


class ScriptedExpert(PerEnvPolicy):
    """Per-env policy: the expert of the episode's task, applied to `environment_state` (39 numbers)."""

    def __init__(self) -> None:
        self._experts: dict[str, Any] = {}
        self._expert: Any = None

    def reset(self, start: EpisodeStart) -> None:
        name = start.task.name
        if name not in self._experts:
            self._experts[name] = expert_for(name)
        self._expert = self._experts[name]

    def act(self, observation: Mapping[str, Any]) -> np.ndarray:
        return self._expert.get_action(observation[ENV_STATE])


def expert_for(task_name: str) -> Any:
    """An instance of the task's expert class from `metaworld.policies`."""
    import metaworld.policies

    # The experts warn at every step whose raw response exceeds [-1, 1] (the env clips it).
    warnings.filterwarnings("ignore", message=r"Constant\(s\) may be too high", category=UserWarning)
    expert = EXPERTS.get(task_name)
    if expert is None:
        raise ConfigError(f"no scripted expert for {task_name!r} (scripted experts exist for Meta-World tasks)")
    return getattr(metaworld.policies, expert)()


def make(policy: PolicySpec, env: EnvSpec) -> PerEnvBatch:
    """The spec was checked against the type's descriptor when loaded (Meta-World only, no kwargs)."""
    if importlib.util.find_spec("metaworld") is None:
        raise MissingDependencyError("the scripted experts come with Meta-World: pip install 'runner[metaworld]'")
    return PerEnvBatch(ScriptedExpert, frozenset({ENV_STATE}), preload=("metaworld.policies",))
