"""`random`: uniform samples from the env's action space, seeded with the episode's seed.

Episode k of a task always gets the same actions (seed `eval.seed + k`), whatever slot or worker runs it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from runner.policies.base import EpisodeStart, PerEnvBatch, PerEnvPolicy
from runner.spec import EnvSpec, PolicySpec


class RandomPolicy(PerEnvPolicy):
    """Per-env policy: `action_space.sample()` from a copy of the space seeded with the episode seed."""

    def __init__(self) -> None:
        self._space: Any = None

    def reset(self, start: EpisodeStart) -> None:
        self._space = copy.deepcopy(start.action_space)
        self._space.seed(start.seed)

    def act(self, observation: Mapping[str, Any]) -> np.ndarray:
        return np.asarray(self._space.sample())


def make(policy: PolicySpec, env: EnvSpec) -> PerEnvBatch:
    return PerEnvBatch(RandomPolicy, frozenset())
