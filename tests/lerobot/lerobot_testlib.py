"""Shared bits of the LeRobot tests and of benchmarks/lerobot_parity.py (this folder and tests/, for helpers, are on
sys.path under pytest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from helpers import RENDER_ENV, REPO

VENV = REPO / ".venv-lerobot"
SETUP = ".ci/setup-lerobot.sh"
TIMEOUT_S = 1800


def venv_bin(name: str) -> str:
    """A console script of the interpreter running the tests (lerobot-eval, runner)."""
    return str(Path(sys.executable).parent / name)


def subprocess_env() -> dict[str, str]:
    """Environment for the lerobot-eval / runner subprocesses: offscreen EGL, hub offline."""
    return {**os.environ, **RENDER_ENV, "HF_HUB_OFFLINE": "1"}


def _run(cmd: list[str], log: Path) -> float:
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=subprocess_env(), timeout=TIMEOUT_S,
                              cwd=REPO)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"{Path(cmd[0]).name} exited with {proc.returncode}; last output:\n{tail}")
    return wall


def run_lerobot_eval(policy: Path, out: Path, *, task: str, seed: int, batch_size: int, n_episodes: int,
                     env_type: str = "metaworld", env_args: tuple[str, ...] = (), async_envs: bool | None = None) -> dict:
    """The real lerobot-eval, CPU (async envs above batch size 1, its default, unless `async_envs` says);
    `env_args`: more --env.* options."""
    async_envs = batch_size > 1 if async_envs is None else async_envs
    wall = _run([venv_bin("lerobot-eval"), f"--policy.path={policy}", f"--env.type={env_type}", f"--env.task={task}",
                 *env_args, f"--eval.n_episodes={n_episodes}", f"--eval.batch_size={batch_size}",
                 f"--eval.use_async_envs={'true' if async_envs else 'false'}", "--policy.device=cpu",
                 f"--seed={seed}", f"--output_dir={out}"], out.with_suffix(".log"))
    info = json.loads((out / "eval_info.json").read_text())
    (per_task,) = info["per_task"]
    m = per_task["metrics"]
    episodes = [{"sum_reward": s, "max_reward": x, "success": bool(ok)}
                for s, x, ok in zip(m["sum_rewards"], m["max_rewards"], m["successes"], strict=True)]
    return {"wall_s": wall, "eval_s": info["overall"]["eval_s"], "episodes": episodes}


def run_runner(policy: Path, out: Path, *, task: str | None, seed: int, batch_size: int, n_episodes: int,
               spec: str = "specs/metaworld.yaml", sets: tuple[str, ...] = ()) -> dict:
    """`runner run SPEC` on the same settings (worker processes above batch size 1, no videos); `task` None keeps
    the spec's; `sets`: more --set overrides."""
    overrides = [f"policy.path={policy}", "policy.rename_map={}", "policy.empty_cameras=0", "policy.device=cpu",
                 *([f"env.task={task}"] if task else []), f"eval.seed={seed}", f"eval.n_episodes={n_episodes}",
                 f"eval.batch_size={batch_size}", f"eval.use_async_envs={'true' if batch_size > 1 else 'false'}",
                 "eval.videos=0", *sets]
    wall = _run([venv_bin("runner"), "run", spec, "--no-progress", "--output-dir", str(out),
                 *(arg for o in overrides for arg in ("--set", o))], out.with_suffix(".log"))
    records = sorted((json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()),
                     key=lambda r: r["episode_index"])
    info = json.loads((out / "eval_info.json").read_text())
    episodes = [{"sum_reward": r["sum_reward"], "max_reward": r["max_reward"], "success": r["success"]}
                for r in records]
    return {"wall_s": wall, "eval_s": info["overall"]["eval_s"], "episodes": episodes,
            "seeds": [r["seed"] for r in records], "steps": [r["steps"] for r in records]}


def runner_batch(observation: dict, text: str) -> dict:
    """What runner's lerobot policy adapter hands the policy's preprocessor (runner.policies.lerobot.policy):
    the observation batched (leading axis), LeRobot's `preprocess_observation`, the task text."""
    from lerobot.envs.utils import preprocess_observation

    batched = {k: {c: v[None] for c, v in val.items()} if isinstance(val, dict) else val[None]
               for k, val in observation.items()}
    batch = preprocess_observation(batched)
    batch["task"] = [text]
    return batch


def assert_same_episodes(theirs_env, theirs, ours_env, text: str, keys: list[str], episodes: list, *,
                         seed: int) -> None:
    """Episode k (seed + k) reset, then stepped with `episodes[k]` (actions), in lockstep in LeRobot's 1-env vector env
    (`theirs` converts its observations) and in runner's env: the same batches (assert_same), rewards, terminations,
    truncations and successes at every step. Closes both envs."""
    import numpy as np

    try:
        for k, actions in enumerate(episodes):
            obs_t, _ = theirs_env.reset(seed=[seed + k])
            obs_o, _ = ours_env.reset(seed=seed + k, options={"episode_index": k})
            assert_same(theirs(obs_t), runner_batch(obs_o, text), f"episode {k} reset", keys)
            for i, action in enumerate(actions):
                obs_t, rew_t, term_t, trunc_t, info_t = theirs_env.step(action[None])
                obs_o, rew_o, term_o, trunc_o, info_o = ours_env.step(action)
                where = f"episode {k} step {i}"
                assert_same(theirs(obs_t), runner_batch(obs_o, text), where, keys)
                assert (float(rew_t[0]), bool(term_t[0]), bool(trunc_t[0])) == (rew_o, term_o, trunc_o), where
                assert bool(np.asarray(info_t["is_success"])[0]) == info_o["is_success"], where
    finally:
        theirs_env.close()
        ours_env.close()


def assert_same(theirs: dict, ours: dict, where: str, keys: list[str]) -> None:
    """Two converted batches bit-identical: the observation keys (exactly `keys`), dtypes, shapes, values, task."""
    import torch

    found = sorted(k for k in theirs if k.startswith("observation."))
    assert found == sorted(k for k in ours if k.startswith("observation.")), where
    assert found == sorted(keys), where
    for key in found:
        a, b = theirs[key], ours[key]
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {key} {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
        assert torch.equal(a, b), f"{where}: {key} differs (max |diff| {(a.double() - b.double()).abs().max().item():g})"
    assert theirs["task"] == ours["task"], where
