"""`policy.type: random`: the env's action space sampled with the episode's seed (the adapter is `policy.py`)."""

from __future__ import annotations

from runner.adapters import PolicyType

TYPE = PolicyType(
    name="random",
    runtime="runner.policies.random.policy:make",
    summary="Uniform samples from the env's action space, seeded with the episode's seed",
    kwargs_schema={"type": "object", "additionalProperties": False},
    needs_action_space=True,
)
