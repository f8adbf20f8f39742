"""Policy adapters, one per `policy.type`, behind the protocol in `runner.policies.base`.

Each adapter module has `make(policy: PolicySpec, env: EnvSpec) -> Policy`; heavy imports (torch,
lerobot, simulators) happen lazily inside it.
"""

from __future__ import annotations

import difflib
import importlib

from runner.errors import ConfigError
from runner.policies.base import EpisodeStart, PerEnvBatch, PerEnvPolicy, Policy
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
    module_name = ADAPTERS.get(policy.type)
    if module_name is None:
        close = difflib.get_close_matches(policy.type, list(ADAPTERS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown policy type {policy.type!r}{hint} (known: {', '.join(ADAPTERS)})")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise ConfigError(f"policy type {policy.type!r} has no adapter in this installation "
                          f"({module_name} is missing)") from None
    return module.make(policy, env)


__all__ = ["ADAPTERS", "EpisodeStart", "PerEnvBatch", "PerEnvPolicy", "Policy", "make_policy"]
