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

--fingerprint prints the benchmark fingerprint instead (docs/trust.md): of a run directory, as its run.json recorded
it; of a spec, as a run here would record it (the simulator, policy and rendering are checked as `runner run` does,
nothing is run). Two results are comparable when their parts match.

examples:
  runner show specs/metaworld.yaml
  runner show specs/metaworld.yaml --origins
  runner show specs/libero.yaml --set eval.n_episodes=1 --format json
  runner show specs/metaworld.yaml --fingerprint
  runner show outputs/metaworld-2026-12-03-101500 --fingerprint
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "show", help="print the resolved spec", description=DESCRIPTION, formatter_class=HelpFormatter
    )
    parser.add_argument("spec", metavar="SPEC", help="a spec file (with --fingerprint: or a run directory)")
    parser.add_argument("--format", choices=("yaml", "json"), default="yaml")
    parser.add_argument("--origins", action="store_true",
                        help="YAML with a comment on each value from a partial, a --set or a default")
    parser.add_argument("--fingerprint", action="store_true",
                        help="the benchmark fingerprint of a run directory, or of a run of SPEC here")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    from runner.spec import load_spec

    from runner.errors import ConfigError

    if args.origins and args.format == "json":
        raise ConfigError("--origins writes YAML comments; it cannot go with --format json")
    if args.fingerprint:
        if args.origins:
            raise ConfigError("--fingerprint and --origins show different things: choose one")
        from runner.results.fingerprint import lines

        fp = _fingerprint(args)
        say(json.dumps(fp, indent=2) if args.format == "json" else "\n".join(lines(fp)))
        return 0
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


def _fingerprint(args: argparse.Namespace) -> dict:
    """What run.json recorded (a run directory), or what a run of the spec here would record."""
    from pathlib import Path

    from runner.errors import ConfigError

    target = Path(args.spec)
    if target.is_dir():
        from runner.results import read_run_file

        if args.overrides:
            raise ConfigError("--set changes a spec, not a run directory's record")
        run = read_run_file(target)
        if run is None:
            raise ConfigError(f"{target} has no run.json: not a results directory of `runner run`")
        if not run.fingerprint:
            raise ConfigError(f"{target}/run.json records no fingerprint (written by an older runner)")
        return run.fingerprint
    from runner.engine.fingerprint import of_spec
    from runner.spec import load_spec

    return of_spec(load_spec(args.spec, args.overrides))
