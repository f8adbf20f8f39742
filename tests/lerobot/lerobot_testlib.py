"""Shared bits of the LeRobot tests and of benchmarks/lerobot_parity.py (this folder is on sys.path under pytest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv-lerobot"
SETUP = ".ci/setup-lerobot.sh"
RENDER_ENV = {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}
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


def run_lerobot_eval(policy: Path, out: Path, *, task: str, seed: int, batch_size: int, n_episodes: int) -> dict:
    """The real lerobot-eval on Meta-World, CPU (async envs above batch size 1, its default)."""
    wall = _run([venv_bin("lerobot-eval"), f"--policy.path={policy}", "--env.type=metaworld", f"--env.task={task}",
                 f"--eval.n_episodes={n_episodes}", f"--eval.batch_size={batch_size}",
                 f"--eval.use_async_envs={'true' if batch_size > 1 else 'false'}", "--policy.device=cpu",
                 f"--seed={seed}", f"--output_dir={out}"], out.with_suffix(".log"))
    info = json.loads((out / "eval_info.json").read_text())
    (per_task,) = info["per_task"]
    m = per_task["metrics"]
    episodes = [{"sum_reward": s, "max_reward": x, "success": bool(ok)}
                for s, x, ok in zip(m["sum_rewards"], m["max_rewards"], m["successes"], strict=True)]
    return {"wall_s": wall, "eval_s": info["overall"]["eval_s"], "episodes": episodes}


def run_runner(policy: Path, out: Path, *, task: str, seed: int, batch_size: int, n_episodes: int) -> dict:
    """`runner run specs/metaworld.yaml` on the same settings (worker processes above batch size 1, no videos)."""
    wall = _run([venv_bin("runner"), "run", "specs/metaworld.yaml", "--no-progress", "--output-dir", str(out),
                 "--set", f"policy.path={policy}", "--set", "policy.rename_map={}", "--set", "policy.empty_cameras=0",
                 "--set", "policy.device=cpu", "--set", f"env.task={task}", "--set", f"eval.seed={seed}",
                 "--set", f"eval.n_episodes={n_episodes}", "--set", f"eval.batch_size={batch_size}",
                 "--set", f"eval.use_async_envs={'true' if batch_size > 1 else 'false'}", "--set", "eval.videos=0"],
                out.with_suffix(".log"))
    records = sorted((json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()),
                     key=lambda r: r["episode_index"])
    info = json.loads((out / "eval_info.json").read_text())
    episodes = [{"sum_reward": r["sum_reward"], "max_reward": r["max_reward"], "success": r["success"]}
                for r in records]
    return {"wall_s": wall, "eval_s": info["overall"]["eval_s"], "episodes": episodes,
            "seeds": [r["seed"] for r in records], "steps": [r["steps"] for r in records]}
