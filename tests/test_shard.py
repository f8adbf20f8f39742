"""Shards and `runner merge` with the real simulator: merged shards equal the unsharded run, whatever N.

Also: the plan is dealt deterministically, a missing shard is reported with the exact command that runs it
(and that command works), duplicates are reported, conflicting results and other specs are refused, merge
never overwrites a run's results and needs no simulator, and `ci.shards` renders a matrix + merge job.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import helpers
import pytest
import yaml
from helpers import REPO, RUNNER, ledger_of, outputs_of, runner_main, write_spec_data

from runner.cli.main import main
from runner.engine import RunOptions, evaluate, make_plan
from runner.results import Shard, read_run_file, validate_outputs
from runner.results.coverage import Plan
from runner.results.runfile import spec_hash
from runner.spec import load_spec
from runner.tasks import TaskRef

pytest.importorskip("metaworld")
pytestmark = pytest.mark.filterwarnings("ignore:Constant")

N_EPISODES = 5
write_spec = functools.partial(helpers.write_spec, name="s", folder="spec", task="reach-v3,push-v3", max_steps=10,
                               n=N_EPISODES, videos=1)  # write_spec(tmp_path): the random policy, batch size 2


def run(spec: Path, out: Path, shard: Shard | None = None, batch_size: int = 1):
    invocation = {"spec": str(spec), "overrides": []}
    return evaluate(load_spec(spec), out, RunOptions(progress=False, shard=shard, batch_size=batch_size,
                                                     invocation=invocation))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """The unsharded run (worker processes) and the shards for N = 2 and 3 (in-process), run once."""
    tmp = tmp_path_factory.mktemp("shards")
    spec = write_spec(tmp)
    full = tmp / "full"
    run(spec, full, batch_size=2)
    dirs = {}
    for count in (2, 3):
        dirs[count] = []
        for index in range(count):
            out = tmp / f"n{count}" / Shard(index, count).dirname
            result = run(spec, out, Shard(index, count))
            assert not (out / "eval_info.json").exists()  # a shard's outputs come from merge
            assert len(result.records) in (2 * N_EPISODES // count, 2 * N_EPISODES // count + 1)
            dirs[count].append(out)
    return {"spec": spec, "full": full, "dirs": dirs, "tmp": tmp}


def merge(capsys, *args) -> tuple[int, str, str]:
    return runner_main(capsys, "merge", *args)


# ── the deal ─────────────────────────────────────────────────────────────────────────────────────────


def test_shards_deal_the_plan_round_robin():
    tasks = [TaskRef("g", i, f"t{i}", "") for i in range(3)]
    spec = Plan(tuple(tasks), n_episodes=7, seed=0, videos=0)
    plan = make_plan(spec, max_steps=lambda t: 5)
    for count in range(1, 6):
        parts = [make_plan(spec, lambda t: 5, Shard(i, count)) for i in range(count)]
        assert sorted(j.key for p in parts for j in p) == sorted(j.key for j in plan)  # a partition
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
        for i, part in enumerate(parts):
            assert part == [job for p, job in enumerate(plan) if p % count == i]  # plan order, p % N == i
            assert part == make_plan(spec, lambda t: 5, Shard(i, count))  # deterministic


@pytest.mark.parametrize("text, expected", [("0/1", Shard(0, 1)), ("2/3", Shard(2, 3)), (" 1 / 4 ", Shard(1, 4))])
def test_shard_parse(text, expected):
    assert Shard.parse(text) == expected and str(expected) == f"{expected.index}/{expected.count}"


@pytest.mark.parametrize("text", ["3/3", "1", "-1/2", "a/b", "0/0", "1/2/3"])
def test_bad_shard_is_one_clear_message(text, tmp_path, capsys):
    assert main(["run", str(write_spec(tmp_path)), f"--shard={text}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("runner: error: --shard") and len(err.strip().splitlines()) == 1


# ── merge ────────────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.slow
@pytest.mark.parametrize("count", [2, 3])
def test_merged_shards_equal_the_unsharded_run(runs, count, capsys):
    dirs = runs["dirs"][count]
    code, out, err = merge(capsys, *dirs)  # the output goes to their common parent
    assert code == 0, err
    merged = dirs[0].parent
    assert f"merged {2 * N_EPISODES} episodes from {count} directories into {merged}" in out
    assert outputs_of(merged) == outputs_of(runs["full"])
    assert ledger_of(merged, unique=True) == ledger_of(runs["full"], unique=True)
    validate_outputs(merged)  # the videos of the shards were brought along
    assert sorted(p.relative_to(merged).as_posix() for p in merged.glob("videos/*/*.mp4")) == \
        ["videos/push-v3_0/eval_episode_0.mp4", "videos/reach-v3_0/eval_episode_0.mp4"]
    run_file = read_run_file(merged)
    assert run_file.merged_from and run_file.shard is None and run_file.hash == read_run_file(runs["full"]).hash
    assert run_file.provenance == read_run_file(dirs[0]).provenance  # the first shard's
    page = (merged / "report.html").read_text()  # merge reports the merged run
    assert f"report: {merged / 'report.html'}" in out and "videos/reach-v3_0/eval_episode_0.mp4" in page


@pytest.mark.slow
def test_a_missing_shard_is_reported_with_the_command_that_runs_it(runs, tmp_path, capsys):
    dirs = [shutil.copytree(d, tmp_path / d.name) for d in runs["dirs"][3]]
    shutil.rmtree(dirs[1])
    code, out, err = merge(capsys, dirs[0], dirs[2])
    assert code == 1 and "Traceback" not in err
    assert "3 of 10 episodes are missing" in err and "shard 1/3 is missing 3 episode(s)" in err
    rerun = f"runner run {runs['spec']} --shard 1/3 --output-dir {tmp_path / 'shard-1-of-3'}"
    assert rerun in err, err
    assert "nothing was written" in err and not (tmp_path / "eval_info.json").exists()

    assert main(shlex.split(rerun)[1:] + ["--no-progress"]) in (0, None)  # the very command, as printed
    capsys.readouterr()
    code, _, err = merge(capsys, *dirs)
    assert code == 0, err
    assert outputs_of(tmp_path) == outputs_of(runs["full"])


@pytest.mark.slow
def test_an_incomplete_shard_is_reported_with_its_resume_command(runs, tmp_path, capsys):
    dirs = [shutil.copytree(d, tmp_path / d.name) for d in runs["dirs"][2]]
    ledger = dirs[0] / "episodes.jsonl"
    kept = ledger.read_text().splitlines()[:2]
    ledger.write_text("\n".join(kept) + "\n")  # as if killed after two episodes
    code, _, err = merge(capsys, *dirs)
    assert code == 1
    assert "shard 0/2 is missing 3 episode(s)" in err and "are incomplete" in err
    assert f"runner run {runs['spec']} --shard 0/2 --output-dir {dirs[0]}" in err


@pytest.mark.slow
def test_duplicates_are_reported_and_conflicts_refused(runs, tmp_path, capsys):
    shards = runs["dirs"][2]
    code, _, err = merge(capsys, *shards, runs["full"], "--output-dir", tmp_path / "dup")
    assert code == 0, err
    assert f"runner: warning: {2 * N_EPISODES} duplicate episode(s)" in err and "identical results" in err
    assert outputs_of(tmp_path / "dup") == outputs_of(runs["full"])

    tampered = shutil.copytree(shards[0], tmp_path / "tampered")
    lines = (tampered / "episodes.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["sum_reward"] += 1.0
    lines[0] = json.dumps(record)
    (tampered / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    code, _, err = merge(capsys, tampered, *shards, "--output-dir", tmp_path / "conflict")
    assert code == 1 and "recorded with different results" in err and "not reproducible" in err
    assert not (tmp_path / "conflict").exists()


def test_merge_refuses_another_spec_and_never_overwrites_a_run(runs, tmp_path, capsys):
    other = shutil.copytree(runs["dirs"][2][1], tmp_path / "other")
    data = json.loads((other / "run.json").read_text())
    data["spec"]["eval"]["seed"] = 7
    data["spec_hash"] = spec_hash(data["spec"])
    (other / "run.json").write_text(json.dumps(data))
    code, _, err = merge(capsys, runs["dirs"][2][0], other, "--output-dir", tmp_path / "x")
    assert code == 1 and "was run from another spec" in err and "eval.seed: 1000 -> 7" in err

    before = (runs["full"] / "episodes.jsonl").read_bytes()
    code, _, err = merge(capsys, *runs["dirs"][2], "--output-dir", runs["full"])
    assert code == 1 and "already holds the results of a run" in err
    assert (runs["full"] / "episodes.jsonl").read_bytes() == before

    code, _, err = merge(capsys, tmp_path / "nope")
    assert code == 1 and "no such directory" in err


def test_merge_needs_no_simulator(runs, tmp_path):
    """The CI merge job installs runner alone: merging must not import a simulator."""
    dirs = [shutil.copytree(d, tmp_path / d.name) for d in runs["dirs"][2]]
    code = (
        "import sys\n"
        "for name in ('metaworld', 'mujoco', 'gymnasium', 'libero', 'torch', 'lerobot', 'accelerate'):\n"
        "    sys.modules[name] = None\n"
        "from runner.cli.main import main\n"
        f"sys.exit(main(['merge', *{[str(d) for d in dirs]!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert outputs_of(tmp_path) == outputs_of(runs["full"])


# ── ci.shards: a matrix of N jobs and a merge job ────────────────────────────────────────────────────


def test_ci_shards_renders_a_matrix_and_a_merge_job():
    from test_generate import docker_calls, render_case

    workflow = yaml.safe_load(render_case("sharded")[".github/workflows/benchmark_sharded.yml"])
    job = workflow["jobs"]["sharded"]
    assert job["strategy"] == {"fail-fast": False, "matrix": {"shard": [0, 1, 2]}}
    assert job["env"]["SHARD"] == "${{ matrix.shard }}/3"
    step = next(s for s in job["steps"] if s.get("name") == "runner run specs/sharded.yaml")
    env = {"IMAGE": "img", "CONTAINER": "ctr", "SHARD": "1/3", "HF_TOKEN": "t"}
    [call] = docker_calls(step["run"], env)
    assert call[call.index("img") + 1:] == ["runner", "run", "specs/sharded.yaml", "--output-dir",
                                            "/tmp/eval-artifacts", "--set", "eval.n_episodes=2", "--shard", "1/3"]
    upload = next(s for s in job["steps"] if s.get("name") == "Upload the shard's results")
    assert upload["with"]["name"] == "sharded-shard-${{ matrix.shard }}"
    assert all(s.get("if", "").endswith("matrix.shard == 0") for s in job["steps"] if "moke" in s.get("name", ""))

    merge_job = workflow["jobs"]["sharded-merge"]
    assert merge_job["needs"] == "sharded" and "!cancelled()" in merge_job["if"]
    download = next(s for s in merge_job["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"]["pattern"] == "sharded-shard-*"
    merge_step = next(s for s in merge_job["steps"] if s.get("name") == "runner merge")
    assert "runner merge" in merge_step["run"] and "--output-dir" in merge_step["run"]
    names = {s["with"]["name"] for s in merge_job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")}
    assert names == {"sharded-metrics", "sharded-videos", "sharded-report"}  # those an unsharded job uploads
    single_job = yaml.safe_load(render_case("sharded")[".github/workflows/benchmark_single.yml"])["jobs"]["single"]
    assert names == {s["with"]["name"].replace("single", "sharded") for s in single_job["steps"]
                     if s.get("uses", "").startswith("actions/upload-artifact@")}
    summary = next(s for s in merge_job["steps"] if s.get("name") == "Job summary (runner report)")
    assert "runner report" in summary["run"] and '>>"$GITHUB_STEP_SUMMARY"' in summary["run"]
    for job_data in workflow["jobs"].values():
        for s in job_data["steps"]:
            assert "${{" not in s.get("run", ""), s  # never an expression inside shell text
    single = yaml.safe_load(render_case("sharded")[".github/workflows/benchmark_single.yml"])
    assert "strategy" not in single["jobs"]["single"] and list(single["jobs"]) == ["single", "health-check"]
    assert list(workflow["jobs"]) == ["sharded", "sharded-merge", "health-check"]  # the check is one job, unsharded


def test_ci_merge_step_merges_the_downloaded_shards(runs, tmp_path):
    """The merge job's `run:` script, with the downloaded artifacts laid out as download-artifact does."""
    from test_generate import render_case


    workflow = yaml.safe_load(render_case("sharded")[".github/workflows/benchmark_sharded.yml"])
    script = next(s for s in workflow["jobs"]["sharded-merge"]["steps"] if s.get("name") == "runner merge")["run"]
    temp = tmp_path / "runner-temp"
    for i, d in enumerate(runs["dirs"][2]):  # pretend these came from a 2-way matrix of the same names
        shutil.copytree(d, temp / "sharded-shards" / f"sharded-shard-{i}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "runner").write_text(f"#!/bin/sh\nexec {shlex.join(RUNNER)} \"$@\"\n")
    (bin_dir / "runner").chmod(0o755)
    env = {**os.environ, "RUNNER_TEMP": str(temp), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert outputs_of(temp / "sharded-eval") == outputs_of(runs["full"])


@pytest.mark.parametrize("value, ok", [(1, True), (8, True), (0, False), (257, False), ("2", False)])
def test_ci_shards_is_validated(tmp_path, value, ok):
    from runner.spec import SpecError

    path = write_spec_data(tmp_path, {"env": {"type": "gym", "task": "Pendulum-v1"}, "policy": {"type": "random"},
                                      "ci": {"shards": value}}, name="p")
    if ok:
        assert load_spec(path).ci.shards == value
    else:
        with pytest.raises(SpecError, match="ci.shards"):
            load_spec(path)
