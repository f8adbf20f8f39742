"""`runner list`: the benchmarks, their tasks or suites, and task text where the simulator is installed."""

from __future__ import annotations

import argparse

from runner.cli.common import HelpFormatter, add_set_option, say, spec_paths
from runner.errors import MissingDependencyError

DESCRIPTION = """\
List benchmarks (specs) and the tasks each evaluates, with natural-language task text.
--options lists instead the options (env.kwargs / policy.kwargs) of the env families and policy types named
(default: all): type, default and meaning, from the schemas that check them (docs/options.md is the same).

examples:
  runner list
  runner list specs/libero.yaml --set env.task=libero_spatial,libero_goal
  runner list specs/metaworld.yaml --set env.task=easy --names-only
  runner list --options metaworld
  runner list --options remote --format markdown
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("list", help="list benchmarks and their tasks", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("specs", nargs="*", metavar="SPEC", help="spec files (default: specs/*.yaml); with "
                        "--options: env family and policy type names")
    parser.add_argument("--names-only", action="store_true", help="only the benchmark names and descriptions")
    parser.add_argument("--options", action="store_true", help="the options of env families and policy types")
    parser.add_argument("--format", choices=("text", "markdown"), default="text", help="with --options")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.options:
        return list_options(args.specs, args.format)
    if args.format != "text":
        from runner.errors import ConfigError

        raise ConfigError("--format applies to --options (the task listing is text)")
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
        keys = [task.key for task in tasks]
        key_width, name_width = max(map(len, keys), default=0), max((len(t.name) for t in tasks), default=0)
        for key, task in zip(keys, tasks):  # columns as wide as their longest entry
            say(f"  {key:<{key_width}}  {task.name:<{name_width}}  {task.text or '(no task text)'}".rstrip())
    return 0


def list_options(given: list[str], fmt: str) -> int:
    from runner import options
    from runner.adapters import names

    wanted = [(options.kind_of(name), name) for name in given] or \
        [*(("env", n) for n in names("env")), *(("policy", n) for n in names("policy"))]
    render = options.markdown if fmt == "markdown" else options.text
    say("\n\n".join(render(kind, name) for kind, name in wanted))
    return 0
