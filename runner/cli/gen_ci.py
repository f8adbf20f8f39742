"""`runner gen-ci`: render Dockerfiles and the workflow from the specs (owned by runner/generate)."""

from __future__ import annotations

import argparse

from runner.cli.common import HelpFormatter

DESCRIPTION = """\
Render docker/Dockerfile.benchmark.<name> and .github/workflows/benchmark_tests.yml from the specs.

examples:
  runner gen-ci
  runner gen-ci --check
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("gen-ci", help="generate CI files", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("--check", action="store_true")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("runner gen-ci is being built")
