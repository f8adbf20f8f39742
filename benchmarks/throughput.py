"""Runner's throughput against the simulator bound, measured in one run on a fixed Meta-World workload.

Workload: the `easy` group (28 tasks), Meta-World's scripted experts, 10 episodes per task, seeds
1000.., no videos (`--quick`: the first 4 easy tasks x 4 episodes).

1. Single process, no runner machinery: for each task build the env (runner's Meta-World adapter),
   then for each episode reset with its seed and loop expert action + env.step until done. This is
   the simulator's own cost of the workload: T_single (env builds + resets + steps + expert), of
   which T_step is the time inside env.step. Imports and the load of the robot's meshes into MuJoCo's
   asset cache happen before the clock starts (runner pays both once per run, in its forkserver).
2. W copies of that loop side by side (W > 1), each on a 1/W share of the tasks, forked like runner's
   workers, with no runner code: the machine's parallel ceiling for this simulator.
3. `runner` (`runner.engine.evaluate`) on the same episodes with W workers: the policy inside the
   workers (the default for scripted/random) with both schedules, then the policy batched in the
   main process (the path LeRobot policies take).

Bound = T_single / W (= sum of episode steps x single-process cost per step / W). Printed ratios:
- end to end: bound / wall time of the whole evaluate() call (workers forked, envs built, outputs
  written); importing the simulator in the forkserver is paid once per process and printed apart;
- throughput: bound / time from the first episode's start to the last one's end;
- runner / ceiling: wall time of the W plain loops / runner's (runner's own overhead);
- CPU ratio x balance: (CPU of the single run / CPU of runner, all processes) x (mean / max worker
  CPU). On a machine whose W CPUs are free this is the throughput ratio; on a shared machine the wall
  ratios mostly measure the neighbours, so the script also prints how many CPUs two busy processes
  actually get.

usage: .venv/bin/python benchmarks/throughput.py [--quick] [--workers N] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", "egl")


def _burn(seconds: float, out: Any) -> None:
    start, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        pass
    out.put(time.process_time() - cpu)


def available_cpus(n: int, seconds: float = 1.0) -> float:
    """CPU-seconds per second that n busy processes get right now (n on an idle machine with n CPUs)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_burn, args=(seconds, out)) for _ in range(n)]
    for p in procs:
        p.start()
    total = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def single_process(spec, tasks, n_episodes: int) -> dict:
    """The workload in this process with no engine: per task one env, episodes one after the other."""
    import runner.envs.metaworld.preload  # noqa: F401  (the one-time asset cache load, as in runner's forkserver)
    from runner.envs import ENV_STATE, get_adapter
    from runner.policies.base import EpisodeStart
    from runner.policies.scripted.policy import ScriptedExpert

    adapter = get_adapter("metaworld")
    steps = 0
    t_step = 0.0
    t_build = 0.0
    successes = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for task in tasks:
        t0 = time.perf_counter()
        env = adapter.make(task, spec.env, obs_keys=frozenset({ENV_STATE}), video=False)
        t_build += time.perf_counter() - t0
        limit = adapter.max_steps(task, spec.env)
        expert = ScriptedExpert()
        for k in range(n_episodes):
            seed = spec.eval.seed + k
            obs, _ = env.reset(seed=seed)
            expert.reset(EpisodeStart(0, task, k, seed, env.action_space))
            success = False
            for n in range(1, limit + 1):  # noqa: B007 (n: the episode length)
                action = expert.act(obs)
                t0 = time.perf_counter()
                obs, _, terminated, truncated, info = env.step(action)
                t_step += time.perf_counter() - t0
                success = success or info["is_success"]
                if terminated or truncated:
                    break
            steps += n
            successes += success
        env.close()
    return {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu_start, "step_s": t_step,
            "build_s": t_build, "steps": steps, "successes": successes}


