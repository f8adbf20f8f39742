"""`runner run`: evaluate a policy on a benchmark (owned by the engine work; see runner/engine)."""

from __future__ import annotations

import argparse

from runner.cli.common import HelpFormatter, add_set_option

DESCRIPTION = """\
Evaluate the spec's policy on the spec's benchmark.

examples:
  runner run specs/metaworld.yaml --set policy.type=scripted --set env.task=easy --set eval.n_episodes=5
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("run", help="run an evaluation", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("spec", metavar="SPEC")
    parser.add_argument("--output-dir", default=None)
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("runner run is being built")
