"""`policy.type: lerobot`: the descriptor (the adapter, with LeRobot's loading and per-slot queues, is `policy.py`)."""

from __future__ import annotations

from runner.adapters import Needs, PolicyType

FORWARD_MODES = ("padded", "per_slot", "grouped")

TYPE = PolicyType(
    name="lerobot",
    runtime="runner.policies.lerobot.policy:make",
    summary="A LeRobot (>= 0.6) pretrained policy with its saved processors: a hub id or a local directory",
    kwargs_schema={
        "type": "object",
        "additionalProperties": False,
        "properties": {"forward": {"description": "How slots share the batched forward pass: padded (one batch, "
                                                  "padded to the slots), per_slot, or grouped by step.",
                                   "enum": list(FORWARD_MODES), "default": "padded"}},
    },
    path="a Hugging Face hub id like user/model, or a local directory written by save_pretrained",
    needs=Needs(("lerobot",), 'add install.extras: [lerobot] and install.python: "3.12"', python="3.12",
                extras=("lerobot",)),
    images=True,
    preflight="runner.policies.lerobot.policy:preflight",
)
