"""Image-based evaluation against the machine's render bound, in one run (needs .venv-lerobot: LeRobot's ACT and
lerobot-eval).

Workload: a seeded random-init ACT on Meta-World push-v3 (480x480 `observation.image`), seeds 1000.., videos of
every episode. `--policy default` (the default): LeRobot's ACT defaults (ResNet18 without pretrained weights,
dim_model 512, chunks of 100 executed whole), the policy of a trained ACT checkpoint; `--policy small`: dim_model
64 and chunks of 10 (a forward pass every 10 steps). A random policy never succeeds, so every episode runs
Meta-World's 500 steps (`--quick`: 90, and no lerobot-eval, which cannot shorten Meta-World episodes).

1. Render bound: plain loops, no runner engine and no policy, over the workload's own frames: the episodes'
   actions are computed first (the policy closed-loop on runner's env, untimed), then processes replay them on
   runner's Meta-World env (480x480 corner2 camera, LeRobot's settings: shadows, 4x multisampling) and time the
   step and render of every `--stride`-th step (the arm's pose changes a frame's cost by ~25%, so a loop that
   holds the arm still is no bound). B processes side by side for batch size B, process i replaying episode i,
   with llvmpipe's default thread count (every CPU) and with each process's share (LP_NUM_THREADS =
   max(1, CPUs // B)); the best of these is measured just before and just after runner's two timed runs at that
   batch size, and the bound is their mean (this machine's speed drifts by 10-40% over a run, so a bound measured
   once at the start is no yardstick for runs half an hour later).
2. runner at batch sizes 1, 2, 4 (one episode per slot): frames rendered (one per step and the reset frame, each
   also the video frame) per second in steady state: the difference between a run of full episodes and one of
   `--short` steps, over the difference in eval_s (which also counts starting the workers: reported as start-up);
   that over the bound. These two runs are not sampled for memory (see `measured`); a third run of full episodes
   is: peak memory of all its processes (summed PSS, shared pages split between the processes that
   map them, and summed RSS, which counts shared libraries once per process), sampled every 0.2 s.
3. lerobot-eval with its defaults (videos on) at the same batch sizes on the same episodes, sampled as runner's
   third run: its eval_s (which does not count making its envs) and peak memory against that run's, and the
   per-episode results checked against runner's (sum_reward to a few ulps, as the parity tests).
4. Memory per worker with 1 and with 10 episodes per worker (batch size 2, `--memory-steps` steps per episode).
5. The memory floor both tools stand on: one process that imports torch and LeRobot, loads the policy (through
   runner's LeRobot adapter, which calls LeRobot's own loading code), makes the env and runs 101 closed-loop steps
   (no video, no engine): its peak PSS, and each tool's peak at batch size 1 above it (memory_floor.py: stage by stage).

usage: .venv-lerobot/bin/python benchmarks/render_bound.py [--quick] [--policy default|small] [--batch-sizes 1,2,4]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import queue
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
HEAVY = {"numpy", "torch", "lerobot", "mujoco", "metaworld"}  # never imported by this process (see `measured`)


# ── 1. the render bound ───────────────────────────────────────────────────────────────────────────────────


def _env(obs_keys: frozenset[str] | None = None) -> tuple[Any, Any, Any]:
    """Runner's Meta-World env for the workload (the policy's observation keys), its task and its spec."""
    os.environ.update(RENDER_ENV)  # the same back end as the measured runs, whatever the caller's environment
    from runner.envs import AGENT_POS, PIXELS, get_adapter
    from runner.spec import load_spec

    spec = load_spec(REPO / "specs" / "metaworld.yaml", [f"env.task={TASK}", "policy.type=random"])
    adapter = get_adapter("metaworld")
    (task,) = adapter.tasks(spec.env)
    env = adapter.make(task, spec.env, obs_keys=obs_keys or frozenset({PIXELS, AGENT_POS}), video=True)
    return env, task, spec


def _trajectory(policy_dir: str, seed: int, steps: int | None, path: str) -> None:
    """The workload's actions for one episode (the policy closed-loop on runner's env, batch size 1), saved."""
    import numpy as np

    from runner.policies import make_policy
    from runner.policies.base import EpisodeStart
    from runner.spec import load_spec

    spec = load_spec(REPO / "specs" / "metaworld.yaml", [f"policy.path={policy_dir}", "policy.rename_map={}",
                                                          "policy.empty_cameras=0", "policy.device=cpu",
                                                          f"env.task={TASK}"])
    policy = make_policy(spec.policy, spec.env)
    env, task, _ = _env(frozenset(policy.observation_keys))
    observation, _ = env.reset(seed=seed)
    policy.reset([EpisodeStart(0, task, 0, seed, env.action_space, 1)])
    actions = []
    while len(actions) < (steps or 500):
        batch = {k: np.stack([v]) for k, v in observation.items()}
        actions.append(policy.select_action(batch, [task.text], [0])[0])
        observation, _, terminated, truncated, _ = env.step(actions[-1])
        if terminated or truncated:
            break
    np.save(path, np.stack(actions))
    env.close()


def trajectories(policy_dir: Path, seeds: list[int], steps: int | None, out: Path, cpus: int) -> list[Path]:
    ctx = mp.get_context("spawn")
    paths = [out / f"actions_{seed}.npy" for seed in seeds]
    for i in range(0, len(seeds), cpus):
        procs = [ctx.Process(target=_trajectory, args=(str(policy_dir), seed, steps, str(path)))
                 for seed, path in zip(seeds[i:i + cpus], paths[i:i + cpus], strict=True)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
            if p.exitcode:
                raise SystemExit(f"computing a trajectory failed ({p.exitcode})")
    return paths


def _render_loop(threads: int | None, seed: int, actions_path: str, stride: int, out: Any) -> None:
    """Replay an episode's actions; time the step and the observation's render of every `stride`-th step (the
    steps between advance the simulator only)."""
    if threads:
        os.environ["LP_NUM_THREADS"] = str(threads)
    import numpy as np

    env, _, _ = _env()
    env.reset(seed=seed)
    for _ in range(2):  # the GL context and the shadow map are set up by the first frames
        env._render(env._cameras[0])
    wall = cpu = 0.0
    frames = 0
    for i, action in enumerate(np.load(actions_path)):
        if i % stride:
            env._env.step(action)  # Meta-World's own step: no render
            continue
        start, cpu_start = time.perf_counter(), time.process_time()
        env.step(action)  # step + render, as in an episode
        wall += time.perf_counter() - start
        cpu += time.process_time() - cpu_start
        frames += 1
    out.put((wall, cpu, frames))
    env.close()


def render_loops(processes: int, threads: int | None, actions: list[Path], stride: int) -> dict[str, float]:
    """W processes side by side, process i replaying episode i's actions."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_render_loop, args=(threads, SEED + i, str(actions[i]), stride, out))
             for i in range(processes)]
    for p in procs:
        p.start()
    parts: list[tuple[float, float, int]] = []
    while len(parts) < len(procs):
        try:
            parts.append(out.get(timeout=5))
        except queue.Empty:
            failed = [p.exitcode for p in procs if p.exitcode]  # None while running, 0 once done
            if failed:
                for p in procs:
                    p.kill()
                raise SystemExit(f"a render loop failed (exit code {failed[0]}); its traceback is above") from None
    for p in procs:
        p.join()
    frames = sum(p[2] for p in parts)
    per_frame = sum(p[0] / p[2] for p in parts) / len(parts)  # each process's mean time a frame
    return {"fps": processes / per_frame, "ms_per_frame": 1000 * per_frame / processes,
            "cpu_ms_per_frame": 1000 * sum(p[1] for p in parts) / frames}


