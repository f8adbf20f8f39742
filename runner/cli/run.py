"""`runner run`: evaluate the spec's policy on the spec's benchmark (the engine is runner.engine)."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.cli.common import HelpFormatter, add_set_option, say

DESCRIPTION = """\
Evaluate the spec's policy on the spec's benchmark and write the results to the output directory:
  episodes.jsonl   one line per finished episode, written as it finishes
  eval_info.json   per task, per group and overall success (with Wilson 95% intervals), LeRobot's layout
  metrics.json     the CI summary (env, task, policy, pc_success, ..., task_descriptions)
  videos/<group>_<task_id>/eval_episode_<k>.mp4   the first eval.videos episodes of each task

Seeds: episode k of every task uses seed eval.seed + k (env reset and seeded policies), so every
episode's result is the same whatever the batch size, the number of workers or the order in which
episodes finish.

Episodes run on eval.batch_size slots (0: auto from the CPUs), each env in its own worker process
(in this process when the batch size is 1 or eval.use_async_envs is false), never more than one
simulator per slot. A slot starts another episode as soon as its current one ends (--schedule).
Ctrl-C stops scheduling, closes the workers and exits with 130; episodes.jsonl then holds every
episode finished so far.

examples:
  runner run specs/metaworld.yaml --set policy.type=scripted --set env.task=easy --set eval.n_episodes=5
  runner run specs/metaworld.yaml --set policy.type=random --set env.task=push-v3,reach-v3 --batch-size 2
  runner run specs/metaworld.yaml --set policy.type=python --set policy.path=my_policies:make_policy
  runner run my_gym_benchmark.yaml --output-dir outputs/cartpole
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("run", help="run an evaluation", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("spec", metavar="SPEC", help="the benchmark spec (specs/<name>.yaml)")
    parser.add_argument("--output-dir", type=Path, default=None, metavar="DIR",
                        help="where results go (default: outputs/eval/<date>/<time>_<name>/)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="N",
                        help="envs run at once (overrides eval.batch_size; 0: auto)")
    parser.add_argument("--policy-in-main", action="store_true",
                        help="run per-env policies (scripted, random) in this process, batched across workers, "
                             "instead of inside each worker (slower; the path LeRobot policies always take)")
    parser.add_argument("--schedule", choices=("spread", "task-major"), default="spread",
                        help="which episode a free slot takes: spread = keep its task, else a task no other slot "
                             "is on (each env built about once; default); task-major = all slots on one task "
                             "at a time (every slot builds every task's env). Results are the same.")
    parser.add_argument("--episode-timeout", type=float, default=None, metavar="SECONDS",
                        help="fail when one episode runs longer than this (default: no limit)")
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runner.engine import RunOptions, evaluate
    from runner.errors import ConfigError
    from runner.results import default_output_dir, summary_table
    from runner.spec import load_spec

    if args.batch_size is not None and args.batch_size < 0:
        raise ConfigError("--batch-size must be >= 0 (0: auto)")
    if args.episode_timeout is not None and args.episode_timeout <= 0:
        raise ConfigError("--episode-timeout must be > 0")
    spec = load_spec(args.spec, args.overrides)
    out_dir = args.output_dir or default_output_dir(spec.name)
    options = RunOptions(batch_size=args.batch_size, policy_in_workers=False if args.policy_in_main else None,
                         episode_timeout_s=args.episode_timeout, schedule=args.schedule, progress=not args.no_progress)
    say(f"{spec.name}: env {spec.env.type} task {spec.env.task}, policy {spec.policy.type}; results in {out_dir}")
    result = evaluate(spec, out_dir, options)
    say(summary_table(result.eval_info))
    where = "worker processes" if result.processes else "this process"
    policy_where = "run per env" if result.policy_in_workers else "batched in the main process"
    say(f"batch size {result.batch_size} ({where}; policy {policy_where}); results in {result.out_dir}")
    return 0
