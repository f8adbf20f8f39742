"""The policy adapter interface: batched, slot-aware, told what each slot's episode is.

The engine runs `batch_size` slots; each slot runs one episode at a time and starts the next one as
soon as it finishes (continuous scheduling), so slots are at different steps of different episodes,
possibly of different tasks. A policy therefore keeps any per-episode state *per slot*. A policy type's
`make` returns a `Policy` (below: every hook a method with a docstring, the optional ones with a default):

- `reset(starts)`, `select_action(observation, task_texts, slots)`: `observation` is batched like a Gymnasium
  vector env's: every leaf array has a leading batch axis (`pixels` uint8 (B, H, W, 3) or a dict of them,
  `agent_pos` (B, d), `environment_state` (B, d)); returns an array of shape (B, *action_space.shape);
- `observation_keys`: the env observation keys the policy reads (None: all), so envs render images
  only for policies that look at them;
- `take_queued(slot)`: actions already decided (the rest of a chunk); the engine sends them to the slot's worker
  at once, which steps through them without a round trip; the episode is the same as when each was returned by
  its own `select_action`;
- `per_env()`: a picklable factory of a `PerEnvPolicy` (cheap policies: scripted experts, random), which the
  engine may run inside each worker instead of round-tripping every step through the main process (identical
  episodes); `preload` names modules the workers then need (imported once in the forkserver);
- `max_horizon()`, `select_chunk(observation, task_texts, slots, horizon)`: a policy that predicts action chunks
  (ACT, diffusion, pi0, SmolVLA) gives the next `horizon` actions of each row at once (`runner serve` answers
  openpi's clients so); the default serves chunks of one action;
- `contract()`: what it declares it reads and returns (runner.contract: inputs with shapes, action size, chunking),
  checked against what the spec's env gives before the first episode (None: declares nothing, nothing is checked);
- `release(slot)`, `close()`.

Raise `runner.errors.RunnerError` subclasses for user mistakes (they are shown as they are); any other
exception is reported as an evaluation error naming the policy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from runner.adapters import hook_problems
from runner.contract import PolicyContract
from runner.errors import ConfigError
from runner.tasks import TaskRef

# Observation keys (LeRobot's env conventions; the same strings as runner.envs.base, which policies
# do not import): images, robot state, full simulator state.
PIXELS = "pixels"
AGENT_POS = "agent_pos"
ENV_STATE = "environment_state"


@dataclass(frozen=True)
class EpisodeStart:
    """What a slot's new episode is."""

    slot: int
    task: TaskRef
    episode_index: int  # k: the k-th episode of this task
    seed: int  # eval.seed + k; the env is reset with it, seeded policies use it too
    action_space: gym.spaces.Space
    n_slots: int = 1  # slots in the run (its batch size); batched policies may size their forward passes by it


class PerEnvPolicy:
    """A policy for one env at a time (unbatched observations). Subclass it: `reset` and `act` are required,
    the other hooks have defaults."""

    def reset(self, start: EpisodeStart) -> None:
        """A new episode begins (seeded policies draw from `start.seed`)."""
        raise NotImplementedError

    def act(self, observation: Mapping[str, Any]) -> np.ndarray:
        """One action for one (unbatched) observation."""
        raise NotImplementedError

    def episode_end(self, success: bool) -> None:
        """The episode it ran in a worker has ended (a remote policy tells its server). Default: nothing."""

    def close(self) -> None:
        """Release what it holds (a connection). Default: nothing."""


class Policy:
    """A batched, slot-aware policy (see the module docstring). Subclass it: `reset` and `select_action` are
    required, every other hook has a default; a policy type's `make` returns one (checked by
    runner.policies.make_policy)."""

    observation_keys: frozenset[str] | None = None  # the env observation keys it reads (None: all)
    preload: tuple[str, ...] = ()  # modules worker processes import up front when they run `per_env()`'s policies

    def reset(self, starts: Sequence[EpisodeStart]) -> None:
        """New episodes begin in `start.slot` for each start (clear that slot's state only)."""
        raise NotImplementedError

    def select_action(self, observation: Mapping[str, Any], task_texts: Sequence[str],
                      slots: Sequence[int]) -> np.ndarray:
        """One action per row; row i belongs to `slots[i]`."""
        raise NotImplementedError

    def per_env(self) -> Callable[[], PerEnvPolicy] | None:
        """A picklable zero-argument factory of a `PerEnvPolicy` the engine may run inside each worker, or None
        (the default: the policy runs batched in the main process)."""
        return None

    def take_queued(self, slot: int) -> np.ndarray | None:
        """The slot's next actions that are already decided and need no observation, (K, *action shape), removed
        from the policy's state; None (the default) when there are none."""
        return None

    def max_horizon(self) -> int:
        """The most actions `select_chunk` gives per row (a chunked policy's chunk size). Default: 1."""
        return 1

    def select_chunk(self, observation: Mapping[str, Any], task_texts: Sequence[str], slots: Sequence[int],
                     horizon: int) -> np.ndarray:
        """The next `horizon` (<= `max_horizon()`) actions of each row, (B, horizon, *action shape), as `horizon`
        calls of `select_action` on this observation would execute them when the policy's own chunk is that long;
        each slot then starts its next chunk from the next observation. Default: `select_action`'s (horizon 1)."""
        if horizon != 1:
            raise ConfigError(f"this policy predicts one action at a time, not chunks of {horizon}")
        return np.asarray(self.select_action(observation, task_texts, slots))[:, None]

    def runtime(self) -> dict[str, Any]:
        """How a learned policy computes (device, dtype, determinism settings), for the run's fingerprint
        (runner.engine.fingerprint: its stack part). Default: {} (nothing beyond its identity)."""
        return {}

    def contract(self) -> PolicyContract | None:
        """What it declares it reads and returns (runner.contract), checked against what the spec's env gives before
        the first episode. Default: None (declares nothing: nothing is checked)."""
        return None

    def release(self, slot: int) -> None:
        """Forget a slot's state (`runner serve`: its client went away). Default: nothing."""

    def close(self) -> None:
        """Release what it holds (weights, connections). Default: nothing."""


