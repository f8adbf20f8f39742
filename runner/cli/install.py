"""`runner install`: install what specs need into a local virtual environment, from their install plan."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.cli.common import HelpFormatter, add_set_option, output_dir_arg, say

DESCRIPTION = """\
Install what the specs need into a virtual environment, from the same install plan that renders their
Docker images (docker/Dockerfile.benchmark.<name>), so the two cannot drift:
  apt      missing system packages (apt-get as root or with sudo; otherwise the command is printed)
  python   an interpreter of install.python (this one, pythonX.Y on PATH, pyenv's, or uv's)
  venv     --venv DIR (default .venv-<name>), created or reused
  deps     this project (editable) with the specs' extras and pins, resolved together (uv if available)
  code     the specs' install.code directories (your own policy code)
  setup    install.setup commands (e.g. `runner prepare specs/libero.yaml`), with install.env set
Then run the spec with DIR/bin/runner. `runner doctor SPEC` checks the result.

Sizes seen on an x86_64 machine: a Meta-World spec without LeRobot about 0.45 GB; with LeRobot and
SmolVLA (Python 3.12, PyPI's CUDA build of torch) about 6 GB; LIBERO adds its assets (~0.4 GB).

examples:
  runner install specs/libero.yaml          # then: .venv-libero/bin/runner run specs/libero.yaml
  runner install specs/metaworld.yaml --venv ~/venvs/mw
  runner install specs/mine.yaml --dry-run            # print the steps only
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("install", help="install what specs need into a local venv", description=DESCRIPTION,
                            formatter_class=HelpFormatter)
    parser.add_argument("specs", nargs="+", metavar="SPEC")
    parser.add_argument("--venv", type=output_dir_arg, default=None, metavar="DIR",
                        help="the virtual environment (default: .venv-<name>)")
    parser.add_argument("--python", default=None, metavar="PATH", help="the interpreter to build the venv from")
    parser.add_argument("--no-apt", action="store_true", help="do not check or install system packages")
    parser.add_argument("--dry-run", action="store_true", help="print the steps without running them")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runner.errors import ConfigError
    from runner.install.local import install
    from runner.install.needs import problems
    from runner.install.plan import InstallPlan
    from runner.spec import SpecError, load_specs
    from runner.spec.project import PYPROJECT
    from runner.spec.semantic import project_root

    specs = load_specs(args.specs, args.overrides)
    missing = [p for spec in specs for p in problems(spec, args.overrides)]
    if missing:  # a plan that could not run its spec is refused here as by `runner validate`
        raise SpecError(missing)
    if not PYPROJECT.is_file():
        raise ConfigError("runner install installs runner from its source checkout (pyproject.toml), and this "
                          "runner was installed without one")
    roots = {project_root(spec.source) for spec in specs}
    if len(roots) > 1:
        raise ConfigError("the specs belong to different projects (directories holding specs/): install them "
                          "separately")
    plan = InstallPlan.union([InstallPlan.of(spec) for spec in specs])
    venv = Path(args.venv or f".venv-{'-'.join(spec.name for spec in specs)}")
    say(f"install: {', '.join(args.specs)} into {venv} (Python {plan.python}; extras: "
        f"{', '.join(plan.extras) or 'none'})")
    install(plan, venv.absolute(), PYPROJECT.parent, spec_root=roots.pop(), python=args.python,
            use_apt=not args.no_apt, dry_run=args.dry_run, say=say)
    if not args.dry_run:
        say(f"run it with: {venv / 'bin' / 'runner'} run {args.specs[0]}")
    return 0
