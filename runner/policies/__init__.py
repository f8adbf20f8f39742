"""Policy types (`policy.type`), one package each: a light descriptor in its `__init__` (runner.adapters) and the
adapter in its `policy.py`, with `make(policy: PolicySpec, env: EnvSpec) -> Policy` (the protocol is
`runner.policies.base`); the descriptor may name its cheap checks (`PolicyType.preflight`). This package imports nothing heavy:
descriptors are read by `runner validate` without NumPy, torch or a simulator.
"""

from __future__ import annotations

import functools
from typing import Any

from runner.adapters import checked_class, load, policy_type, runtime


def make_policy(policy: Any, env: Any) -> Any:
    """Build the spec's policy (in the main process): a `Policy` whose class is checked against the base class;
    ConfigError for an unknown type or a `make` that returns something else."""
    built = runtime("policy", policy.type)(policy, env)
    policy_class(policy.type, type(built))
    return built


@functools.cache
def policy_class(name: str, cls: type) -> type:
    """`cls`, checked once as what policy type `name`'s `make` may return."""
    from runner.policies.base import Policy

    return checked_class("policy", name, cls, Policy, ("reset", "select_action"))


def preflight_policy(policy: Any) -> dict[str, Any]:
    """The type's cheap checks (`PolicyType.preflight`: installed, options, a hub id or a policy server reachable),
    before any simulator, checkpoint or output. Returns what the check learnt of the policy's identity for the
    run's provenance (a policy server's own account), or {}."""
    target = policy_type(policy.type).preflight
    if target is None:
        return {}
    found = load("policy", policy.type, target)(policy)
    return dict(found) if isinstance(found, dict) else {}


def __getattr__(name: str) -> Any:  # the protocol's names, imported when asked for (they need gymnasium)
    if name in ("EpisodeStart", "PerEnvBatch", "PerEnvPolicy", "Policy"):
        from runner.policies import base

        return getattr(base, name)
    raise AttributeError(name)


__all__ = ["EpisodeStart", "PerEnvBatch", "PerEnvPolicy", "Policy", "make_policy", "preflight_policy"]
