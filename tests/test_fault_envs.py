"""Envs and a policy with injected faults, for the crash-isolation tests (and tests of the injection itself).

`Faulty-v0` is a real MuJoCo env (Gymnasium's InvertedPendulum-v5) registered at import, so a spec names it
`env.task: tests.test_fault_envs:Faulty-v0` and the gym adapter imports this module in the main process and
in every worker. In episodes whose reset seed is in `seeds` (all episodes when `seeds` is null) it faults:

  fault=segfault     os.kill(getpid(), SIGSEGV) at step `at_step`   (a crashing simulator)
  fault=exit         os._exit(1) at step `at_step`
  fault=hang         sleeps for an hour at step `at_step`            (a hung simulator)
  fault=raise        RuntimeError from step `at_step`                (a simulator exception)
  fault=raise_reset  RuntimeError from reset
  fault=import       ModuleNotFoundError when the env is built      (a dependency missing in the workers)
  fault=none         never (the reference runs)

With `once_dir`, each seed faults only the first time it runs (a marker file per seed): a transient fault.
The fault never changes the dynamics, so fault-free episodes equal those of `fault: none`.

`flaky_policy` (python policy, per env): seeded random actions; raises from `act` in every episode whose
index is >= $FAULT_POLICY_RAISE_FROM (when that variable is set): a policy bug that comes and goes with the
environment, so a resumed run can use the same spec.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "Faulty-v0"
FAULTS = ("none", "segfault", "exit", "hang", "raise", "raise_reset", "import")


class Faulty(gym.Wrapper):
    def __init__(self, fault: str = "none", seeds: list[int] | None = (), at_step: int = 3,
                 once_dir: str | None = None, inner: str = "InvertedPendulum-v5", render_mode: str | None = None,
                 max_episode_steps: int | None = None) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        if fault == "import":
            raise ModuleNotFoundError("No module named 'fake_sim_dependency'", name="fake_sim_dependency")
        super().__init__(gym.make(inner, render_mode=render_mode, max_episode_steps=max_episode_steps))
        self.fault = fault
        self.seeds = None if seeds is None else set(seeds)
        self.at_step = at_step
        self.once_dir = once_dir
        self._armed = False
        self._t = 0

    def _fires(self, seed: int | None) -> bool:
        if self.fault == "none" or (self.seeds is not None and seed not in self.seeds):
            return False
        if self.once_dir is None:
            return True
        marker = Path(self.once_dir) / f"seed-{seed}"
        try:
            marker.touch(exist_ok=False)  # atomic: only the first attempt creates it
        except FileExistsError:
            return False
        return True

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        self._armed = self._fires(seed)
        self._t = 0
        if self._armed and self.fault == "raise_reset":
            raise RuntimeError(f"injected reset failure (seed {seed})")
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._t += 1
        if self._armed and self._t == self.at_step:
            if self.fault == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif self.fault == "exit":
                os._exit(1)
            elif self.fault == "hang":
                time.sleep(3600)
            elif self.fault == "raise":
                raise RuntimeError(f"injected step failure at step {self._t}")
        return self.env.step(action)


if ENV_ID not in gym.registry:  # pytest and the adapter may import this module under two names
    gym.register(ENV_ID, entry_point=Faulty, max_episode_steps=1000)


class FlakyPolicy:
    """Per env: seeded uniform actions in [-3, 3]; raises from `act` when $FAULT_POLICY_RAISE_FROM <= episode."""

    observation_keys = ("agent_pos",)

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)
        self.raise_now = False

    def reset(self, start: Any) -> None:
        self.rng = np.random.default_rng(start.seed)
        limit = os.environ.get("FAULT_POLICY_RAISE_FROM")
        self.raise_now = limit is not None and start.episode_index >= int(limit)

    def act(self, observation: Any) -> np.ndarray:
        if self.raise_now:
            raise ValueError("the flaky test policy fails on purpose")
        return self.rng.uniform(-3, 3, size=1).astype(np.float32)


def flaky_policy() -> FlakyPolicy:
    return FlakyPolicy()


# ── the injection itself ──────────────────────────────────────────────────────────────────────────────


def test_without_a_fault_it_is_the_inner_env():
    faulty = gym.make(ENV_ID, fault="none", max_episode_steps=20)
    plain = gym.make("InvertedPendulum-v5", max_episode_steps=20)
    a, _ = faulty.reset(seed=3)
    b, _ = plain.reset(seed=3)
    assert np.array_equal(a, b)
    for _ in range(5):
        a = faulty.step(np.array([0.5], dtype=np.float32))[0]
        b = plain.step(np.array([0.5], dtype=np.float32))[0]
    assert np.array_equal(a, b)


def test_raise_fires_only_on_the_chosen_seeds_and_once(tmp_path):
    env = gym.make(ENV_ID, fault="raise", seeds=[7], at_step=2, once_dir=str(tmp_path))
    env.reset(seed=6)
    for _ in range(3):
        env.step(np.zeros(1, dtype=np.float32))
    env.reset(seed=7)
    env.step(np.zeros(1, dtype=np.float32))
    try:
        env.step(np.zeros(1, dtype=np.float32))
    except RuntimeError as exc:
        assert "injected step failure" in str(exc)
    else:
        raise AssertionError("expected the injected failure")
    env.reset(seed=7)  # the second attempt of the same seed runs clean
    for _ in range(3):
        env.step(np.zeros(1, dtype=np.float32))