def bound_at(processes: int, cpus: int, share: int, actions: list[Path], stride: int) -> tuple[float, str]:
    """The render bound for `processes` at once: the best frames/s over llvmpipe's default thread count and each
    process's `share` of it; with each measurement, as text."""
    best, parts = 0.0, []
    for threads in (None,) if share == cpus else (None, share):
        r = render_loops(processes, threads, actions, stride)
        parts.append(f"{r['fps']:.2f} (LP_NUM_THREADS={threads or f'default ({cpus})'}, {r['ms_per_frame']:.0f} ms "
                     f"a frame, {r['cpu_ms_per_frame']:.0f} ms CPU)")
        best = max(best, r["fps"])
    return best, ", ".join(parts)


# ── runs, with their memory ───────────────────────────────────────────────────────────────────────────────


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0)
    except OSError:
        return 0


def _tree_rss_kib(root: int) -> dict[int, tuple[str, int, int]]:
    """(role, RSS, PSS) of `root` and every descendant, by pid; role: main, forkserver, worker (a forkserver's
    child), ffmpeg, or other."""
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
    found: dict[int, tuple[str, int, int]] = {}
    todo = [(root, "main")]
    while todo:
        pid, role = todo.pop()
        found[pid] = (role, rss.get(pid, 0), _pss_kib(pid))
        for child in children.get(pid, []):
            command = commands.get(child, "")
            kind = ("ffmpeg" if "ffmpeg" in command else "forkserver" if "forkserver" in command and role == "main"
                    else "worker" if role == "forkserver" else "other")
            todo.append((child, kind))
    return found


