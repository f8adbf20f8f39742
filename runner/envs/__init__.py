"""Env families (`env.type`), one package each: a light descriptor in its `__init__` (runner.adapters: catalog,
kwargs schema, what it needs) and the adapter that builds envs in its `adapter.py` (the protocol is
`runner.envs.base`). This package imports nothing heavy: descriptors are read by `runner validate` without a
simulator.
"""

from __future__ import annotations

import functools
from typing import Any

from runner.adapters import checked_class, runtime


@functools.cache
def adapter_class(env_type: str) -> Any:
    """The `EnvAdapter` subclass registered for `env.type`, its hooks checked against the base class; ConfigError
    for an unknown type (with a did-you-mean), a missing plugin, or an adapter that is not a compatible subclass."""
    from runner.envs.base import REQUIRED_HOOKS, EnvAdapter

    return checked_class("env", env_type, runtime("env", env_type), EnvAdapter, REQUIRED_HOOKS)


def get_adapter(env_type: str) -> Any:
    """An adapter for `env.type` (see `adapter_class`)."""
    return adapter_class(env_type)()


def __getattr__(name: str) -> Any:  # the protocol's names, imported when asked for (they need gymnasium)
    if name in ("AGENT_POS", "ENV_STATE", "OBSERVATION_KEYS", "PIXELS", "EnvAdapter", "TaskEnv"):
        from runner.envs import base

        return getattr(base, name)
    raise AttributeError(name)


__all__ = ["AGENT_POS", "ENV_STATE", "OBSERVATION_KEYS", "PIXELS", "EnvAdapter", "TaskEnv", "adapter_class", "get_adapter"]
