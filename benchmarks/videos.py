"""What recording videos costs a run, against the frames' own rendering cost, in one interleaved run.

Workload: the README's first command (Meta-World's easy group, 28 tasks x 5 episodes, scripted experts, one video
per task: `eval.videos=1`), `--quick`: 4 tasks. Per round, side by side on the same episodes:

1. `runner run` without videos (`eval.videos=0`): wall time of the whole command (start-up, report included);
2. `runner run` with videos: the same;
3. rendering the same frames alone: the episodes (2) recorded, replayed closed-loop with the expert by plain loops
   (no runner engine, no encoder) in as many processes as (2) had workers, with the same LP_NUM_THREADS, forked
   like runner's workers; only `env.render()` is timed. Its wall share is the sum of render times / processes.

Target (issue 25): wall(2) <= 1.1 x (wall(1) + render(3)): encoding overlaps the simulation, so a video costs its
frames' rendering and little more. Also printed: what (2)'s summary said videos took. `--batch-size 1` with
LP_NUM_THREADS=1 in the environment leaves the encoder a CPU of its own on this 2-CPU machine (the case of a machine
with spare cores); the default batch size (one worker per CPU) leaves it none.

usage: [LP_NUM_THREADS=1] .venv/bin/python benchmarks/videos.py [--quick] [--rounds 3] [--batch-size N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RUNNER = [sys.executable, "-m", "runner.cli.main"]
SPEC = REPO / "specs" / "metaworld.yaml"
BASE = ["policy.type=scripted", "env.task=easy", "eval.n_episodes=5"]


def run(sets: list[str], out: Path, batch_size: int | None) -> dict[str, Any]:
    args = [a for s in sets for a in ("--set", s)] + (["--batch-size", str(batch_size)] if batch_size else [])
    start = time.perf_counter()
    proc = subprocess.run([*RUNNER, "run", str(SPEC), *args, "--no-progress", "--output-dir", str(out)],
                          capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"runner run failed ({proc.returncode}):\n{proc.stderr}")
    said = [line for line in proc.stdout.splitlines() if line.startswith("videos:")]
    threads = [line.split()[-3] for line in proc.stdout.splitlines() if line.startswith("software rendering:")]
    batch = int(next(line.split()[2] for line in proc.stdout.splitlines() if line.startswith("batch size ")))
    return {"wall_s": wall, "said": said[0] if said else "", "batch": batch, "threads": threads[0] if threads else None,
            "eval_s": json.loads((out / "metrics.json").read_text())["eval_s"]}


def _render_part(sets: list[str], episodes: list[dict[str, Any]], out: Any) -> None:
    """Replay `episodes` with the expert, rendering every frame a video would hold; time only the rendering."""
    import gc

    from runner.envs import ENV_STATE, get_adapter
    from runner.policies.base import EpisodeStart
    from runner.policies.scripted.policy import ScriptedExpert
    from runner.spec import load_spec

    spec = load_spec(SPEC, sets)
    adapter = get_adapter("metaworld")
    tasks = {(t.group, t.task_id): t for t in adapter.tasks(spec.env)}
    gc.freeze()
    render_s, frames = 0.0, 0
    for row in episodes:
        task = tasks[(row["task_group"], row["task_id"])]
        env = adapter.make(task, spec.env, obs_keys=frozenset({ENV_STATE}), video=True)
        obs, _ = env.reset(seed=row["seed"], options={"episode_index": row["episode_index"]})
        expert = ScriptedExpert()
        expert.reset(EpisodeStart(0, task, row["episode_index"], row["seed"], env.action_space))
        for n in range(row["steps"] + 1):
            t0 = time.perf_counter()
            env.render()
            render_s += time.perf_counter() - t0
            frames += 1
            if n < row["steps"]:
                obs, *_ = env.step(expert.act(obs))
        env.close()
    out.put((render_s, frames))


def render_alone(sets: list[str], episodes: list[dict[str, Any]], processes: int, threads: str | None) -> dict:
    import multiprocessing as mp

    before = os.environ.get("LP_NUM_THREADS")
    if threads:
        os.environ["LP_NUM_THREADS"] = threads  # inherited by the forkserver, as runner's workers get it
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["metaworld", "metaworld.policies", "runner.envs.metaworld.preload"])
    out = ctx.Queue()
    procs = [ctx.Process(target=_render_part, args=(sets, episodes[i::processes], out)) for i in range(processes)]
    for p in procs:
        p.start()
    parts = [out.get() for _ in procs]
    for p in procs:
        p.join()
    if before is None:
        os.environ.pop("LP_NUM_THREADS", None)
    else:
        os.environ["LP_NUM_THREADS"] = before
    return {"render_s": sum(p[0] for p in parts) / processes, "frames": sum(p[1] for p in parts)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 tasks of the easy group instead of 28")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=None, help="runner's --batch-size (default: automatic)")
    args = parser.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    sets = BASE + (["env.task=metaworld-button-press-v3,metaworld-door-open-v3,metaworld-drawer-close-v3,"
                    "metaworld-reach-v3"] if args.quick else [])
    rows = []
    with tempfile.TemporaryDirectory(prefix="runner-videos-") as tmp:
        for r in range(args.rounds):
            without = run([*sets, "eval.videos=0"], Path(tmp) / f"off{r}", args.batch_size)
            recorded = run([*sets, "eval.videos=1"], Path(tmp) / f"on{r}", args.batch_size)
            ledger = [json.loads(line) for line in (Path(tmp) / f"on{r}" / "episodes.jsonl").read_text().splitlines()]
            episodes = [row for row in ledger if row["video_path"]]
            threads = recorded["threads"] or os.environ.get("LP_NUM_THREADS")
            alone = render_alone(sets, episodes, recorded["batch"], threads)
            ratio = recorded["wall_s"] / (without["wall_s"] + alone["render_s"])
            rows.append(ratio)
            print(f"round {r + 1}: without videos {without['wall_s']:.1f} s, with {recorded['wall_s']:.1f} s "
                  f"({len(episodes)} videos, {alone['frames']} frames, batch {recorded['batch']}, LP_NUM_THREADS "
                  f"{threads}); rendering those frames alone {alone['render_s']:.1f} s; "
                  f"with / (without + rendering) = {ratio:.3f}", flush=True)
            print(f"  the run said: {recorded['said']}", flush=True)
    print(f"median ratio {statistics.median(rows):.3f} (target <= 1.1) over {len(rows)} round(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
