"""runner report and runner compare on real Meta-World runs, on results written with runner's own writers, and
on hostile results directories; provenance in run.json."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import REPO, SEED, TASKS, full_records, record, run_file, write_dir
from helpers import runner_cli as runner

from runner.results import EpisodeRecord
from runner.results.coverage import video_relpath
from runner.tasks import TaskRef

# ── real runs ──────────────────────────────────────────────────────────────────────────────────────────


def test_run_writes_report_and_provenance(metaworld_runs):
    out = metaworld_runs["scripted"]
    page = (out / "report.html").read_text()
    assert "reach-v3" in page and "<video" in page and "<svg" in page
    prov = json.loads((out / "run.json").read_text())["provenance"]
    assert prov["runner"]["version"] and prov["python"].count(".") == 2
    assert {"mujoco", "metaworld", "gymnasium", "numpy"} <= set(prov["packages"])
    assert prov["host"]["cores"] >= 1 and prov["host"]["cpu"]
    assert prov["started_at"] <= prov["ended_at"]
    assert prov["policy"] == {"type": "scripted"}  # the spec's hub path is not the scripted policy's
    if (REPO / ".git").exists():
        assert len(prov["runner"]["commit"]) == 40 and isinstance(prov["runner"]["dirty"], bool)


def test_scripted_experts_beat_random_significantly(metaworld_runs, tmp_path):
    proc = runner("compare", metaworld_runs["random"], metaworld_runs["scripted"], "--json", tmp_path / "c.json",
                  "--html", tmp_path / "c.html")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "c.json").read_text())
    overall = data["overall"]
    assert data["paired"] and overall["n"] == 12 and overall["a_successes"] == 0 and overall["b_successes"] == 12
    assert overall["diff"] == 1.0 and overall["ci_low"] > 0.5 and overall["p"] < 0.001
    assert overall["p"] == pytest.approx(2 * 0.5 ** 12)  # exact McNemar: 12 discordant pairs, all one way
    assert "scripted vs random:" in proc.stdout and "overall +100.0 pts" in proc.stdout and "p = 0.0005" in proc.stdout
    html = (tmp_path / "c.html").read_text()
    assert "Comparison: B = scripted vs A = random" in html
    overall_row = html[html.index("<tr><td>overall</td>"):].split("</tr>")[0]
    assert "<td class='num'>0.0005</td>" in overall_row and "better" in overall_row  # its p and its verdict


def test_compare_a_run_with_itself(metaworld_runs, tmp_path):
    proc = runner("compare", metaworld_runs["scripted"], metaworld_runs["scripted"], "--json", tmp_path / "c.json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["overall"]["diff"] == 0 and data["overall"]["p"] == 1.0
    assert all(t["diff"] == 0 and t["p"] == 1.0 and t["p_holm"] == 1.0 for t in data["tasks"])
    assert data["counts"] == {"better": 0, "worse": 0, "no detectable difference": 3}
    assert "overall +0.0 pts" in proc.stdout


def test_compare_refuses_runs_from_other_seeds(metaworld_runs):
    proc = runner("compare", metaworld_runs["random"], metaworld_runs["random_seed2000"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "not paired" in proc.stderr and "eval.seed differs (1000 vs 2000)" in proc.stderr
    assert "--unpaired" in proc.stderr
    unpaired = runner("compare", metaworld_runs["random"], metaworld_runs["random_seed2000"], "--unpaired")
    assert unpaired.returncode == 0, unpaired.stderr
    assert "(unpaired)" in unpaired.stdout and "Fisher" in unpaired.stdout


def test_report_formats(metaworld_runs, tmp_path):
    one = runner("report", metaworld_runs["scripted"], "--format", "markdown")
    assert one.returncode == 0, one.stderr
    assert "| task | name | success |" in one.stdout and "| reach-v3\\_0 | reach-v3 | 4/4 | 100.0 |" in one.stdout
    two = runner("report", metaworld_runs["random"], metaworld_runs["scripted"], "--format", "json")
    data = json.loads(two.stdout)
    assert [r["labels"]["policy"] for r in data["runs"]] == ["random", "scripted"]
    assert data["comparison"]["overall"]["b_successes"] == 12
    html = runner("report", metaworld_runs["random"], metaworld_runs["scripted"], "-o", tmp_path / "board.html")
    assert html.returncode == 0, html.stderr
    page = (tmp_path / "board.html").read_text()
    assert "Leaderboard" in page and "Comparison: B = scripted" in page
    # videos are linked relative to the page, wherever it is written
    assert "metaworld_runs" in page and "videos/reach-v3_0/eval_episode_0.mp4" in page


def test_report_of_a_run_without_provenance(metaworld_runs, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(metaworld_runs["random"], old)
    data = json.loads((old / "run.json").read_text())
    del data["provenance"]
    (old / "run.json").write_text(json.dumps(data))
    proc = runner("report", old)
    assert proc.returncode == 0, proc.stderr
    assert "not recorded (written by an older runner)" in (old / "report.html").read_text()


# ── results written with runner's writers ───────────────────────────────────────────────────────────────


def test_hostile_texts_are_escaped_and_videos_stay_inside(tmp_path):
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    tasks = (TaskRef("easy", 0, "reach-v3", evil), TASKS[1])
    records = [record(t, k) for t in tasks for k in range(3)]
    records[1] = replace(records[1], status="error", error=evil)
    out = write_dir(tmp_path / "evil", run_file(tasks=tasks, labels={"env": evil, "task": evil, "policy": evil}),
                    records)
    outside = tmp_path / "secret.mp4"
    outside.write_bytes(b"secret")
    link = out / video_relpath(TASKS[1], 0)
    link.unlink()
    link.symlink_to(outside)
    for fmt in ("html", "markdown"):
        proc = runner("report", out, "--format", fmt, "-o", tmp_path / f"r.{fmt}")
        assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r.html").read_text()
    assert "<script" not in page and "<img" not in page and "&lt;script&gt;" in page
    assert "secret" not in page and video_relpath(TASKS[1], 0) not in page
    assert video_relpath(TASKS[0], 0) in page  # the regular file inside is shown
    assert "<script" not in (tmp_path / "r.markdown").read_text()


@pytest.mark.parametrize("make,message", [
    (lambda p: p / "missing", "no such directory"),
    (lambda p: p, "has no run.json"),
])
def test_report_of_a_non_run_is_one_message(tmp_path, make, message):
    proc = runner("report", make(tmp_path))
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_tampered_ledger_is_refused(tmp_path):
    records = full_records()
    records[0] = replace(records[0], seed=SEED + 99)
    out = write_dir(tmp_path / "bad", run_file(), records)
    proc = runner("report", out)
    assert proc.returncode == 2 and "ledger rules" in proc.stderr and "Traceback" not in proc.stderr


def test_incomplete_run_is_reported_as_incomplete(tmp_path):
    out = write_dir(tmp_path / "part", run_file(state="interrupted"), full_records()[:4])
    assert runner("report", out).returncode == 0
    assert "2 planned episodes have no record" in (out / "report.html").read_text()
    assert "2 episodes missing" in runner("report", out, "--format", "markdown").stdout


def metaworld50(tmp_path: Path, n: int) -> Path:
    """A 50-task Meta-World run (the MT50 catalog) of `n` episodes each, written with runner's writers."""
    from runner.envs.metaworld.catalog import METAWORLD_TASKS

    tasks = tuple(TaskRef("mt50", i, name, text) for i, (name, text) in enumerate(METAWORLD_TASKS.items()))
    records = [EpisodeRecord(t.group, t.task_id, t.name, k, SEED + k, 40 + 7 * k, float(k), 1.0, (k + i) % 3 != 0,
                             0.5) for i, t in enumerate(tasks) for k in range(n)]
    identity = {"env": {"type": "metaworld", "task": "mt50"}, "policy": {"type": "random"},
                "eval": {"n_episodes": n, "seed": SEED, "videos": 0}}
    return write_dir(tmp_path / "mt50", run_file(tasks=tasks, identity=identity, n_episodes=n), records,
                     videos=False)


