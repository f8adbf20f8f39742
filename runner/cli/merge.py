"""`runner merge`: merge the results directories of the shards of one run into the run's outputs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runner.cli.common import HelpFormatter, say

DESCRIPTION = """\
Merge results directories of one run (the shards of `runner run --shard I/N`, or partial runs of the same
spec) into one output directory with the same eval_info.json and metrics.json as an unsharded run, a
merged episodes.jsonl (one record per episode, in plan order), run.json and the videos.

Checked first, and nothing is written unless they pass:
  - every directory holds a run.json of the same spec (hash); otherwise what changed is named;
  - coverage: every episode of the plan is recorded somewhere. Missing episodes are listed per shard,
    with the exact command that runs (or resumes) that shard;
  - duplicates: an episode recorded in several directories is reported; identical results are merged
    (one kept), different results are refused (the runs were not reproducible).
Episodes recorded as errors count as covered (their errors are reported in the outputs).

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
    parser.add_argument("--output-dir", type=Path, default=None, metavar="OUT",
                        help="where the merged outputs go (default: the shards' common parent, see above)")
    parser.add_argument("--allow-errors", action="store_true",
                        help="exit 0 when some episodes are recorded as errors")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runner.errors import EvaluationError
    from runner.results import summary_table
    from runner.results.merge import (
        MergeError,
        check_output_dir,
        collect,
        default_output_dir,
        describe_keys,
        missing_report,
        write_merged,
    )

    coverage = collect(args.dirs)
    for source in coverage.sources:
        if source.torn_line:
            warn(f"{source.path}: the last ledger line was torn (a hard kill) and is ignored")
    problems: list[str] = []
    if coverage.extra:
        problems.append(f"{len(coverage.extra)} record(s) outside the plan, e.g. {coverage.extra[0].task_key} "
                        f"episode {coverage.extra[0].episode_index}")
    if coverage.conflicts:
        keys = sorted(coverage.conflicts)
        where = ", ".join(str(s.path) for s in coverage.conflicts[keys[0]])
        problems.append(f"{len(keys)} episode(s) recorded with different results in different directories "
                        f"({describe_keys(keys)}; e.g. in {where}): the runs are not reproducible; merge only "
                        "one of them")
    if coverage.duplicates:
        keys = sorted(coverage.duplicates)
        places = sorted({str(s.path) for k in keys for s in coverage.duplicates[k]})
        warn(f"{len(keys)} duplicate episode(s), recorded in more than one directory with identical results "
             f"({describe_keys(keys)}; in {', '.join(places)}): one of each is kept")
    if coverage.missing:
        n = len(coverage.run.tasks) * coverage.run.n_episodes
        problems.append(f"{len(coverage.missing)} of {n} episodes are missing:\n    "
                        + "\n    ".join(missing_report(coverage)))
    if problems:
        raise MergeError("runner: error: merge: " + "\n  ".join(problems) + "\nnothing was written")
    out_dir = args.output_dir or default_output_dir(args.dirs)
    if out_dir is None:
        raise MergeError("merge: the directories are not shard-<i>-of-<N> subdirectories of one parent; "
                         "pass --output-dir")
    check_output_dir(out_dir, coverage)
    eval_info, _ = write_merged(out_dir, coverage, merged_from=[str(d) for d in args.dirs])
    say(summary_table(eval_info))
    say(f"merged {len(coverage.records)} episodes from {len(coverage.sources)} directories into {out_dir}")
    errors = [r for r in coverage.records if not r.ok]
    if errors and not args.allow_errors:
        raise EvaluationError(f"{len(errors)} of {len(coverage.records)} episodes are recorded as errors "
                              f"({describe_keys([r.key for r in errors])}); outputs written; --allow-errors "
                              "exits 0 anyway, resuming the shards retries them")
    return 0


def warn(text: str) -> None:
    print(f"runner: warning: {text}", file=sys.stderr, flush=True)
