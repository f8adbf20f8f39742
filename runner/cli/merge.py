"""`runner merge`: merge the results directories of the shards of one run into the run's outputs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runner.cli.common import HelpFormatter, output_dir_arg, say

DESCRIPTION = """\
Merge results directories of one run (the shards of `runner run --shard I/N`, or partial runs of the same
spec) into one output directory with the same eval_info.json and metrics.json as an unsharded run, a
merged episodes.jsonl (one record per episode, in plan order), run.json and the videos.

Checked first, and nothing is written unless they pass:
  - every directory holds a valid run.json of the same spec (hash); otherwise what changed is named;
  - the ledgers obey the ledger rules: a record outside the plan (unknown task, episode index, a seed
    that is not eval.seed + k, a video path that is not the plan's) or of another shard is refused;
  - coverage: every episode of the plan is recorded somewhere. Missing episodes are listed per shard,
    with the exact command that runs (or resumes) that shard;
  - duplicates: an episode recorded in several directories is reported; identical results are merged
    (one kept), different results are refused (the runs were not reproducible);
  - every video is a regular file inside its own directory.
Episodes recorded as errors count as covered (their errors are reported in the outputs). The outputs are
staged inside the output directory and moved into place at the end: a failed merge leaves it as it was.

Works without any simulator installed (it reads only the results). --output-dir defaults to the common
parent when the directories are its shard-<i>-of-<N> subdirectories (what distributed launches write).

examples:
  runner merge out/shard-0-of-3 out/shard-1-of-3 out/shard-2-of-3        # writes out/
  runner merge shards/*/ --output-dir merged
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("merge", help="merge the results of the shards of a run",
                            description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="results directories (shards)")
    parser.add_argument("--output-dir", type=output_dir_arg, default=None, metavar="OUT",
                        help="where the merged outputs go (default: the shards' common parent, see above)")
    parser.add_argument("--allow-errors", action="store_true",
                        help="exit 0 when some episodes are recorded as errors")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runner.errors import EvaluationError
    from runner.report import write_run_report
    from runner.results import summary_table
    from runner.results.coverage import describe_keys
    from runner.results.merge import merge

    merged = merge(args.dirs, args.output_dir)
    for warning in merged.warnings:
        warn(warning)
    say(summary_table(merged.eval_info))
    say(f"merged {len(merged.records)} episodes from {len(args.dirs)} directories into {merged.out_dir}")
    write_run_report(merged.out_dir, say)
    errors = merged.errors
    if errors and not args.allow_errors:
        raise EvaluationError(f"{len(errors)} of {len(merged.records)} episodes are recorded as errors "
                              f"({describe_keys([r.key for r in errors])}); outputs written; --allow-errors "
                              "exits 0 anyway, resuming the shards retries them")
    return 0


def warn(text: str) -> None:
    print(f"runner: warning: {text}", file=sys.stderr, flush=True)
