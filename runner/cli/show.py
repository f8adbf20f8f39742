"""`runner show`: print the fully resolved spec."""

from __future__ import annotations

import argparse
import json

from runner.cli.common import HelpFormatter, add_set_option, say

DESCRIPTION = """\
Print a spec after `extends` and `--set` overrides, with every default filled in.

--origins marks every value the spec file does not set itself with where it comes from: a partial named by
`extends` (file:line), a --set, or "default" — e.g. what copying a shipped spec inherits from specs/_gpu_hub.yaml
(a GPU runner, a CUDA image, the hub token).

examples:
  runner show specs/metaworld.yaml
  runner show specs/metaworld.yaml --origins
  runner show specs/libero.yaml --set eval.n_episodes=1 --format json
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "show", help="print the resolved spec", description=DESCRIPTION, formatter_class=HelpFormatter
    )
    parser.add_argument("spec", metavar="SPEC")
    parser.add_argument("--format", choices=("yaml", "json"), default="yaml")
    parser.add_argument("--origins", action="store_true",
                        help="YAML with a comment on each value from a partial, a --set or a default")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    from runner.spec import load_spec

    from runner.errors import ConfigError

    if args.origins and args.format == "json":
        raise ConfigError("--origins writes YAML comments; it cannot go with --format json")
    spec = load_spec(args.spec, args.overrides)
    data = spec.to_dict()
    if args.origins:
        from runner.spec import resolve
        from runner.spec.origins import annotated

        say(annotated(data, resolve(args.spec, args.overrides)))
    elif args.format == "json":
        say(json.dumps(data, indent=2))
    else:
        say(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100).rstrip())
    return 0
