"""`runner` entry point: `main()` maps errors to exit codes, `main_inner()` raises."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from runner import __version__
from runner.cli import gen_ci, list_cmd, merge, prepare, run, show, validate
from runner.cli.common import HelpFormatter
from runner.errors import RunnerError
from runner.spec import SpecError

COMMANDS = (validate, list_cmd, show, run, merge, gen_ci, prepare)

DESCRIPTION = """\
Declarative benchmark runner for robot-policy simulation benchmarks.
One YAML spec per benchmark (specs/<name>.yaml) drives validation, evaluation and CI.

examples:
  runner validate                                  # check specs/*.yaml
  runner run specs/metaworld.yaml --set policy.type=scripted --set env.task=easy
  runner gen-ci --check                            # fail when generated CI files are stale
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runner", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"runner {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def main_inner(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return main_inner(argv)
    except RunnerError as exc:
        # Spec problems stay one `path:line:col: key: message` per line, as editors and CI parse them.
        text = str(exc)
        print(text if isinstance(exc, SpecError) or "\n" in text else f"runner: error: {text}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("runner: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
