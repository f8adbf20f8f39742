"""Env adapters, one per simulator family, behind the protocol in `runner.envs.base`.

Adding a simulator: one module with an adapter class + one line in `ADAPTERS` + a YAML spec.
Adapter modules import their simulator lazily, so this registry imports nothing heavy.
"""

from __future__ import annotations

import difflib
import importlib

from runner.envs.base import AGENT_POS, ENV_STATE, OBSERVATION_KEYS, PIXELS, EnvAdapter, TaskEnv
from runner.errors import ConfigError

# env.type -> "module:class"
ADAPTERS: dict[str, str] = {
    "metaworld": "runner.envs.metaworld:MetaWorldAdapter",
    "gym": "runner.envs.gym_env:GymAdapter",
    "libero": "runner.envs.libero:LiberoAdapter",
}


def get_adapter(env_type: str) -> EnvAdapter:
    """The adapter for `env.type`; ConfigError for an unknown type."""
    target = ADAPTERS.get(env_type)
    if target is None:
        close = difflib.get_close_matches(env_type, list(ADAPTERS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown env type {env_type!r}{hint} (known: {', '.join(ADAPTERS)})")
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise ConfigError(f"env type {env_type!r} has no adapter in this installation "
                          f"({module_name} is missing)") from None
    return getattr(module, class_name)()


__all__ = ["ADAPTERS", "AGENT_POS", "ENV_STATE", "OBSERVATION_KEYS", "PIXELS", "EnvAdapter", "TaskEnv", "get_adapter"]