def make_per_env(factory: Callable[[], Any]) -> PerEnvPolicy:
    """A per-env policy from its factory; ConfigError when it is not a `PerEnvPolicy` with compatible hooks."""
    policy = factory()
    _per_env_class(type(policy))
    return policy


@functools.cache
def _per_env_class(cls: type) -> None:
    problems = hook_problems(cls, PerEnvPolicy, ("reset", "act")) if issubclass(cls, PerEnvPolicy) else \
        [f"not a subclass of {PerEnvPolicy.__module__}.PerEnvPolicy"]
    if problems:
        raise ConfigError(f"per-env policy {cls.__module__}.{cls.__qualname__}: " + "; ".join(problems))


def observation_row(observation: Mapping[str, Any], i: int) -> dict[str, Any]:
    """Row i of a batched observation (nested dicts kept)."""
    return {k: observation_row(v, i) if isinstance(v, Mapping) else v[i] for k, v in observation.items()}


def stack_observations(observations: Sequence[Any]) -> Any:
    """Unbatched observations (dicts of arrays, nested dicts kept) stacked along a new leading batch axis."""
    first = observations[0]
    if isinstance(first, Mapping):
        return {k: stack_observations([o[k] for o in observations]) for k in first}
    return np.stack([np.asarray(o) for o in observations])


def signature(observation: Any) -> Any:
    """The keys, shapes and dtypes of an unbatched observation: observations with equal signatures stack."""
    if isinstance(observation, Mapping):
        return tuple((k, signature(v)) for k, v in sorted(observation.items()))
    array = np.asarray(observation)
    return (array.shape, array.dtype.str)


class PerEnvBatch(Policy):
    """A batched `Policy` made of one `PerEnvPolicy` per slot (built lazily by `factory`)."""

    def __init__(self, factory: Callable[[], PerEnvPolicy], observation_keys: frozenset[str] | None,
                 *, offer_per_env: bool = True, preload: tuple[str, ...] = (),
                 contract: PolicyContract | None = None) -> None:
        self.factory = factory
        self.observation_keys = observation_keys
        self.offer_per_env = offer_per_env
        self.preload = preload  # modules worker processes may import up front (no GL context or thread at import)
        self._contract = contract
        self._slots: dict[int, PerEnvPolicy] = {}

    def reset(self, starts: Sequence[EpisodeStart]) -> None:
        for start in starts:
            policy = self._slots.get(start.slot)
            if policy is None:
                policy = self._slots[start.slot] = make_per_env(self.factory)
            policy.reset(start)

    def select_action(self, observation: Mapping[str, Any], task_texts: Sequence[str],
                      slots: Sequence[int]) -> np.ndarray:
        return np.stack([self._slots[slot].act(observation_row(observation, i)) for i, slot in enumerate(slots)])

    def per_env(self) -> Callable[[], PerEnvPolicy] | None:
        return self.factory if self.offer_per_env else None

    def runtime(self) -> dict[str, Any]:
        """How a learned policy computes (device, dtype, determinism settings), for the run's fingerprint
        (runner.engine.fingerprint: its stack part). Default: {} (nothing beyond its identity)."""
        return {}

    def contract(self) -> PolicyContract | None:
        """What the per-env policies declare (given when the batch was made)."""
        return self._contract

    def release(self, slot: int) -> None:
        """Forget a slot's policy (a server's client went away)."""
        _close(self._slots.pop(slot, None))

    def close(self) -> None:
        for policy in self._slots.values():
            _close(policy)
        self._slots.clear()


def _close(policy: PerEnvPolicy | None) -> None:
    if policy is not None:
        policy.close()
