"""Results people look at: report.html (runner.report.html), Markdown and JSON (runner.report.text) of one or more
results directories (runner.report.load), and the paired comparison of two runs (runner.report.compare, with its
statistics in runner.report.stats)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

REPORT_NAME = "report.html"


def write_html(dirs: Sequence[Path], out_file: Path, *, compare_two: bool = True) -> Path:
    """Write the HTML report of `dirs` to `out_file`; two runs of the same plan get their paired comparison."""
    from runner.report.html import render
    from runner.report.load import ReportError, load_run
    from runner.results.outputs import write_text_atomic

    runs = [load_run(Path(d)) for d in dirs]
    comparison = None
    if compare_two and len(runs) == 2:
        from runner.report.compare import compare

        try:
            comparison = compare(runs[0], runs[1])
        except ReportError:
            comparison = None  # not paired: the leaderboard alone
    write_text_atomic(Path(out_file), render(runs, Path(out_file), comparison))
    return Path(out_file)


__all__ = ["REPORT_NAME", "write_html"]
