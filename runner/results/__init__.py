"""Results of a run: the episode ledger, aggregation (Wilson intervals), output files, videos, reports.

Pure data in, files out: nothing here imports a simulator, torch or a policy.
"""

from runner.results.aggregate import (
    TIMING_KEYS,
    build_eval_info,
    build_metrics,
    merge_records,
    strip_timings,
    wilson_interval,
)
from runner.results.ledger import LEDGER_NAME, Ledger, LedgerContents, LedgerError, load_ledger, read_ledger
from runner.results.locations import default_run_dir
from runner.results.outputs import (
    EVAL_INFO_NAME,
    METRICS_NAME,
    OutputValidationError,
    validate_outputs,
    video_relpath,
    write_json_atomic,
    write_outputs,
)
from runner.results.records import ERROR, OK, EpisodeRecord
from runner.results.runfile import RUN_NAME, RunFile, RunFileError, Shard, read_run_file, spec_changes, write_run_file
from runner.results.terminal import Progress, summary_table
from runner.results.video import VideoWriter

__all__ = [
    "ERROR",
    "EVAL_INFO_NAME",
    "LEDGER_NAME",
    "METRICS_NAME",
    "OK",
    "RUN_NAME",
    "TIMING_KEYS",
    "EpisodeRecord",
    "Ledger",
    "LedgerContents",
    "LedgerError",
    "OutputValidationError",
    "Progress",
    "RunFile",
    "RunFileError",
    "Shard",
    "VideoWriter",
    "build_eval_info",
    "build_metrics",
    "default_run_dir",
    "load_ledger",
    "merge_records",
    "read_ledger",
    "read_run_file",
    "spec_changes",
    "strip_timings",
    "summary_table",
    "validate_outputs",
    "video_relpath",
    "wilson_interval",
    "write_json_atomic",
    "write_outputs",
    "write_run_file",
]
