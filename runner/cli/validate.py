"""`runner validate`: check specs against the schema and the semantic rules."""

from __future__ import annotations

import argparse

from runner.cli.common import HelpFormatter, add_set_option, say, spec_paths
from runner.spec import load_specs

DESCRIPTION = """\
Check benchmark specs. Exit 0 when all are valid; exit 2 otherwise, printing every problem as
path:line:col: dotted.key: message.

examples:
  runner validate                          # every specs/*.yaml
  runner validate specs/libero.yaml
  runner validate specs/metaworld.yaml --set eval.n_episodes=3
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("validate", help="check specs", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("specs", nargs="*", metavar="SPEC", help="spec files (default: specs/*.yaml)")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    specs = load_specs(spec_paths(args.specs), args.overrides)
    for spec in specs:
        say(f"{spec.source}: ok")
    return 0
