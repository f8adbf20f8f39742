"""The memory under an image-based LeRobot evaluation, stage by stage (needs .venv-lerobot).

The workload of render_bound.py at batch size 1: a random-init ACT with LeRobot's defaults on Meta-World push-v3
(480x480 `observation.image`). One fresh process per variant imports, loads and steps what that evaluation needs
and reads its own PSS (/proc/self/smaps_rollup) after each stage. This process imports none of it, so no page of
the measured one is shared with it and hidden from its PSS.

Variants (each a fresh process, one after the other):
  lerobot    LeRobot's loading code as runner's adapter and lerobot-eval call it (`lerobot.policies.factory`),
             stepped through runner's adapter: the floor under both tools.
  act-only   a what-if, not what runner does: the `lerobot.policies` package's __init__ (which imports the
             factory and every policy's configuration) is skipped, and only ACT's modules and LeRobot's processor
             pipeline are imported; the same weights and processors, stepped as lerobot-eval steps a policy.
             Its actions are checked against the first variant's.
  env-only   torch, the env and its frames, no policy: what no policy loader can go below.

usage: .venv-lerobot/bin/python benchmarks/memory_floor.py [--steps 101] [--against MIB]
  --against MIB   another tool's peak to set against the floors (e.g. lerobot-eval's at batch size 1 from
                  render_bound.py); prints a third of it next to each variant's last stage
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from render_bound import RENDER_ENV, REPO, SEED, _env, _positive, _pss_kib  # stdlib only at import

VARIANTS = ("lerobot", "act-only", "env-only")


def _peak_rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def _skip_policies_init() -> None:
    """Make `lerobot.policies` an empty package over its directory, so its submodules import without its
    __init__ (the act-only what-if)."""
    import importlib.util
    import types

    spec = importlib.util.find_spec("lerobot.policies")
    package = types.ModuleType("lerobot.policies")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    sys.modules["lerobot.policies"] = package


class _ActOnly:
    """ACT and its saved processors, loaded and called as lerobot-eval does, without LeRobot's factory."""

    def __init__(self, path: str) -> None:
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.act.modeling_act import ACTPolicy
        from lerobot.processor import PolicyProcessorPipeline
        from lerobot.processor.converters import (
            batch_to_transition,
            policy_action_to_transition,
            transition_to_batch,
            transition_to_policy_action,
        )

        config = PreTrainedConfig.from_pretrained(path, cli_overrides=["--device=cpu"])
        self.policy = ACTPolicy.from_pretrained(path, config=config)
        self.policy.eval()
        overrides = {"device_processor": {"device": "cpu"}, "rename_observations_processor": {"rename_map": {}}}
        self.preprocessor = PolicyProcessorPipeline.from_pretrained(
            path, config_filename="policy_preprocessor.json", overrides=overrides,
            to_transition=batch_to_transition, to_output=transition_to_batch)
        self.postprocessor = PolicyProcessorPipeline.from_pretrained(
            path, config_filename="policy_postprocessor.json",
            to_transition=policy_action_to_transition, to_output=transition_to_policy_action)
        self.observation_keys = frozenset({"pixels", "agent_pos"})

    def act(self, observation: dict, text: str) -> Any:
        import torch
        from lerobot.envs.utils import preprocess_observation

        batch = preprocess_observation(observation)
        batch["task"] = [text]
        with torch.inference_mode():
            action = self.policy.select_action(self.preprocessor(batch))
        return self.postprocessor(action).numpy()[0]


