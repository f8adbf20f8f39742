"""`python`: a policy from the user's code, `policy.path: module:factory`.

`factory(**policy.kwargs)` returns either
- a batched policy with the protocol of `runner.policies.base.Policy` (`select_action(observation,
  task_texts, slots)` required; `reset(starts)`, `observation_keys`, `take_queued(slot)`, `contract()`,
  `max_horizon()` with `select_chunk(observation, task_texts, slots, horizon)` (action chunks for `runner serve`),
  `close()` optional), run in the main process; or
- a per-env policy (`act(observation)`, optional `reset(start)`, `observation_keys` and `contract()`), which the
  engine may build inside each worker (the factory is then imported there).

`contract()` returns a `runner.contract.PolicyContract` (what it reads and returns, checked against the env before
the first episode) or None.

The module is imported from the current directory or the installed packages.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from runner.contract import PolicyContract
from runner.errors import ConfigError, EvaluationError, RunnerError
from runner.policies.base import EpisodeStart, PerEnvBatch, PerEnvPolicy, Policy
from runner.spec import EnvSpec, PolicySpec
from runner.text import cut, with_article


def load_factory(path: str, cwd: str | None = None) -> Callable[..., Any]:
    """The callable named by `module:factory`; ConfigError when it cannot be found."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"policy.path {path!r} must be module:factory")
    cwd = cwd or os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"policy.path {path!r}: cannot import {module_name!r} ({exc})") from None
    except (Exception, SystemExit) as exc:  # the user's module failed (or called sys.exit) while importing
        raise EvaluationError(f"policy.path {path!r}: importing {module_name!r} raised "
                              f"{type(exc).__name__}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"policy.path {path!r}: {module_name!r} has no callable {attr!r}")
    return factory


def build(path: str, kwargs: Mapping[str, Any], cwd: str | None = None) -> Any:
    factory = load_factory(path, cwd)
    try:
        return factory(**kwargs)
    except RunnerError:
        raise
    except (Exception, SystemExit) as exc:  # sys.exit() in user code is an error, never a quiet exit 0
        raise EvaluationError(f"policy factory {path!r} raised {type(exc).__name__}: {exc}") from None


class UserPerEnv(PerEnvPolicy):
    """A user's per-env policy with the optional `reset` filled in."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def reset(self, start: EpisodeStart) -> None:
        if hasattr(self.inner, "reset"):
            self.inner.reset(start)

    def act(self, observation: Mapping[str, Any]) -> np.ndarray:
        return self.inner.act(observation)


def _per_env(path: str, kwargs: dict[str, Any], cwd: str) -> PerEnvPolicy:
    return UserPerEnv(build(path, kwargs, cwd))


class UserBatched(Policy):
    """A user's batched policy with the optional methods filled in."""

    def __init__(self, inner: Any, where: str = "the policy") -> None:
        self.inner = inner
        self.where = where
        self.observation_keys = declared_keys(inner, where)

    def reset(self, starts: Sequence[EpisodeStart]) -> None:
        if hasattr(self.inner, "reset"):
            self.inner.reset(starts)

    def select_action(self, observation: Mapping[str, Any], task_texts: Sequence[str],
                      slots: Sequence[int]) -> np.ndarray:
        return self.inner.select_action(observation, task_texts, slots)

    def take_queued(self, slot: int) -> np.ndarray | None:
        take = getattr(self.inner, "take_queued", None)  # the user's object: its optional methods are duck-typed
        return take(slot) if callable(take) else None

    def contract(self) -> PolicyContract | None:
        return declared_contract(self.inner, self.where)

    def max_horizon(self) -> int:
        most = getattr(self.inner, "max_horizon", None)
        if not callable(most):
            return 1
        value = most()
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{self.where}: the policy's max_horizon() must return an integer >= 1, not {value!r}")
        return value

    def select_chunk(self, observation: Mapping[str, Any], task_texts: Sequence[str], slots: Sequence[int],
                     horizon: int) -> np.ndarray:
        if not callable(getattr(self.inner, "select_chunk", None)):
            return super().select_chunk(observation, task_texts, slots, horizon)
        return self.inner.select_chunk(observation, task_texts, slots, horizon)

    def close(self) -> None:
        if hasattr(self.inner, "close"):
            self.inner.close()


# optional methods of a batched policy
BATCHED_OPTIONAL = ("reset", "take_queued", "contract", "max_horizon", "select_chunk", "close")
PER_ENV_OPTIONAL = ("reset", "contract")  # and of a per-env one
MAX_KEYS = 256


def check_declared(obj: Any, where: str, methods: Sequence[str]) -> None:
    """What the user's object declares is checked once, when it is built (ConfigError naming the attribute), so a bad
    declaration never surfaces as a traceback in the middle of a run: optional methods callable, observation keys
    a collection of names."""
    for name in methods:
        value = getattr(obj, name, None)
        if value is not None and not callable(value):
            kind = with_article(type(value).__name__)
            raise ConfigError(f"{where}: the policy's {name} must be a method, not {kind}")
    declared_keys(obj, where)


def declared_keys(obj: Any, where: str) -> frozenset[str] | None:
    """The policy's `observation_keys` (None: every key): a list, tuple or set of at most MAX_KEYS strings."""
    keys = getattr(obj, "observation_keys", None)
    if keys is None:
        return None
    if not isinstance(keys, list | tuple | set | frozenset) or len(keys) > MAX_KEYS or \
            not all(isinstance(k, str) and 0 < len(k) <= 200 for k in keys):
        shown = cut(repr(keys), 80)
        raise ConfigError(f"{where}: the policy's observation_keys must be a list of observation key names (strings, "
                          f"at most {MAX_KEYS}), like ['pixels', 'agent_pos'], not {shown}")
    return frozenset(keys)


def declared_contract(obj: Any, where: str) -> PolicyContract | None:
    """The policy's `contract()` (None when it has none): a `runner.contract.PolicyContract` or None."""
    method = getattr(obj, "contract", None)
    if method is None:
        return None
    try:
        found = method()
    except RunnerError:
        raise
    except Exception as exc:  # the user's code
        raise EvaluationError(f"{where}: the policy's contract() raised {type(exc).__name__}: {exc}") from None
    if found is not None and not isinstance(found, PolicyContract):
        raise ConfigError(f"{where}: the policy's contract() must return a runner.contract.PolicyContract or None, "
                          f"not {with_article(type(found).__name__)}")
    return found


def make(policy: PolicySpec, env: EnvSpec) -> Any:
    if not policy.path:
        raise ConfigError("policy.type python needs policy.path: module:factory")
    kwargs = dict(policy.kwargs)
    obj = build(policy.path, kwargs)
    where = f"policy.path {policy.path!r}"
    if callable(getattr(obj, "select_action", None)):
        check_declared(obj, where, BATCHED_OPTIONAL)
        return UserBatched(obj, where)
    if callable(getattr(obj, "act", None)):
        check_declared(obj, where, PER_ENV_OPTIONAL)
        factory = functools.partial(_per_env, policy.path, kwargs, os.getcwd())
        return PerEnvBatch(factory, declared_keys(obj, where), contract=declared_contract(obj, where))
    raise ConfigError(f"policy.path {policy.path!r}: the factory must return an object with "
                      f"select_action(observation, task_texts, slots) or act(observation)")
