"""Env adapters, one per simulator family, behind the protocol in `runner.envs.base`.

Adding a simulator: one module with an adapter class + one line in `ADAPTERS` + a YAML spec.
Adapter modules import their simulator lazily, so this registry imports nothing heavy.
"""

from __future__ import annotations

from runner.envs.base import AGENT_POS, ENV_STATE, OBSERVATION_KEYS, PIXELS, EnvAdapter, TaskEnv
from runner.registry import import_registered

# env.type -> "module:class"
ADAPTERS: dict[str, str] = {
    "metaworld": "runner.envs.metaworld:MetaWorldAdapter",
    "gym": "runner.envs.gym_env:GymAdapter",
    "libero": "runner.envs.libero:LiberoAdapter",
}


def get_adapter(env_type: str) -> EnvAdapter:
    """The adapter for `env.type`; ConfigError for an unknown type."""
    module, class_name = import_registered("env", env_type, ADAPTERS)
    return getattr(module, class_name)()


__all__ = ["ADAPTERS", "AGENT_POS", "ENV_STATE", "OBSERVATION_KEYS", "PIXELS", "EnvAdapter", "TaskEnv", "get_adapter"]
