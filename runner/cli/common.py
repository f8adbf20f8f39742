"""Options shared by the subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runner.errors import ConfigError
from runner.spec import default_spec_paths


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


def write_report(out_dir: Path) -> None:
    """report.html into a finished run's directory; a report that cannot be written is a warning, never a failed
    run (the results are written already)."""
    from runner.errors import RunnerError
    from runner.report import REPORT_NAME, write_html

    try:
        path = write_html([out_dir], Path(out_dir) / REPORT_NAME)
    except (RunnerError, OSError, ValueError) as exc:
        print(f"runner: warning: report.html not written: {exc}", file=sys.stderr, flush=True)
        return
    say(f"report: {path}")
