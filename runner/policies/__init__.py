"""Policy types (`policy.type`), one package each: a light descriptor in its `__init__` (runner.adapters) and the
adapter in its `policy.py`, with `make(policy: PolicySpec, env: EnvSpec) -> Policy` (the protocol is
`runner.policies.base`) and optionally `preflight(policy)`, its cheap checks. This package imports nothing heavy:
descriptors are read by `runner validate` without NumPy, torch or a simulator.
"""

from __future__ import annotations

from typing import Any

from runner.adapters import import_target, policy_type, runtime


def make_policy(policy: Any, env: Any) -> Any:
    """Build the spec's policy (in the main process); ConfigError for an unknown type."""
    return runtime("policy", policy.type)(policy, env)


def preflight_policy(policy: Any) -> dict[str, Any]:
    """The adapter's cheap checks (installed, options, a hub id or a policy server reachable), before any simulator,
    checkpoint or output; adapters without a `preflight` have nothing to check early. Returns what the check
    learnt of the policy's identity for the run's provenance (a policy server's own account), or {}."""
    module, _ = import_target("policy", policy.type, policy_type(policy.type).runtime)
    check = getattr(module, "preflight", None)
    found = check(policy) if check is not None else None
    return dict(found) if isinstance(found, dict) else {}


def __getattr__(name: str) -> Any:  # the protocol's names, imported when asked for (they need gymnasium)
    if name in ("EpisodeStart", "PerEnvBatch", "PerEnvPolicy", "Policy"):
        from runner.policies import base

        return getattr(base, name)
    raise AttributeError(name)


__all__ = ["EpisodeStart", "PerEnvBatch", "PerEnvPolicy", "Policy", "make_policy", "preflight_policy"]
