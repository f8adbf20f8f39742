"""Image-based evaluation against the machine's render bound, in one run (needs .venv-lerobot: LeRobot's ACT and
lerobot-eval).

Workload: a seeded random-init ACT (ResNet18 without pretrained weights, 480x480 `observation.image`, chunks of 10)
on Meta-World push-v3, seeds 1000.., videos of every episode. A random policy never succeeds, so every episode runs
Meta-World's 500 steps (`--quick`: 60 steps, and no lerobot-eval, which cannot shorten Meta-World episodes).

1. Render bound: plain loops, no runner engine and no policy: processes that build runner's Meta-World env with
   its 480x480 corner2 camera (LeRobot's settings: shadows, 4x multisampling), step it and render the observation
   every step. One process and W side by side, with llvmpipe's default thread count (every CPU) and with each
   process's share (LP_NUM_THREADS = CPUs / W). The bound is the best frames/s of any of them.
2. runner at batch sizes 1, 2, 4 (one episode per slot): frames rendered (one per step and the reset frame, each
   also the video frame) / eval_s, and that over the bound; peak memory of all its processes (RSS, sampled).
3. lerobot-eval with its defaults (videos on) at batch sizes 1 and 2 on the same episodes: its wall time, peak
   memory, and the per-episode results checked against runner's (sum_reward to a few ulps, as the parity tests).
4. Memory per worker with 1 and with 10 episodes per worker (batch size 2, `--memory-steps` steps per episode).

usage: .venv-lerobot/bin/python benchmarks/render_bound.py [--quick] [--batch-sizes 1,2,4] [--frames N]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "lerobot"))
RENDER_ENV = {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}
TASK, SEED = "metaworld-push-v3", 1000
BIN = Path(sys.executable).parent


# ── 1. the render bound ───────────────────────────────────────────────────────────────────────────────────


def _render_loop(threads: int | None, frames: int, out: Any) -> None:
    if threads:
        os.environ["LP_NUM_THREADS"] = str(threads)
    os.environ.update({k: os.environ.get(k, v) for k, v in RENDER_ENV.items()})
    import numpy as np

    from runner.envs import AGENT_POS, PIXELS, get_adapter
    from runner.spec import load_spec

    spec = load_spec(REPO / "specs" / "metaworld.yaml", [f"env.task={TASK}", "policy.type=random"])
    adapter = get_adapter("metaworld")
    env = adapter.make(adapter.tasks(spec.env)[0], spec.env, obs_keys=frozenset({PIXELS, AGENT_POS}), video=True)
    env.reset(seed=SEED)
    action = np.zeros(4, np.float32)
    for _ in range(3):  # the GL context and the shadow map are set up by the first frames
        env.step(action)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(frames):
        env.step(action)
    out.put((time.perf_counter() - start, time.process_time() - cpu, frames))
    env.close()


def render_loops(processes: int, threads: int | None, frames: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_render_loop, args=(threads, frames, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    parts = [out.get() for _ in procs]
    for p in procs:
        p.join()
    wall = max(p[0] for p in parts)
    total = sum(p[2] for p in parts)
    return {"fps": total / wall, "ms_per_frame": 1000 * wall / total, "cpu_ms_per_frame": 1000 * sum(p[1] for p in
                                                                                                    parts) / total}


# ── runs, with their memory ───────────────────────────────────────────────────────────────────────────────


def _tree_rss_kib(root: int) -> dict[int, tuple[str, int]]:
    """(role, RSS) of `root` and every descendant, by pid; role: main, forkserver, worker (a forkserver's child),
    ffmpeg, or other."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                commands[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        pid, ppid = int(entry), int(fields.get("PPid", "0").strip())
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0]) if "VmRSS" in fields else 0
    found: dict[int, tuple[str, int]] = {}
    todo = [(root, "main")]
    while todo:
        pid, role = todo.pop()
        found[pid] = (role, rss.get(pid, 0))
        for child in children.get(pid, []):
            command = commands.get(child, "")
            kind = ("ffmpeg" if "ffmpeg" in command else "forkserver" if "forkserver" in command and role == "main"
                    else "worker" if role == "forkserver" else "other")
            todo.append((child, kind))
    return found


