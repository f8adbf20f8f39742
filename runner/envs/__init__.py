"""Env families (`env.type`), one package each: a light descriptor in its `__init__` (runner.adapters: catalog,
kwargs schema, what it supports and needs) and the adapter that builds envs in its `adapter.py` (the protocol is
`runner.envs.base`). This package imports nothing heavy: descriptors are read by `runner validate` without a
simulator.
"""

from __future__ import annotations

from typing import Any

from runner.adapters import runtime


def get_adapter(env_type: str) -> Any:
    """The adapter for `env.type`; ConfigError for an unknown type (with a did-you-mean) or a missing plugin."""
    return runtime("env", env_type)()


def __getattr__(name: str) -> Any:  # the protocol's names, imported when asked for (they need gymnasium)
    if name in ("AGENT_POS", "ENV_STATE", "OBSERVATION_KEYS", "PIXELS", "EnvAdapter", "TaskEnv"):
        from runner.envs import base

        return getattr(base, name)
    raise AttributeError(name)


__all__ = ["AGENT_POS", "ENV_STATE", "OBSERVATION_KEYS", "PIXELS", "EnvAdapter", "TaskEnv", "get_adapter"]
