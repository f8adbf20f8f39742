"""`runner prepare`: install a benchmark's data (e.g. LIBERO assets and config) ahead of a run."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.cli.common import HelpFormatter, add_set_option, say, spec_paths

DESCRIPTION = """\
Prepare what a benchmark needs before `runner run`, so runs never download anything.

LIBERO: writes hf-libero's config.yaml (no input() prompt) and makes the assets available where
`runner run` looks first (env.kwargs.assets_dir, else $RUNNER_LIBERO_ASSETS, else ~/.cache/libero/assets):
online it downloads the official lerobot/libero-assets dataset from the Hugging Face hub (what the
generated Docker images run at build time); with --assets-from it links (or copies) a local tree.
Meta-World and Gym envs need nothing.

examples:
  runner prepare specs/libero.yaml
  runner prepare specs/libero.yaml --assets-from /data/libero/assets
  runner prepare specs/libero.yaml --assets-from DIR --set env.kwargs.assets_dir=/opt/libero-assets --copy
  runner prepare                                   # every spec in specs/
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("prepare", help="install a benchmark's data", description=DESCRIPTION,
                            formatter_class=HelpFormatter)
    parser.add_argument("specs", nargs="*", metavar="SPEC", help="spec files (default: specs/*.yaml)")
    parser.add_argument("--assets-from", type=Path, metavar="DIR",
                        help="use this local asset tree instead of downloading (LIBERO)")
    parser.add_argument("--copy", action="store_true", help="with --assets-from: copy the tree instead of linking it")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runner.envs import get_adapter
    from runner.spec import load_specs

    for spec in load_specs(spec_paths(args.specs), args.overrides):
        adapter = get_adapter(spec.env.type)
        if not adapter.prepare(spec.env, assets_from=args.assets_from, copy=args.copy, say=say):
            say(f"{spec.name}: nothing to prepare for env type {spec.env.type!r} (its package ships what it needs)")
    return 0
