"""Options shared by the subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runner.errors import ConfigError


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples in descriptions as written."""


def add_set_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec value, e.g. --set eval.n_episodes=5 (value parsed as YAML; repeatable)",
    )


def spec_paths(given: list[str]) -> list[Path]:
    """The specs named on the command line, or specs/*.yaml (without partials)."""
    from runner.spec import default_spec_paths

    if given:
        return [Path(p) for p in given]
    found = default_spec_paths(Path("."))
    if not found:
        raise ConfigError(
            "no specs given and none found in ./specs/*.yaml (run from the repository root or name a spec)"
        )
    return found


def output_dir_arg(text: str) -> Path:
    """An --output-dir value: a non-empty path (an empty one would mean the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a directory")
    return Path(text)


def say(message: str = "") -> None:
    print(message, file=sys.stdout, flush=True)