def measured(argv: list[str], log: Path, sample: bool = True) -> dict[str, Any]:
    """Run a command; its wall time and, with `sample`, the peaks of its process tree's summed PSS and summed RSS,
    and each process's peak RSS with its role. A sample costs ~65 ms of CPU here (reading the smaps of a process
    that maps torch walks its page tables), a fifth of a core at one sample every 0.2 s plus its own time: runs
    timed against the bound, whose loops are not sampled, are not sampled either. This process must not map what
    the measured ones map (torch held here hid 184 of a LeRobot process's 884 MiB of PSS): it imports none of it."""
    if sample and (held := sorted(HEAVY & sys.modules.keys())):
        raise SystemExit(f"this process imported {', '.join(held)}: the pages it maps would be shared with the "
                         f"measured processes and hidden from their PSS")
    peak_sum, peak_pss, peaks = 0, 0, {}
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **RENDER_ENV, "HF_HUB_OFFLINE": "1"})
        start = time.perf_counter()
        done = threading.Event()

        def sample_tree() -> None:
            nonlocal peak_sum, peak_pss
            while not done.is_set():
                tree = _tree_rss_kib(proc.pid)
                peak_sum = max(peak_sum, sum(kib for _, kib, _ in tree.values()))
                peak_pss = max(peak_pss, sum(pss for *_, pss in tree.values()))
                for pid, (role, kib, _) in tree.items():
                    peaks[pid] = (role, max(peaks.get(pid, (role, 0))[1], kib))
                done.wait(0.2)

        sampler = threading.Thread(target=sample_tree, daemon=True)
        if sample:
            sampler.start()
        code = proc.wait()
        wall = time.perf_counter() - start
        done.set()
        if sample:
            sampler.join()
    if code != 0:
        raise SystemExit(f"{Path(argv[0]).name} failed ({code}): {log.read_text()[-3000:]}")
    by_role: dict[str, list[float]] = {}
    for role, kib in peaks.values():
        by_role.setdefault(role, []).append(kib / 1024)
    return {"wall_s": wall, "peak_mib": peak_pss / 1024, "peak_rss_mib": peak_sum / 1024, "peaks_mib": by_role}


