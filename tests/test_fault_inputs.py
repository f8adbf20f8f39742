"""Bad input never loses data: an unwritable output dir, a full disk, a missing simulator package or asset.

Each gives one clear message and a non-zero exit, writes nothing it should not (a missing dependency is
found before the output directory exists), and leaves an existing ledger whole: every line a complete
record, so the same command resumes once the cause is gone.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import subprocess
from pathlib import Path

import helpers
import pytest
from helpers import eval_info_of, ledger_of, one_error_line, runner_cli

from runner.results import load_ledger, validate_outputs

TIMEOUT_S = 120


write_spec = functools.partial(helpers.write_spec, name="b", folder="spec")  # write_spec(tmp_path, env=ENV)
runner = functools.partial(runner_cli, timeout=TIMEOUT_S)  # runner(*ARGS)


def assert_whole(ledger: Path) -> int:
    """Every line of the ledger is a complete record (no torn line); their number."""
    contents = load_ledger(ledger)
    assert contents.dropped_lines == 0, contents.dropped_text
    text = ledger.read_text()
    assert text == "" or text.endswith("\n")
    return len(contents.records)


GYM = {"type": "gym", "task": "Pendulum-v1", "max_steps": 5}


# ── before anything is written ───────────────────────────────────────────────────────────────────────


def test_missing_simulator_package_fails_before_the_output_dir_exists(tmp_path):
    spec = write_spec(tmp_path, env={"type": "gym", "task": "no_such_simulator_pkg:Thing-v0", "max_steps": 5})
    out = tmp_path / "out"
    proc = runner("run", str(spec), "--output-dir", str(out))
    assert proc.returncode == 3
    assert "cannot import 'no_such_simulator_pkg'" in one_error_line(proc)
    assert not out.exists()


def test_missing_libero_assets_fail_in_preflight_before_the_output_dir_exists(tmp_path):
    pytest.importorskip("libero")
    pytest.importorskip("robosuite")
    env = {"type": "libero", "task": "libero_spatial", "max_steps": 5,
           "kwargs": {"assets_dir": str(tmp_path / "no-assets")}}
    out = tmp_path / "out"
    proc = runner("run", str(write_spec(tmp_path, env=env)), "--output-dir", str(out))
    assert proc.returncode == 3, proc.stderr
    assert "LIBERO assets not found" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_a_dependency_missing_in_the_workers_stops_the_run_without_retries(tmp_path):
    pytest.importorskip("mujoco")
    env = {"type": "gym", "task": "tests.test_fault_envs:Faulty-v0", "max_steps": 5, "kwargs": {"fault": "import"}}
    proc = runner("run", str(write_spec(tmp_path, env=env)), "--output-dir", str(tmp_path / "out"), "--no-progress")
    assert proc.returncode == 3, proc.stderr
    assert "cannot import 'fake_sim_dependency'" in one_error_line(proc)
    assert "retrying" not in proc.stderr
    assert assert_whole(tmp_path / "out" / "episodes.jsonl") == 0


def test_unwritable_output_dir_is_one_clear_message(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = runner("run", str(write_spec(tmp_path, env=GYM)), "--output-dir", str(blocker / "out"))
    assert proc.returncode == 1
    assert "cannot create the output directory" in one_error_line(proc)


def test_read_only_output_dir_is_one_clear_message(tmp_path):
    target = tmp_path / "ro"
    target.mkdir()
    with _read_only(target):
        proc = runner("run", str(write_spec(tmp_path, env=GYM)), "--output-dir", str(target / "out"))
    assert proc.returncode == 1
    line = one_error_line(proc)
    assert "cannot create the output directory" in line and ("Read-only" in line or "Permission denied" in line)


@contextlib.contextmanager
def _read_only(path: Path):
    if os.geteuid() != 0:
        path.chmod(0o500)
        try:
            yield
        finally:
            path.chmod(0o700)
        return
    if shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs",
                                                        str(path)], capture_output=True).returncode != 0:
        pytest.skip("root without mount: a read-only directory cannot be made here")
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


# ── a full disk in the middle of a run ───────────────────────────────────────────────────────────────


def _reference(tmp_path: Path, spec: Path) -> tuple[dict, list]:
    out = tmp_path / "reference"
    proc = runner("run", str(spec), "--output-dir", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    return _outputs(out)


def _outputs(out: Path) -> tuple[dict, list]:
    return eval_info_of(out), ledger_of(out)


@pytest.mark.slow
def test_file_size_limit_mid_run_keeps_the_ledger_whole_and_resumable(tmp_path):
    """RLIMIT_FSIZE: writes past the limit fail with EFBIG (Python ignores SIGXFSZ), as a full disk would."""
    spec = write_spec(tmp_path, env=GYM, n=40)
    expected = _reference(tmp_path, spec)
    out = tmp_path / "out"
    limit = 4000  # bytes per file: run.json fits, the ledger fills after about 15 records

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = runner("run", str(spec), "--output-dir", str(out), "--no-progress", preexec_fn=limited)
    assert proc.returncode == 1, proc.stderr
    assert "cannot write to the ledger: File too large" in one_error_line(proc)
    kept = assert_whole(out / "episodes.jsonl")
    assert 5 <= kept < 40 and (out / "episodes.jsonl").stat().st_size <= limit
    assert not (out / "eval_info.json").exists()

    done = runner("run", str(spec), "--output-dir", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert f"resumed: {kept} episode(s) were already done" in done.stdout
    assert _outputs(out) == expected
    validate_outputs(out)


@pytest.mark.slow
def test_full_tmpfs_mid_run_keeps_the_ledger_whole_and_resumable(tmp_path):
    """A real full file system: a tiny tmpfs (needs root and mount), grown afterwards to resume in place."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount for a tmpfs")
    spec = write_spec(tmp_path, env=GYM, n=80)  # a ledger of about 21 kB: it fills the 16 kB tmpfs mid-run
    expected = _reference(tmp_path, spec)
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("tmpfs cannot be mounted here")
    try:
        out = disk / "out"
        proc = runner("run", str(spec), "--output-dir", str(out), "--no-progress")
        assert proc.returncode == 1, proc.stderr
        line = one_error_line(proc)
        assert "cannot write to the ledger: No space left on device" in line, line
        kept = assert_whole(out / "episodes.jsonl")
        assert 1 <= kept < 80
        subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)  # space freed
        done = runner("run", str(spec), "--output-dir", str(out), "--no-progress")
        assert done.returncode == 0, done.stderr
        assert _outputs(out) == expected
        validate_outputs(out)
    finally:
        subprocess.run(["umount", str(disk)], check=True)