def measured(argv: list[str], log: Path) -> dict[str, Any]:
    """Run a command; its wall time, the peak of its process tree's summed RSS, and each process's peak RSS with
    its role."""
    peak_sum, peaks = 0, {}
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **RENDER_ENV, "HF_HUB_OFFLINE": "1"})
        start = time.perf_counter()
        done = threading.Event()

        def sample() -> None:
            nonlocal peak_sum
            while not done.is_set():
                tree = _tree_rss_kib(proc.pid)
                peak_sum = max(peak_sum, sum(kib for _, kib in tree.values()))
                for pid, (role, kib) in tree.items():
                    peaks[pid] = (role, max(peaks.get(pid, (role, 0))[1], kib))
                done.wait(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        done.set()
        sampler.join()
    if code != 0:
        raise SystemExit(f"{Path(argv[0]).name} failed ({code}): {log.read_text()[-3000:]}")
    by_role: dict[str, list[float]] = {}
    for role, kib in peaks.values():
        by_role.setdefault(role, []).append(kib / 1024)
    return {"wall_s": time.perf_counter() - start, "peak_mib": peak_sum / 1024, "peaks_mib": by_role}


def runner_run(policy: Path, out: Path, batch: int, episodes: int, steps: int | None) -> dict[str, Any]:
    sets = [f"policy.path={policy}", "policy.rename_map={}", "policy.empty_cameras=0", "policy.device=cpu",
            f"env.task={TASK}", f"eval.seed={SEED}", f"eval.n_episodes={episodes}", f"eval.batch_size={batch}",
            f"eval.use_async_envs={'true' if batch > 1 else 'false'}", f"eval.videos={episodes}",
            *([f"env.max_steps={steps}"] if steps else [])]
    run = measured([str(BIN / "runner"), "run", "specs/metaworld.yaml", "--no-progress", "--output-dir", str(out),
                    *(a for s in sets for a in ("--set", s))], out.with_suffix(".log"))
    records = sorted((json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()),
                     key=lambda r: r["episode_index"])
    run["eval_s"] = json.loads((out / "eval_info.json").read_text())["overall"]["eval_s"]
    run["frames"] = sum(r["steps"] + 1 for r in records)
    run["episodes"] = [(r["sum_reward"], r["max_reward"], r["success"]) for r in records]
    run["video_kib"] = sum(p.stat().st_size for p in out.rglob("*.mp4")) / 1024
    run["log"] = out.with_suffix(".log").read_text()
    return run


def lerobot_eval(policy: Path, out: Path, batch: int) -> dict[str, Any]:
    run = measured([str(BIN / "lerobot-eval"), f"--policy.path={policy}", "--env.type=metaworld", f"--env.task={TASK}",
                    f"--eval.n_episodes={batch}", f"--eval.batch_size={batch}",
                    f"--eval.use_async_envs={'true' if batch > 1 else 'false'}", "--policy.device=cpu",
                    f"--seed={SEED}", f"--output_dir={out}"], out.with_suffix(".log"))
    info = json.loads((out / "eval_info.json").read_text())
    (per_task,) = info["per_task"]
    m = per_task["metrics"]
    run["eval_s"] = info["overall"]["eval_s"]
    run["episodes"] = list(zip(m["sum_rewards"], m["max_rewards"], map(bool, m["successes"]), strict=True))
    return run


def same_episodes(ours: list, theirs: list) -> bool:
    return len(ours) == len(theirs) and all(
        a[1] == b[1] and a[2] == b[2] and abs(a[0] - b[0]) <= 4 * math.ulp(max(abs(a[0]), abs(b[0])))
        for a, b in zip(ours, theirs, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="60-step episodes, no lerobot-eval")
    parser.add_argument("--batch-sizes", default="1,2,4")
    parser.add_argument("--frames", type=int, default=60, help="frames per plain render loop")
    parser.add_argument("--memory-steps", type=int, default=50)
    args = parser.parse_args()
    from make_random_policy import build_random_act

    from runner.engine.plan import cpu_count, render_threads

    cpus = cpu_count()
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    steps = 60 if args.quick else None
    print(f"machine: {cpus} CPUs; workload: random-init ACT on {TASK}, 480x480 corner2 camera, videos on, "
          f"{'60' if steps else '500'}-step episodes", flush=True)

    print("\n== render bound (plain loops: step + render the observation, no policy)", flush=True)
    bound = {}
    for w in sorted({1, *sizes}):
        share = render_threads(cpus, w)
        for threads in (None,) if share == cpus else (None, share):
            r = render_loops(w, threads, args.frames)
            label = f"{w} process{'es' if w > 1 else ''}, LP_NUM_THREADS={threads or f'default ({cpus})'}"
            print(f"  {label}: {r['fps']:.2f} frames/s ({r['ms_per_frame']:.1f} ms a frame, "
                  f"{r['cpu_ms_per_frame']:.0f} ms CPU a frame)", flush=True)
            bound[w] = max(bound.get(w, 0.0), r["fps"])
    best = max(bound.values())
    print(f"  render bound: {best:.2f} frames/s ({1000 / best:.1f} ms a frame)", flush=True)

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        policy = build_random_act(tmp / "act")
        print("\n== runner (one episode per slot)", flush=True)
        ours = {}
        for b in sizes:
            r = ours[b] = runner_run(policy, tmp / f"runner_b{b}", b, b, steps)
            fps = r["frames"] / r["eval_s"]
            chose = [line for line in r["log"].splitlines() if "rendering" in line or "chosen" in line]
            print(f"  batch {b}: {r['frames']} frames in {r['eval_s']:.1f} s = {fps:.2f} frames/s: "
                  f"{fps / best:.2f} of the render bound; peak memory {r['peak_mib']:.0f} MiB (all processes); "
                  f"videos {r['video_kib']:.0f} KiB; wall {r['wall_s']:.1f} s" + "".join(f"\n    {c}" for c in chose),
                  flush=True)
        if not args.quick:
            print("\n== lerobot-eval (its defaults: videos on)", flush=True)
            for b in (s for s in sizes if s <= 2):
                theirs = lerobot_eval(policy, tmp / f"lerobot_b{b}", b)
                same = same_episodes(ours[b]["episodes"], theirs["episodes"])
                print(f"  batch {b}: eval {theirs['eval_s']:.1f} s (runner {ours[b]['eval_s']:.1f} s: "
                      f"{theirs['eval_s'] / ours[b]['eval_s']:.2f}x faster); peak memory {theirs['peak_mib']:.0f} MiB "
                      f"(runner {ours[b]['peak_mib']:.0f}: {ours[b]['peak_mib'] / theirs['peak_mib']:.2f} of it); "
                      f"per-episode results {'identical' if same else 'DIFFER'}", flush=True)
        print(f"\n== memory per worker: batch size 2, {args.memory_steps}-step episodes", flush=True)
        for per_worker in (1, 10):
            r = runner_run(policy, tmp / f"memory_{per_worker}", 2, 2 * per_worker, args.memory_steps)
            roles = r["peaks_mib"]
            print(f"  {per_worker} episode(s) per worker: peak RSS (MiB): workers "
                  f"{', '.join(f'{m:.0f}' for m in roles.get('worker', []))}; main {max(roles.get('main', [0])):.0f}; "
                  f"all processes {r['peak_mib']:.0f}", flush=True)


if __name__ == "__main__":
    main()
