"""The benchmark scripts run and report consistent figures (no timing is asserted: see benchmarks/README.md)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import REPO


@pytest.mark.slow
def test_throughput_quick_runs_every_measurement_on_the_same_episodes():
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "throughput.py"), "--quick", "--workers", "2",
         "--schedule", "spread"],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "WARNING" not in out  # every runner run made the single process's steps
    single = re.search(r"single process: (\d+) steps, 16/16 successes", out)
    assert single, out
    assert re.search(r"2 plain loops side by side .*: [\d.]+ s, CPU [\d.]+, [\d.]+ s: [\d.]+ of the bound", out), out
    runs = re.findall(r"runner, (policy .*?): [\d.]+ s = \d+ env steps/s, [\d.]+ episodes/s, (\d+)/(\d+) successes",
                      out)
    assert [name for name, *_ in runs] == ["policy in workers, spread", "policy batched in main, spread"], out
    assert all(ok == total == "16" for _, ok, total in runs), runs
    ratios = [float(r) for r in re.findall(r"ratio to the bound: ([\d.]+) end to end", out)]
    assert len(ratios) == 2 and all(0 < r < 2 for r in ratios), out
    assert len(re.findall(r"runner / ceiling: [\d.]+", out)) == 2, out


@pytest.mark.slow
def test_remote_quick_compares_identical_episodes_and_reports_the_servers_batches():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "remote.py"), "--quick"], capture_output=True,
                          text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.findall(r"W=(\d): 8 episodes, \d+ steps, 8 successes", out) == ["1", "2"]
    for protocol in ("openpi", "vla-eval"):
        found = re.findall(rf"remote \(runner serve, {protocol}\): [\d.]+ s, \d+ env steps/s, remote / local time "
                           r"[\d.]+; per-episode results identical", out)
        assert len(found) == 2, out
    assert re.search(r"server: \d+ requests, batch sizes 1x\d+ .*\(mean 1\.00\)", out), out  # one worker: batches of 1


@pytest.mark.slow
def test_videos_quick_reports_the_ratio_and_what_the_run_said():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "videos.py"), "--quick", "--rounds", "1"],
                          capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"4 videos, \d+ frames, batch \d+.*with / \(without \+ rendering\) = \d\.\d{3}", done.stdout)
    assert re.search(r"the run said: videos: 4 recorded; rendering and encoding them took [\d.]+ s", done.stdout)
    assert "median ratio" in done.stdout


@pytest.mark.slow
def test_fingerprint_quick_reports_the_added_share_and_the_check_time():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fingerprint.py"), "--quick", "--rounds", "1"],
                          capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"round 1: run [\d.]+ s \(8 episodes, batch \d\); fingerprint [\d.]+ ms cached, \d+ ms cold; "
                     r"state hash \d+ us an episode; added [\d.]+ % of the run; runner check [\d.]+ s", done.stdout)
    assert re.search(r"fingerprint \+ initial states add [\d.]+ % to the run \(target < 2 %: (met|NOT met)\)",
                     done.stdout), done.stdout
