"""Policy adapters, one per `policy.type`, behind the protocol in `runner.policies.base`.

Each adapter module has `make(policy: PolicySpec, env: EnvSpec) -> Policy`; heavy imports (torch,
lerobot, simulators) happen lazily inside it.
"""

from __future__ import annotations

from runner.policies.base import EpisodeStart, PerEnvBatch, PerEnvPolicy, Policy
from runner.registry import import_registered
from runner.spec import EnvSpec, PolicySpec

# policy.type -> module with make()
ADAPTERS: dict[str, str] = {
    "scripted": "runner.policies.scripted",
    "random": "runner.policies.random",
    "python": "runner.policies.python",
    "lerobot": "runner.policies.lerobot",
}


def make_policy(policy: PolicySpec, env: EnvSpec) -> Policy:
    """Build the spec's policy (in the main process); ConfigError for an unknown type."""
    module, _ = import_registered("policy", policy.type, ADAPTERS)
    return module.make(policy, env)


def preflight_policy(policy: PolicySpec) -> None:
    """An adapter's cheap checks (`preflight(policy)`: installed, options, a hub id reachable), before any
    simulator, checkpoint or output; adapters without one have nothing to check early."""
    module, _ = import_registered("policy", policy.type, ADAPTERS)
    check = getattr(module, "preflight", None)
    if check is not None:
        check(policy)


__all__ = ["ADAPTERS", "EpisodeStart", "PerEnvBatch", "PerEnvPolicy", "Policy", "make_policy", "preflight_policy"]
