"""`runner report`: the report of one or more results directories, as HTML, Markdown or JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runner.cli.common import HelpFormatter, say

DESCRIPTION = """\
Write the report of results directories (of `runner run` or `runner merge`), computed from their ledgers:

  html (default)  one static page that works opened from disk (no network, no server): the run's
                  provenance and the command that reproduces it, success per task, group and overall with
                  Wilson 95 % intervals (a dot-and-whisker plot and a table with each task's text), the
                  episode grid (task x episode: success, failure, error; hover for seed, steps, rewards),
                  steps per episode, the recorded videos next to their episode, and the errors. Several
                  directories (policies on the same benchmark) add a leaderboard; two runs of the same plan
                  add their paired comparison (`runner compare --help`).
  markdown        the per-task table (several directories: a leaderboard), e.g. for a CI job summary
  json            the numbers

`runner run` and `runner merge` write report.html into their output directory at the end.
Videos are linked by their path relative to the report: keep it next to the results (the default).

examples:
  runner report outputs/eval/2026-12-01/10-00-00_metaworld               # writes .../report.html
  runner report out/scripted out/random -o leaderboard.html
  runner report out --format markdown >> "$GITHUB_STEP_SUMMARY"
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("report", help="write the HTML (or Markdown, JSON) report of results directories",
                            description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, metavar="RUN_DIR", help="results directories")
    parser.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                        help="where to write (default: html: RUN_DIR/report.html for one directory, ./report.html "
                             "for several; markdown and json: standard output; '-': standard output)")
    parser.add_argument("--format", choices=("html", "markdown", "json"), default="html")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runner.report import REPORT_NAME, write_html

    if args.format == "html":
        out = args.output or (args.dirs[0] / REPORT_NAME if len(args.dirs) == 1 else Path(REPORT_NAME))
        if str(out) == "-":
            from runner.report.html import render
            from runner.report.load import load_run

            runs = [load_run(d) for d in args.dirs]
            sys.stdout.write(render(runs, Path.cwd() / REPORT_NAME))
            return 0
        say(f"report: {write_html(args.dirs, out)}")
        return 0
    text = render_text(args.dirs, args.format)
    if args.output is None or str(args.output) == "-":
        sys.stdout.write(text)
    else:
        from runner.results.outputs import write_text_atomic

        write_text_atomic(args.output, text)
        say(f"report: {args.output}")
    return 0


def render_text(dirs: list[Path], fmt: str) -> str:
    from runner.report.compare import compare
    from runner.report.load import ReportError, load_run
    from runner.report.text import as_json, markdown
    from runner.results.outputs import dumps

    runs = [load_run(d) for d in dirs]
    comparison = None
    if len(runs) == 2:
        try:
            comparison = compare(runs[0], runs[1])
        except ReportError:
            comparison = None
    return markdown(runs, comparison) if fmt == "markdown" else dumps(as_json(runs, comparison))