def test_50_task_report_is_small(tmp_path):
    out = metaworld50(tmp_path, 50)
    assert runner("report", out).returncode == 0
    size = (out / "report.html").stat().st_size
    assert size < 2 << 20, size


def test_unpaired_compare_of_runs_without_a_common_task_is_refused(tmp_path):
    """Two unrelated benchmarks: no "0/0" table that exits 0, one message naming each run's tasks."""
    from helpers import N

    from runner.tasks import TaskRef

    a = write_dir(tmp_path / "a", run_file(), full_records(), videos=False)
    cartpole = (TaskRef("gym", 0, "CartPole-v1", "CartPole-v1"),)
    b = write_dir(tmp_path / "b", run_file(tasks=cartpole), [record(cartpole[0], k) for k in range(N)], videos=False)
    proc = runner("compare", a, b, "--unpaired")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert "share no task" in proc.stderr and "CartPole-v1" in proc.stderr and TASKS[0].name in proc.stderr


def test_the_report_states_the_success_rule(metaworld_runs):
    html = (metaworld_runs["scripted"] / "report.html").read_text()
    assert "<td>success rule</td><td>Meta-World&#x27;s own: info[&#x27;success&#x27;] true at any step" in html


@pytest.mark.parametrize("success, words", [
    ({"info_key": None, "min_return": None, "survive": False}, "info['is_success'], else info['success']"),
    ({"info_key": "goal_reached", "min_return": None, "survive": False}, "info['goal_reached'] true at any step"),
    ({"info_key": None, "min_return": 195.0, "survive": False}, "the summed reward reaches 195.0"),
    ({"info_key": None, "min_return": None, "survive": True}, "reaches its time limit without terminating"),
])
def test_success_rules_in_words(success, words):
    from runner.spec.derived import success_rule

    assert words in success_rule({"type": "gym", "task": "CartPole-v1", "success": success})
