"""`runner list`: the benchmarks, their tasks or suites, and task text where the simulator is installed."""

from __future__ import annotations

import argparse

from runner.cli.common import HelpFormatter, add_set_option, say, spec_paths
from runner.errors import MissingDependencyError

DESCRIPTION = """\
List benchmarks (specs) and the tasks each evaluates, with natural-language task text.

examples:
  runner list
  runner list specs/libero.yaml --set env.task=libero_spatial,libero_goal
  runner list specs/metaworld.yaml --set env.task=easy --names-only
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("list", help="list benchmarks and their tasks", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("specs", nargs="*", metavar="SPEC", help="spec files (default: specs/*.yaml)")
    parser.add_argument("--names-only", action="store_true", help="only the benchmark names and descriptions")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runner.envs import get_adapter
    from runner.spec import load_specs

    for spec in load_specs(spec_paths(args.specs), args.overrides):
        say(f"{spec.name}: {spec.description}".rstrip(": "))
        say(f"  env {spec.env.type}, task {spec.env.task}; policy {spec.policy.type} {spec.policy.path or ''}".rstrip())
        if args.names_only:
            continue
        try:
            tasks = get_adapter(spec.env.type).tasks(spec.env)
        except MissingDependencyError as exc:
            say(f"  (task list unavailable: {exc})")
            continue
        for task in tasks:
            say(f"  {task.group}_{task.task_id:<3} {task.name:<32} {task.text or '(no task text)'}")
    return 0
