"""`runner show`: print the fully resolved spec."""

from __future__ import annotations

import argparse
import json

from runner.cli.common import HelpFormatter, add_set_option, say

DESCRIPTION = """\
Print a spec after `extends` and `--set` overrides, with every default filled in.

examples:
  runner show specs/metaworld.yaml
  runner show specs/libero.yaml --set eval.n_episodes=1 --format json
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "show", help="print the resolved spec", description=DESCRIPTION, formatter_class=HelpFormatter
    )
    parser.add_argument("spec", metavar="SPEC")
    parser.add_argument("--format", choices=("yaml", "json"), default="yaml")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    from runner.spec import load_spec

    data = load_spec(args.spec, args.overrides).to_dict()
    if args.format == "json":
        say(json.dumps(data, indent=2))
    else:
        say(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100).rstrip())
    return 0
