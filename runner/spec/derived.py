"""What the rest of runner derives from a `Spec`: how results name its policy, the fields that decide its results,
and the environment it runs in."""

from __future__ import annotations

import os
from typing import Any

from runner.adapters import policy_type
from runner.spec.model import Spec, thaw


def policy_label(spec: Spec) -> str:
    """How metrics.json names the policy: its path when its type takes one (lerobot, python), its server's URL
    (remote), else its type."""
    kind = policy_type(spec.policy.type)
    if kind.path and spec.policy.path:
        return spec.policy.path
    if kind.url and spec.policy.url:
        return spec.policy.url
    return spec.policy.type


def run_identity(spec: Spec) -> dict[str, Any]:
    """The spec fields that decide the results (hashed into run.json; see runner.results.runfile)."""
    policy = thaw(spec.policy)
    if policy.get("url") is None:  # a field newer than most run files: hashed only when set
        policy.pop("url", None)
    return {
        "env": thaw(spec.env),
        "policy": policy,
        "eval": {"n_episodes": spec.eval.n_episodes, "seed": spec.eval.seed, "videos": spec.eval.videos},
    }


def apply_environment(spec: Spec) -> None:
    """The spec's `install.env` (e.g. MUJOCO_GL=egl) in this process, unless already set, before any simulator
    loads; workers get the same through WorkerConfig.environ."""
    for key, value in spec.install.env.items():
        os.environ.setdefault(key, str(value))


__all__ = ["apply_environment", "policy_label", "run_identity"]
