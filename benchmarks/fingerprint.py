"""What the benchmark fingerprint and the per-episode initial states cost a run, and how long `runner check` takes.

Workload: a state-based Meta-World run (the scripted experts, no images, no videos) of the easy group, 28 tasks x 5
episodes (`--quick`: 4 tasks x 2), through `runner run` as a user starts it. Per round, side by side:

1. `runner run`: wall time of the whole command;
2. in this process, what the run adds for trust: `runner.engine.fingerprint.collect` with the asset digests cached
   (what every run after the first pays) and cold (the first run on a machine: Meta-World's 40 MB of assets hashed),
   and the initial-state hash (`adapter.state(env, observation).digest` after a reset) timed over the workload's
   resets, spread over the run's workers as the run spreads them;
3. `runner check specs/metaworld.yaml` against the committed reference: wall time.

Targets (issue 26): (2, cached) / (1) < 2 %; (3) < 60 s on 2 cores.

usage: .venv/bin/python benchmarks/fingerprint.py [--quick] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RUNNER = [sys.executable, "-m", "runner.cli.main"]
SPEC = REPO / "specs" / "metaworld.yaml"


def workload(quick: bool) -> list[str]:
    tasks = "reach-v3,push-v3,button-press-v3,drawer-open-v3" if quick else "easy"
    return ["policy.type=scripted", f"env.task={tasks}", f"eval.n_episodes={2 if quick else 5}", "eval.videos=0"]


def run_wall(sets: list[str], out: Path) -> tuple[float, int, int]:
    """(wall s, episodes, batch size) of `runner run` (timed as videos.py times it)."""
    from videos import run  # this folder is sys.path[0]

    done = run(sets, out, None)
    return done["wall_s"], (out / "episodes.jsonl").read_text().count("\n"), done["batch"]


def trust_cost(sets: list[str], episodes: int) -> dict[str, float]:
    """Seconds: the fingerprint (cached and cold asset digests) and one initial-state hash (median)."""
    from runner.engine import fingerprint
    from runner.engine.preflight import Preflight
    from runner.results import provenance
    from runner.spec import load_spec

    spec = load_spec(SPEC, sets)
    prepared = Preflight(spec).run()
    prov = provenance.collect(spec, prepared.served)

    def collect() -> float:
        start = time.perf_counter()
        fingerprint.collect(spec, prepared.adapter, prepared.renderer, prepared.obs_keys, prov,
                            prepared.policy.runtime())
        return time.perf_counter() - start

    with tempfile.TemporaryDirectory() as cache:
        previous = os.environ.get("XDG_CACHE_HOME")
        os.environ["XDG_CACHE_HOME"] = cache
        try:
            cold = collect()
            cached = statistics.median(collect() for _ in range(5))
        finally:
            if previous is None:
                os.environ.pop("XDG_CACHE_HOME", None)
            else:
                os.environ["XDG_CACHE_HOME"] = previous
    adapter, tasks = prepared.adapter, prepared.tasks
    hashes = []
    per_task = max(1, episodes // len(tasks))
    for task in tasks:
        env = adapter.make(task, spec.env, obs_keys=prepared.obs_keys, video=False)
        for k in range(per_task):
            observation, _ = env.reset(seed=spec.eval.seed + k)
            start = time.perf_counter()
            adapter.state(env, observation).digest
            hashes.append(time.perf_counter() - start)
        env.close()
    return {"cold_s": cold, "cached_s": cached, "state_s": statistics.median(hashes)}


def check_wall() -> float:
    start = time.perf_counter()
    proc = subprocess.run([*RUNNER, "check", str(SPEC)], capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"runner check failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 tasks x 2 episodes")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sets = workload(args.quick)
    shares, checks = [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            wall, episodes, batch = run_wall(sets, Path(tmp) / "run")
        cost = trust_cost(sets, episodes)
        added = cost["cached_s"] + episodes * cost["state_s"] / batch
        shares.append(added / wall)
        checks.append(check_wall())
        print(f"round {r + 1}: run {wall:.1f} s ({episodes} episodes, batch {batch}); fingerprint "
              f"{1e3 * cost['cached_s']:.1f} ms cached, {1e3 * cost['cold_s']:.0f} ms cold; state hash "
              f"{1e6 * cost['state_s']:.0f} us an episode; "
              f"added {100 * added / wall:.2f} % of the run; runner check {checks[-1]:.1f} s", flush=True)
    share, check = statistics.median(shares), statistics.median(checks)
    print(f"median of {args.rounds}: fingerprint + initial states add {100 * share:.2f} % to the run (target < 2 %: "
          f"{'met' if share < 0.02 else 'NOT met'}); runner check specs/metaworld.yaml {check:.1f} s (target < 60 s: "
          f"{'met' if check < 60 else 'NOT met'})")


if __name__ == "__main__":
    main()