def runner_run(policy: Path, out: Path, batch: int, episodes: int, steps: int | None,
               sample: bool = True) -> dict[str, Any]:
    sets = [f"policy.path={policy}", "policy.rename_map={}", "policy.empty_cameras=0", "policy.device=cpu",
            f"env.task={TASK}", f"eval.seed={SEED}", f"eval.n_episodes={episodes}", f"eval.batch_size={batch}",
            f"eval.use_async_envs={'true' if batch > 1 else 'false'}", f"eval.videos={episodes}",
            *([f"env.max_steps={steps}"] if steps is not None else [])]
    run = measured([str(BIN / "runner"), "run", "specs/metaworld.yaml", "--no-progress", "--output-dir", str(out),
                    *(a for s in sets for a in ("--set", s))], out.with_suffix(".log"), sample)
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


def _prepare(out: str, kind: str, sizes: str) -> None:
    """In a child process: write the workload's policy; print the CPU count and each batch size's llvmpipe share."""
    from make_random_policy import build_random_act

    from runner.engine.plan import cpu_count, render_threads

    build_random_act(out, kind=kind)
    cpus = cpu_count()
    print(json.dumps({"cpus": cpus, "shares": {b: render_threads(cpus, int(b)) for b in sizes.split(",")}}))


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _sizes(text: str) -> list[int]:
    try:
        return [_positive(b) for b in text.split(",")]
    except argparse.ArgumentTypeError:
        message = f"expected positive integers separated by commas, e.g. 1,2,4; got {text!r}"
        raise argparse.ArgumentTypeError(message) from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="90-step episodes, no lerobot-eval")
    parser.add_argument("--policy", choices=("default", "small"), default="default",
                        help="ACT with LeRobot's defaults (chunks of 100) or small (chunks of 10)")
    parser.add_argument("--batch-sizes", type=_sizes, default=[1, 2, 4], metavar="B,B,...",
                        help="runner's batch sizes (default 1,2,4)")
    parser.add_argument("--stride", type=_positive, default=4, help="render loops time every STRIDE-th step's frame")
    parser.add_argument("--short", type=_positive, default=40,
                        help="steps of the short runs (steady state = difference); below the episodes' length")
    parser.add_argument("--memory-steps", type=_positive, default=50, help="steps of the memory-per-worker episodes")
    parser.add_argument("--floor", nargs=2, metavar=("POLICY", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--prepare", nargs=3, metavar=("OUT", "KIND", "SIZES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor:
        return _trajectory(args.floor[0], SEED, 101, args.floor[1])  # the floor, measured from outside
    if args.prepare:
        return _prepare(*args.prepare)
    sizes = args.batch_sizes
    steps = 90 if args.quick else None
    if args.short >= (steps or 500):
        parser.error(f"--short {args.short} must be below the episodes' {steps or 500} steps")
    kind = "act-default" if args.policy == "default" else "act"

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        policy = tmp / "act"
        argv = [sys.executable, __file__, "--prepare", str(policy), kind, ",".join(map(str, sizes))]
        prepared = json.loads(subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout)
        cpus, shares = prepared["cpus"], {int(b): t for b, t in prepared["shares"].items()}
        print(f"machine: {cpus} CPUs; workload: random-init ACT ({kind}) on {TASK}, 480x480 corner2 camera, videos "
              f"on, {steps or 500}-step episodes", flush=True)
        print(f"\n== render bound and runner, side by side for each batch size B (bound: B plain loops replaying the "
              f"workload's episodes, seeds {SEED}..: step + render the observation of every {args.stride}th step, no "
              f"policy, measured just before and just after runner's runs; runner: one episode per slot, steady "
              f"state = full run - short run)", flush=True)
        actions = trajectories(policy, [SEED + i for i in range(max(sizes))], steps, tmp, cpus)
        ours = {}
        for b in sizes:
            before = bound_at(b, cpus, shares[b], actions, args.stride)
            short = runner_run(policy, tmp / f"runner_b{b}_short", b, b, args.short, sample=False)
            timed = runner_run(policy, tmp / f"runner_b{b}_timed", b, b, steps, sample=False)
            after = bound_at(b, cpus, shares[b], actions, args.stride)
            r = ours[b] = runner_run(policy, tmp / f"runner_b{b}", b, b, steps)  # memory; lerobot-eval's yardstick
            bound = (before[0] + after[0]) / 2
            fps = (timed["frames"] - short["frames"]) / (timed["eval_s"] - short["eval_s"])
            start_up = timed["eval_s"] - timed["frames"] / fps
            chose = [line for line in r["log"].splitlines() if "rendering" in line or "chosen" in line]
            if args.quick:
                chose.append(f"(--quick: {steps}-step episodes are a smoke test; their steady state is too short "
                             f"for a ratio to mean much)")
            print(f"  {b} process{'es' if b > 1 else ''}, frames/s before: {before[1]}; after: {after[1]}; bound "
                  f"{bound:.2f} (the best of each, averaged)", flush=True)
            print(f"  batch {b}: {fps:.2f} frames/s: {fps / bound:.2f} of the bound; {timed['frames']} frames in "
                  f"{timed['eval_s']:.1f} s eval_s, of which ~{start_up:.1f} s start-up; videos {r['video_kib']:.0f} "
                  f"KiB; a third run, sampled for memory ({r['eval_s']:.1f} s eval_s): peak {r['peak_mib']:.0f} MiB "
                  f"PSS, {r['peak_rss_mib']:.0f} MiB summed RSS"
                  + "".join(f"\n    {c}" for c in chose), flush=True)
        theirs_by_batch = {}
        if not args.quick:
            print("\n== lerobot-eval (its defaults: videos on)", flush=True)
            for b in sizes:
                theirs = theirs_by_batch[b] = lerobot_eval(policy, tmp / f"lerobot_b{b}", b)
                same = same_episodes(ours[b]["episodes"], theirs["episodes"])
                print(f"  batch {b}: eval_s {theirs['eval_s']:.1f} (runner {ours[b]['eval_s']:.1f}: "
                      f"{theirs['eval_s'] / ours[b]['eval_s']:.2f}x faster), wall {theirs['wall_s']:.1f} s (runner "
                      f"{ours[b]['wall_s']:.1f} s); peak memory {theirs['peak_mib']:.0f} MiB PSS (runner "
                      f"{ours[b]['peak_mib']:.0f}: {ours[b]['peak_mib'] / theirs['peak_mib']:.2f} of it), "
                      f"{theirs['peak_rss_mib']:.0f} MiB RSS (runner {ours[b]['peak_rss_mib']:.0f}: "
                      f"{ours[b]['peak_rss_mib'] / theirs['peak_rss_mib']:.2f}); per-episode results "
                      f"{'identical' if same else 'DIFFER'}", flush=True)
        print(f"\n== memory per worker: batch size 2, {args.memory_steps}-step episodes", flush=True)
        for per_worker in (1, 10):
            r = runner_run(policy, tmp / f"memory_{per_worker}", 2, 2 * per_worker, args.memory_steps)
            roles = r["peaks_mib"]
            workers = roles.get("worker", [])
            kept = [m for m in workers if m >= 0.1 * max(workers, default=0)]  # not one caught mid-fork
            print(f"  {per_worker} episode(s) per worker: peak RSS (MiB): workers {', '.join(f'{m:.0f}' for m in kept)}"
                  f"; main {max(roles.get('main', [0])):.0f}; all processes {r['peak_mib']:.0f} PSS", flush=True)
        if 1 in ours:
            theirs = theirs_by_batch.get(1)
            argv = [sys.executable, str(Path(__file__).resolve()), "--floor", str(policy), str(tmp / "floor.npy")]
            floor = measured(argv, tmp / "floor.log")["peak_mib"]
            print(f"\n== memory floor (one process: torch and LeRobot imported, the policy loaded, the env made, 101 "
                  f"closed-loop steps, no video)\n  {floor:.0f} MiB PSS; above it at batch size 1: runner "
                  f"{ours[1]['peak_mib'] - floor:+.0f} MiB" + (
                      f", lerobot-eval {theirs['peak_mib'] - floor:+.0f} MiB" if theirs else ""), flush=True)


if __name__ == "__main__":
    main()