def _child(variant: str, policy_dir: str, steps: int, actions_out: str) -> None:
    """Import, load and step; one JSON line per stage on stdout, then the peak RSS."""

    def mark(stage: str) -> None:
        print(json.dumps({"stage": stage, "pss_mib": round(_pss_kib(os.getpid()) / 1024, 1)}), flush=True)

    mark("python")
    import numpy as np
    mark("numpy")
    import torch  # noqa: F401
    mark("torch")
    import metaworld  # noqa: F401
    import mujoco  # noqa: F401
    mark("MuJoCo + Meta-World")
    from runner.policies.base import EpisodeStart
    from runner.spec import load_spec

    if variant == "lerobot":
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors  # noqa: F401

        import runner.policies.lerobot.policy  # noqa: F401
        from runner.policies import make_policy
        mark("LeRobot's policy code (its factory)")
        spec = load_spec(REPO / "specs" / "metaworld.yaml", [
            f"policy.path={policy_dir}", "policy.rename_map={}", "policy.empty_cameras=0", "policy.device=cpu"])
        policy = make_policy(spec.policy, spec.env)
        mark("policy loaded (weights, processors)")
        keys = frozenset(policy.observation_keys)
    elif variant == "act-only":
        _skip_policies_init()
        from lerobot.envs.utils import preprocess_observation  # noqa: F401
        from lerobot.policies.act.modeling_act import ACTPolicy  # noqa: F401
        from lerobot.processor import PolicyProcessorPipeline  # noqa: F401
        mark("ACT's modules only (what-if)")
        policy = _ActOnly(policy_dir)
        mark("policy loaded (weights, processors)")
        keys = policy.observation_keys
    else:
        policy, keys = None, None
    env, task, _ = _env(keys)
    mark("env made")
    observation, _ = env.reset(seed=SEED)
    mark("first frame (reset)")
    if variant == "lerobot":
        policy.reset([EpisodeStart(0, task, 0, SEED, env.action_space, 1)])
    rng = np.random.default_rng(SEED)
    actions = []
    for _ in range(steps):
        if variant == "lerobot":
            action = policy.select_action({k: np.stack([v]) for k, v in observation.items()}, [task.text], [0])[0]
        elif variant == "act-only":
            action = policy.act({k: np.stack([v]) for k, v in observation.items()}, task.text)
        else:
            action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
        actions.append(action)
        observation, *_ = env.step(action)
    mark(f"{steps} steps")
    np.save(actions_out, np.stack(actions))
    print(json.dumps({"peak_rss_mib": round(_peak_rss_mib(), 1)}), flush=True)
    env.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=_positive, default=101, help="closed-loop steps after the reset (101)")
    parser.add_argument("--against", type=_positive, metavar="MIB", help="another tool's peak PSS to compare with")
    parser.add_argument("--child", nargs=4, metavar=("VARIANT", "POLICY", "STEPS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        variant, policy_dir, steps, out = args.child
        _child(variant, policy_dir, int(steps), out)
        return 0
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        policy = tmp / "act"
        subprocess.run([sys.executable, str(REPO / "tests" / "lerobot" / "make_random_policy.py"), str(policy),
                        "--kind", "act-default"], check=True, stdout=subprocess.DEVNULL)
        print(f"workload: random-init ACT (LeRobot's defaults) on Meta-World push-v3, 480x480 image, {args.steps} "
              f"closed-loop steps; PSS of one process after each stage, MiB (in brackets: the stage's own)", flush=True)
        last = {}
        for variant in VARIANTS:
            argv = [sys.executable, __file__, "--child", variant, str(policy), str(args.steps),
                    str(tmp / f"{variant}.npy")]
            proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True, env={**os.environ, **RENDER_ENV, "HF_HUB_OFFLINE": "1"}, check=False)
            if proc.returncode:
                print(f"{variant}: failed (exit {proc.returncode}); its traceback is above", file=sys.stderr)
                return 1
            print(f"\n== {variant}")
            previous = 0.0
            for line in proc.stdout.splitlines():
                if not line.startswith("{"):  # LeRobot's own prints
                    continue
                row = json.loads(line)
                if "peak_rss_mib" in row:
                    print(f"  {'peak RSS (VmHWM)':40s} {row['peak_rss_mib']:6.0f}")
                    continue
                print(f"  {row['stage']:40s} {row['pss_mib']:6.0f} ({row['pss_mib'] - previous:+.0f})")
                previous = row["pss_mib"]
            last[variant] = previous
        import numpy as np

        same = np.array_equal(np.load(tmp / "lerobot.npy"), np.load(tmp / "act-only.npy"))
        print(f"\nact-only's actions {'identical to' if same else 'DIFFER from'} lerobot's over {args.steps} steps; "
              f"it holds {last['lerobot'] - last['act-only']:.0f} MiB less")
        if args.against:
            third = args.against / 3
            print(f"a third of {args.against} MiB is {third:.0f}: "
                  + "; ".join(f"{v} {last[v]:.0f} ({last[v] - third:+.0f})" for v in VARIANTS))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
