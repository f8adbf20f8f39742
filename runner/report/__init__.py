"""Results people look at: report.html (runner.report.html), Markdown and JSON (runner.report.text) of one or more
results directories (runner.report.load), and the paired comparison of two runs (runner.report.compare, with its
statistics in runner.report.stats)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def write_run_report(out_dir: Path, say: Callable[[str], None]) -> None:
    """report.html into a finished run's directory, then `say` where it is; a report that cannot be written is a
    warning on stderr, never a failed run (the results are written already)."""
    import sys

    from runner.errors import RunnerError

    try:
        path = write_html([out_dir], Path(out_dir) / REPORT_NAME)
    except (RunnerError, OSError, ValueError) as exc:
        print(f"runner: warning: report.html not written: {exc}", file=sys.stderr, flush=True)
        return
    say(f"report: {path}")


__all__ = ["REPORT_NAME", "write_html", "write_run_report"]
