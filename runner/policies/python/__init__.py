"""`policy.type: python`: your own code, `policy.path: module:factory` (the adapter is `policy.py`)."""

from __future__ import annotations

from runner.adapters import PolicyType

TYPE = PolicyType(
    name="python",
    runtime="runner.policies.python.policy:make",
    summary="Your code: policy.path module:factory; factory(**policy.kwargs) returns a batched or per-env policy",
    kwargs_schema={"type": "object"},  # the factory's own keyword arguments
    path="module:factory (e.g. my_pkg.policies:make)",
    path_pattern=r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$",
    user_code=True,
)
