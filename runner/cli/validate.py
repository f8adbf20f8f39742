"""`runner validate`: check specs against the schema and the semantic rules."""

from __future__ import annotations

import argparse

from runner.cli.common import HelpFormatter, add_set_option, say, spec_paths

DESCRIPTION = """\
Check benchmark specs: YAML, the JSON Schema (schema/benchmark.schema.json), then the rules the schema
cannot express (task, suite and camera names, extends, ci.set overrides), then that the install section
provides what the env and the policy need (packages, offscreen rendering, Python version, your own code):
a spec that passes gets an image, and a `runner install` venv, that can run it. Prints `SPEC: ok` for each
valid spec. Exit 0 when all are valid; exit 2 otherwise, printing every problem on stderr as
path:line:col: dotted.key: message; did you mean 'x'?

examples:
  runner validate                          # every specs/*.yaml
  runner validate specs/libero.yaml
  runner validate specs/metaworld.yaml --set eval.n_episodes=3
  runner validate specs/metaworld.yaml --set env.task=easy --set env.task_ids=[0,1]
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("validate", help="check specs", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("specs", nargs="*", metavar="SPEC", help="spec files (default: specs/*.yaml)")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print `PATH: ok` for each valid spec; raise one `SpecError` with the problems of all the others."""
    from runner.install.needs import problems as install_problems
    from runner.spec import SpecError, load_spec

    problems = []
    for path in spec_paths(args.specs):
        try:
            spec = load_spec(path, args.overrides)
        except SpecError as exc:
            problems.extend(exc.problems)
            continue
        missing = install_problems(spec, args.overrides)  # what its image or `runner install` would lack
        if missing:
            problems.extend(missing)
        else:
            say(f"{path}: ok")
    if problems:
        raise SpecError(problems)
    return 0
