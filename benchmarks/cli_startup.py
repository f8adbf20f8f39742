"""How long runner's commands take to start, side by side with a bare interpreter (not a timed test).

    .venv/bin/python benchmarks/cli_startup.py                       # this checkout, 15 interleaved rounds
    .venv/bin/python benchmarks/cli_startup.py --against /tmp/base   # and another checkout of runner (before/after)
    .venv/bin/python benchmarks/cli_startup.py --run                 # also `runner run`'s fixed start-up

Every command runs in a fresh process with this interpreter, `runner` as `python -c 'from runner.cli.main import
main; main()'` with the checkout first on sys.path (PYTHONPATH), from the checkout's root. The rounds interleave the
commands (and the checkouts), so that a machine whose load drifts slows them alike; medians are printed, and each
command's excess over its yardstick: `python -c pass` for --version/--help, `import yaml, jsonschema` for validate.
Beside the times, a proxy that noise cannot move: the number of modules imported (`python -X importtime`).

Shipped specs whose env.task names a `module:Id` Gym id import that module (e.g. ALOHA's gym_aloha imports
dm_control and MuJoCo): `validate` must, to check the id, and imports the id's entry-point module as well when the
spec sets env.kwargs (to check them against the env's constructor). That import is measured apart (`import MODULE,
ENTRY_MODULE`) and subtracted in the "excess w/o id import" column.

--run: `runner run` of a one-step Meta-World episode (scripted expert, batch size 1, no video): its wall time minus
the episodes' own time (eval_s in eval_info.json) is the fixed start-up and close of a run.
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

REPO = Path(__file__).resolve().parents[1]
LAUNCH = "import sys; from runner.cli.main import main; sys.exit(main())"
RENDER_ENV = {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def checkout(text: str) -> Path:
    path = Path(text).resolve()
    if not (path / "runner" / "cli" / "main.py").is_file():
        raise argparse.ArgumentTypeError(f"{text}: not a checkout of runner (no runner/cli/main.py)")
    return path


def environment(root: Path) -> dict[str, str]:
    return {**os.environ, **RENDER_ENV, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "0"}


def timed(argv: list[str], root: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=root, env=environment(root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"cli_startup: {' '.join(argv[-3:])} failed in {root} (exit {done.returncode}): "
                         f"{done.stderr.strip()[-500:]}")
    return elapsed


def modules(argv: list[str], root: Path) -> int:
    """How many modules the command imports (lines of -X importtime)."""
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], cwd=root, env=environment(root),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return sum(1 for line in done.stderr.splitlines() if line.startswith("import time:") and "|" in line
               and not line.rstrip().endswith("package"))


def gym_module(spec: Path) -> str | None:
    """What `validate` imports of a spec's `module:Id` Gym task, if any (extends resolved): the module, and when the
    spec sets env.kwargs, the id's entry-point module too (validate reads its constructor to check them)."""
    import importlib

    from runner.spec import load_spec

    env = load_spec(spec).env
    task = env.task.split(",")[0]
    if env.type != "gym" or ":" not in task:
        return None
    module, _, name = task.rpartition(":")
    modules = [module]
    if env.kwargs:
        importlib.import_module(module)
        from gymnasium.envs.registration import registry

        point = registry[name].entry_point
        if isinstance(point, str):
            modules.append(point.partition(":")[0])
    return ", ".join(dict.fromkeys(modules))


def run_argv(py: str, out: Path) -> list[str]:
    """`runner run` of one one-step Meta-World episode with the scripted expert."""
    return [py, "-c", LAUNCH, "run", "specs/metaworld.yaml", "--set", "policy.type=scripted", "--set",
            "env.task=reach-v3", "--set", "eval.n_episodes=1", "--set", "env.max_steps=1", "--set", "eval.videos=0",
            "--batch-size", "1", "--no-progress", "--output-dir", str(out)]


