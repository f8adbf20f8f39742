"""`runner compare A B`: is policy B better than policy A, episode by episode?"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runner.cli.common import HelpFormatter, say

DESCRIPTION = """\
Compare two runs of the same benchmark: B (e.g. a new policy) against A (the baseline).

Episode k of every task starts from seed eval.seed + k, so two runs of the same plan are paired episode
by episode: both policies faced the same initial states. A paired test sees the difference between the
policies instead of the luck of the draw, and is far more sensitive than two success rates side by side.
Episodes are paired by (task, episode index, seed); runs that do not share the same pairs are refused
(exit 2) with what differs, unless --unpaired. Pairs where either episode is an error are left out.

Per task and overall: pairs, successes of A and B, discordant pairs (A only, B only), the difference
B - A in points with a 95 % interval (Newcombe's hybrid score interval for paired proportions), the exact
McNemar p-value, and p-values Holm-adjusted across tasks; rewards: Wilcoxon signed-rank test and a
seeded paired bootstrap interval. Then one verdict line to paste, and how many episodes per task would
detect a 5-point difference. --unpaired: Newcombe's interval for independent proportions and Fisher's
exact test instead. Warns when the env settings or simulator versions differ. docs/comparing.md explains
how to read it.

examples:
  runner compare out/baseline out/new-policy
  runner compare out/random out/scripted --html compare.html --json compare.json
  runner compare out/seed1000 out/seed2000 --unpaired
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("compare", help="paired comparison of two runs (is B better than A?)",
                            description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("a", type=Path, metavar="A", help="the baseline's results directory")
    parser.add_argument("b", type=Path, metavar="B", help="the results directory compared with it")
    parser.add_argument("--unpaired", action="store_true",
                        help="compare runs that are not paired (other seeds or episodes): an unpaired test")
    parser.add_argument("--html", type=Path, default=None, metavar="FILE",
                        help="also write the report of both runs with the comparison")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the numbers as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runner.report.compare import compare, format_p
    from runner.report.load import load_run
    from runner.results.outputs import write_json_atomic, write_text_atomic

    a, b = load_run(args.a), load_run(args.b)
    c = compare(a, b, unpaired=args.unpaired)
    for warning in c.warnings:
        print(f"runner: warning: {warning}", file=sys.stderr, flush=True)
    head = ["task", "pairs" if c.paired else "n A/B", "A", "B", "A only", "B only", "B-A pts", "95% CI", "p",
            "p Holm", "verdict"]
    rows = [head]
    for t in [c.overall, *c.tasks]:
        rows.append([
            (f"{t.task} {t.name}".strip())[:48],
            str(t.n) if c.paired else f"{t.a_n}/{t.b_n}",
            str(t.a_successes), str(t.b_successes),
            "-" if t.a_only is None else str(t.a_only), "-" if t.b_only is None else str(t.b_only),
            "-" if t.diff is None else f"{100 * t.diff:+.1f}",
            "-" if t.low is None else f"[{100 * t.low:+.1f}, {100 * t.high:+.1f}]",
            format_p(t.p), format_p(t.p_holm), "" if t is c.overall else t.verdict,
        ])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        say("  ".join(cell.ljust(w) if i in (0, 10) else cell.rjust(w)
                      for i, (cell, w) in enumerate(zip(r, widths, strict=True))).rstrip())
    say()
    say(c.verdict_line())
    hint = c.sample_size_line()
    if hint:
        say(hint)
    if args.json is not None:
        write_json_atomic(args.json, c.to_json())
        say(f"json: {args.json}")
    if args.html is not None:
        from runner.report.html import render

        write_text_atomic(args.html, render([a, b], args.html, c))
        say(f"report: {args.html}")
    return 0