def _plain_part(index: int, workers: int, overrides: list[str], out: Any) -> None:
    """One of `workers` plain loops (see `plain_parallel`), in a process of its own."""
    import gc

    from runner.envs import get_adapter
    from runner.spec import load_spec

    spec = load_spec(REPO / "specs" / "metaworld.yaml", overrides)
    tasks = get_adapter("metaworld").tasks(spec.env)[index::workers]
    gc.freeze()  # as runner's workers
    out.put(single_process(spec, tasks, spec.eval.n_episodes))


def plain_parallel(overrides: list[str], workers: int) -> dict:
    """The machine's parallel ceiling: `workers` copies of the plain single-process loop side by side, each on
    every W-th task, forked like runner's workers (forkserver with the simulator and its assets preloaded)."""
    import multiprocessing as mp

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["metaworld", "metaworld.policies", "runner.envs.metaworld.preload"])
    out = ctx.Queue()
    procs = [ctx.Process(target=_plain_part, args=(i, workers, overrides, out)) for i in range(workers)]
    for p in procs:
        p.start()
    parts = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return {"wall_s": max(p["wall_s"] for p in parts), "cpu_s": [p["cpu_s"] for p in parts],
            "steps": sum(p["steps"] for p in parts)}


def with_runner(spec, workers: int, policy_in_workers: bool, schedule: str) -> dict:
    from runner.engine import RunOptions, evaluate

    with tempfile.TemporaryDirectory(prefix="runner-bench-") as out:
        start = time.perf_counter()
        result = evaluate(spec, Path(out), RunOptions(batch_size=workers, policy_in_workers=policy_in_workers,
                                                      schedule=schedule, progress=False))
        wall = time.perf_counter() - start
    steps = sum(r.steps for r in result.records)
    steady = max(e.end_s for e in result.trace) - min(e.start_s for e in result.trace)
    return {"wall_s": wall, "steady_s": steady, "cpu_s": result.cpu_s, "worker_cpu_s": result.worker_cpu_s,
            "steps": steps, "episodes": len(result.records),
            "successes": sum(r.success for r in result.records), "processes": result.processes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 tasks x 4 episodes instead of 28 x 10")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="runner's batch size (default: CPUs)")
    parser.add_argument("--schedule", nargs="+", default=["spread", "task-major"], help="schedules to measure")
    parser.add_argument("--repeat", type=int, default=1, help="repeat the measurement (medians are printed)")
    parser.add_argument("--skip-batched", action="store_true", help="skip the main-process (batched) policy run")
    args = parser.parse_args(argv)

    from runner.envs import get_adapter
    from runner.spec import load_spec

    n_episodes = 4 if args.quick else 10
    from runner.envs.metaworld.catalog import METAWORLD_GROUPS

    task = ",".join(METAWORLD_GROUPS["easy"][:4]) if args.quick else "easy"
    overrides = ["policy.type=scripted", "policy.path=null", f"env.task={task}", f"eval.n_episodes={n_episodes}",
                 "eval.videos=0", "eval.seed=1000", "eval.use_async_envs=true"]
    spec = load_spec(REPO / "specs" / "metaworld.yaml", overrides)
    tasks = get_adapter("metaworld").tasks(spec.env)
    w = args.workers
    print(f"workload: {len(tasks)} Meta-World tasks ({spec.env.task}) x {n_episodes} episodes, scripted experts, "
          f"{w} workers, {os.cpu_count()} CPUs; load average before: {os.getloadavg()[0]:.2f}; CPUs available to "
          f"{w} busy processes now: {available_cpus(w):.2f}", flush=True)

    import metaworld  # noqa: F401  (import cost is not part of any measurement)

    # Start the forkserver (it imports the simulator once per process), so that no measured run pays it.
    warm = load_spec(REPO / "specs" / "metaworld.yaml", [*overrides[:2], f"env.task={tasks[0].name}",
                                                         f"eval.n_episodes={w}", "eval.videos=0"])
    t0 = time.perf_counter()
    warm_run = with_runner(warm, w, True, "spread")
    assert warm_run["processes"] or w == 1
    print(f"start-up, paid once per `runner run`: {time.perf_counter() - t0:.2f} s (forkserver start, importing the "
          f"simulator and loading its assets in it, {w} workers, {w} episodes)")

    n_eps = len(tasks) * n_episodes
    ratios: dict[str, list[float]] = {}
    for rep in range(args.repeat):
        single = single_process(spec, tasks, n_episodes)
        plain = plain_parallel(overrides, w) if w > 1 else None
        runs = {f"policy in workers, {s}": with_runner(spec, w, True, s) for s in args.schedule}
        if not args.skip_batched:
            runs["policy batched in main, spread"] = with_runner(spec, w, False, "spread")
        steps = single["steps"]
        bound_s = single["wall_s"] / w
        physics_bound_s = single["step_s"] / w
        print(f"[{rep + 1}/{args.repeat}] single process: {steps} steps, {single['successes']}/{n_eps} successes in "
              f"{single['wall_s']:.2f} s, CPU {single['cpu_s']:.2f} s ({1000 * single['wall_s'] / steps:.3f} ms/step "
              f"all in; env.step alone {1000 * single['step_s'] / steps:.3f} ms/step; env builds "
              f"{single['build_s']:.2f} s) = {steps / single['wall_s']:.0f} steps/s")
        print(f"      simulator bound with {w} workers: {bound_s:.2f} s = {steps / bound_s:.0f} steps/s, "
              f"{n_eps / bound_s:.1f} episodes/s (physics only: {physics_bound_s:.2f} s)")
        if plain is not None:
            ceiling = bound_s / plain["wall_s"]
            print(f"      {w} plain loops side by side (no runner; each on a 1/{w} share of the tasks): "
                  f"{plain['wall_s']:.2f} s, CPU {', '.join(f'{c:.2f}' for c in plain['cpu_s'])} s: "
                  f"{ceiling:.2f} of the bound (the machine's parallel ceiling)")
            ratios.setdefault("plain loops side by side (ceiling)", []).append(ceiling)
        for name, run in runs.items():
            if run["steps"] != steps:
                print(f"      WARNING: {name} ran {run['steps']} steps, the single-process run {steps}")
            ratio, steady_ratio = bound_s / run["wall_s"], bound_s / run["steady_s"]
            cpu_ratio = single["cpu_s"] / run["cpu_s"]
            workers = run["worker_cpu_s"]
            balance = (sum(workers) / len(workers)) / max(workers) if workers else 1.0
            print(f"      runner, {name}: {run['wall_s']:.2f} s = {run['steps'] / run['wall_s']:.0f} env steps/s, "
                  f"{run['episodes'] / run['wall_s']:.1f} episodes/s, {run['successes']}/{run['episodes']} successes")
            physics_ratio = physics_bound_s / run["wall_s"]
            print(f"        ratio to the bound: {ratio:.2f} end to end, {steady_ratio:.2f} from the first episode's "
                  f"start to the last one's end ({run['steady_s']:.2f} s), physics-only {physics_ratio:.2f}")
            if plain is not None:
                print(f"        runner / ceiling: {plain['wall_s'] / run['wall_s']:.2f}")
                ratios.setdefault(name + " / ceiling", []).append(plain["wall_s"] / run["wall_s"])
            print(f"        CPU {run['cpu_s']:.2f} s (workers {', '.join(f'{c:.2f}' for c in workers)}): CPU ratio "
                  f"{cpu_ratio:.2f} x worker balance {balance:.2f} = {cpu_ratio * balance:.2f} (the wall ratio a "
                  f"machine with {w} free CPUs would show, start-up aside)")
            ratios.setdefault(name, []).append(ratio)
            ratios.setdefault(name + " (steady)", []).append(steady_ratio)
            ratios.setdefault(name + " (CPU x balance)", []).append(cpu_ratio * balance)
    if args.repeat > 1:
        for name, values in ratios.items():
            print(f"median ratio, {name}: {statistics.median(values):.2f} over {len(values)} runs")
    print(f"load average after: {os.getloadavg()[0]:.2f}; CPUs available to 2 busy processes now: "
          f"{available_cpus(2):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