def run_phases(py: str, root: Path) -> tuple[float, float, float]:
    """(start-up, episodes, close) of one `runner run`, in seconds (see --run)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        start = time.perf_counter()
        proc = subprocess.Popen(run_argv(py, out), cwd=root, env=environment(root), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        opened = None
        while proc.poll() is None:
            if opened is None and (out / "run.json").exists():
                opened = time.perf_counter() - start
            time.sleep(0.002)
        wall = time.perf_counter() - start
        stderr = proc.stderr.read() if proc.stderr else ""
        if proc.returncode != 0 or opened is None:
            raise SystemExit(f"cli_startup: runner run failed in {root} (exit {proc.returncode}): {stderr[-500:]}")
        eval_s = json.loads((out / "eval_info.json").read_text())["overall"]["eval_s"]
    return opened, eval_s, wall - opened - eval_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=positive, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--against", type=checkout, default=None, metavar="DIR",
                        help="another checkout of runner to measure beside this one (e.g. a git worktree of main)")
    parser.add_argument("--run", action="store_true", help="also time `runner run`'s fixed start-up (slower)")
    args = parser.parse_args()

    py = sys.executable
    roots = {"this": REPO, **({"against": args.against} if args.against else {})}
    specs = sorted(p.name for p in (REPO / "specs").glob("*.yaml") if not p.name.startswith("_"))
    yardsticks = {"python -c pass": [py, "-c", "pass"], "import yaml, jsonschema": [py, "-c", "import yaml, jsonschema"]}
    commands = {"runner --version": ["--version"], "runner --help": ["--help"],
                **{f"runner validate specs/{s}": ["validate", f"specs/{s}"] for s in specs}}
    id_imports = {}
    for spec in specs:
        module = gym_module(REPO / "specs" / spec)
        if module:
            yardsticks[f"import {module}"] = [py, "-c", f"import {module}"]
            id_imports[f"runner validate specs/{spec}"] = f"import {module}"

    times: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        print(f"round {round_ + 1}/{args.rounds}", file=sys.stderr, flush=True)
        for name, argv in yardsticks.items():
            times.setdefault(("-", name), []).append(timed(argv, REPO))
        for label, root in roots.items():
            for name, argv in commands.items():
                times.setdefault((label, name), []).append(timed([py, "-c", LAUNCH, *argv], root))
    median = {key: statistics.median(values) for key, values in times.items()}

    print(f"\n{args.rounds} interleaved rounds, medians (s); Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at the end")
    print(f"{'command':<44} {'checkout':<8} {'median':>7} {'excess':>7} {'excess w/o id import':>21} {'modules':>8}")
    for name, argv in yardsticks.items():
        print(f"{name:<44} {'-':<8} {median[('-', name)]:>7.3f} {'':>7} {'':>21} {modules(argv, REPO):>8}")
    for name, argv in commands.items():
        yardstick = "python -c pass" if "validate" not in name else "import yaml, jsonschema"
        for label, root in roots.items():
            value = median[(label, name)]
            excess = value - median[("-", yardstick)]
            without = excess - (median[("-", id_imports[name])] - median[("-", "python -c pass")]) \
                if name in id_imports else excess
            print(f"{name:<44} {label:<8} {value:>7.3f} {excess:>+7.3f} {without:>+21.3f} "
                  f"{modules([py, '-c', LAUNCH, *argv], root):>8}")

    if args.run:
        rounds = min(args.rounds, 5)
        print(f"\n`runner run` of a one-step episode, medians of {rounds} interleaved rounds: start-up = until run.json "
              "exists (the run directory is open; the first episode starts next), episodes = eval_s, close = the "
              "rest (outputs, report.html)")
        phases: dict[str, list[tuple[float, float, float]]] = {}
        for _ in range(rounds):
            for label, root in roots.items():
                phases.setdefault(label, []).append(run_phases(py, root))
        for label, root in roots.items():
            with tempfile.TemporaryDirectory() as tmp:
                count = modules(run_argv(py, Path(tmp) / "out"), root)
            start, episodes, close = (statistics.median(p[i] for p in phases[label]) for i in range(3))
            print(f"  {label:<8} start-up {start:.3f} s, episodes {episodes:.3f} s, close {close:.3f} s "
                  f"({count} modules imported in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
