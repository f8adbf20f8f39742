"""Build a small, seeded, randomly initialised LeRobot ACT policy, saved offline with its processors.

The directory it writes is what `lerobot-eval --policy.path=DIR` and `runner run --set policy.path=DIR`
load: `config.json`, `model.safetensors`, `policy_preprocessor.json`, `policy_postprocessor.json` and the
normaliser stats. Features match an env's observations as LeRobot converts them (`--layout`: Meta-World's
`observation.image` (3, 480, 480), `observation.state` (4,), `action` (4,); PushT's; ALOHA's); `--image-key`
names the camera feature differently (e.g. `observation.images.camera1`, for the rename_map tests).
Normalisation stats are the identity (mean 0, std 1), so the saved normaliser steps run but change nothing.

Kinds: `act` (small: dim_model 64, chunk 10, `n_action_steps` of it executed (default: all); the adapter's
per-slot chunk queues; `relative_actions` adds LeRobot's relative-actions steps to its pipelines, as pi0's),
`act-default` (LeRobot's ACT defaults: dim_model 512, 4 encoder layers, chunks of 100 executed whole; 52M
parameters), `act-ensemble` (temporal ensembling, a new chunk every step) and `diffusion` (2 observation steps,
stochastic sampling): the last two take the adapter's per-slot-copy path.

    .venv-lerobot/bin/python tests/lerobot/make_random_policy.py OUT_DIR [--kind act] [--layout metaworld]
        [--image-key KEY] [--seed N]
"""

from __future__ import annotations

import argparse
from pathlib import Path

CHUNK_SIZE = 10
# Each env's LeRobot features: (camera feature, image shape CHW, state dim, action dim).
LAYOUTS = {
    "metaworld": ("observation.image", (3, 480, 480), 4, 4),
    "pusht": ("observation.image", (3, 96, 96), 2, 2),
    "aloha": ("observation.images.top", (3, 480, 640), 14, 14),
}


KINDS = ("act", "act-default", "act-ensemble", "diffusion")


def build_random_act(out_dir: str | Path, *, image_key: str | None = None, seed: int = 0, kind: str = "act",
                     layout: str = "metaworld", action_mean: tuple[float, ...] | None = None,
                     action_std: float = 1.0, n_action_steps: int | None = None,
                     relative_actions: bool = False) -> Path:
    """Write a random-init policy for an env's features (`layout`): ACT (ResNet18 without pretrained weights;
    dim_model 64 and chunk 10, or LeRobot's defaults with `kind="act-default"`), or a small diffusion policy
    (`kind="diffusion"`). The action statistics (identity by default) centre its actions: `action_mean` plus
    `action_std` times the random network's output, which still depends on every observation."""
    import torch
    from lerobot.configs import FeatureType, NormalizationMode, PolicyFeature

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    camera, image_shape, state_dim, action_dim = LAYOUTS[layout]
    image_key = image_key or camera
    out = Path(out_dir)
    common = dict(
        device="cpu",
        input_features={
            image_key: PolicyFeature(type=FeatureType.VISUAL, shape=image_shape),
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state_dim,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))},
        normalization_mapping={
            "VISUAL": NormalizationMode.MEAN_STD,
            "STATE": NormalizationMode.MEAN_STD,
            "ACTION": NormalizationMode.MEAN_STD,
        },
        pretrained_backbone_weights=None,
        push_to_hub=False,
    )
    if kind == "diffusion":
        from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig as Config
        from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy as Policy
        from lerobot.policies.diffusion.processor_diffusion import make_diffusion_pre_post_processors as processors

        config = Config(**common, n_obs_steps=2, horizon=16, n_action_steps=8, down_dims=(32, 64),
                        diffusion_step_embed_dim=32, spatial_softmax_num_keypoints=8, num_inference_steps=5)
    else:
        from lerobot.policies.act.configuration_act import ACTConfig as Config
        from lerobot.policies.act.modeling_act import ACTPolicy as Policy
        from lerobot.policies.act.processor_act import make_act_pre_post_processors as processors

        ensemble = kind == "act-ensemble"
        config = Config(**common) if kind == "act-default" else Config(
            **common, chunk_size=CHUNK_SIZE, n_action_steps=1 if ensemble else n_action_steps or CHUNK_SIZE,
            temporal_ensemble_coeff=0.01 if ensemble else None, dim_model=64, n_heads=4, dim_feedforward=128,
            n_encoder_layers=1, n_decoder_layers=1, use_vae=False)
    stats = {
        image_key: {"mean": torch.zeros(3, 1, 1), "std": torch.ones(3, 1, 1)},
        "observation.state": {"mean": torch.zeros(state_dim), "std": torch.ones(state_dim)},
        "action": {"mean": torch.tensor(action_mean, dtype=torch.float32) if action_mean else torch.zeros(action_dim),
                   "std": torch.full((action_dim,), float(action_std))},
    }
    torch.manual_seed(seed)
    policy = Policy(config)
    policy.eval()
    preprocessor, postprocessor = processors(config, dataset_stats=stats)
    if relative_actions:  # as pi0's pipelines with use_relative_actions: state subtracted, added back to each action
        from lerobot.processor.relative_action_processor import (
            AbsoluteActionsProcessorStep,
            RelativeActionsProcessorStep,
        )

        relative = RelativeActionsProcessorStep(enabled=True)
        preprocessor.steps.insert(len(preprocessor.steps) - 1, relative)  # before the normaliser
        postprocessor.steps.insert(1, AbsoluteActionsProcessorStep(enabled=True, relative_step=relative))
    policy.save_pretrained(out)
    preprocessor.save_pretrained(out)
    postprocessor.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="metaworld", help="the env's features")
    parser.add_argument("--image-key", help="camera feature name the policy expects (default: the layout's)")
    parser.add_argument("--seed", type=int, default=0, help="torch seed for the random weights")
    parser.add_argument("--kind", choices=KINDS, default="act", help="policy kind (default: act)")
    args = parser.parse_args(argv)
    out = build_random_act(args.out_dir, image_key=args.image_key, seed=args.seed, kind=args.kind, layout=args.layout)
    print(f"wrote a random {args.kind} policy to {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
