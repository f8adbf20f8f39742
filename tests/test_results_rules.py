"""Results files are input from anyone (a CI artifact, a copied directory): one set of ledger rules for resume,
`runner merge` and the merge of launched runs; paths that stay inside their directory; bounded sizes; a failed
merge writes nothing. Directories are written here with runner's own writers, then tampered with."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import (
    REPO,
    SEED,
    TASKS,
    N,
    full_records,
    record,
    run_file,
    runner_cli,
    runner_main,
    runner_run,
    write_dir,
    write_spec,
)

from runner.cli.main import main
from runner.envs import get_adapter
from runner.results import Shard, read_run_file
from runner.results.coverage import Plan, cover, video_relpath
from runner.results.ledger import MAX_LINE_BYTES, LedgerError, load_ledger
from runner.results.locations import claim, run_dir_order
from runner.results.runfile import RunFileError, spec_hash
from runner.spec import load_spec
from runner.spec.derived import run_identity


def merge(capsys, *args) -> tuple[int, str, str]:
    return runner_main(capsys, "merge", *args)


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


# ── the rules, as a pure function ────────────────────────────────────────────────────────────────────


def test_rules_accept_a_whole_run_and_report_what_is_missing():
    plan = run_file().plan
    coverage = cover(plan, [full_records()[:-1]])
    assert not coverage.foreign and not coverage.conflicts and coverage.missing == [("easy", 1, N - 1)]
    assert len(coverage.records) == 2 * N - 1


@pytest.mark.parametrize("bad, reason", [
    (dict(seed=5), "has seed 5, not eval.seed + 1 = 1001"),
    (dict(task="pick-place-v3"), "is 'reach-v3' in the plan, not 'pick-place-v3'"),
    (dict(task_id=7), "task easy_7 is not in the plan"),
    (dict(task_group="hard"), "task hard_0 is not in the plan"),
    (dict(episode_index=N, seed=SEED + N), f"episode {N} of easy_0 is outside the plan"),
    (dict(video_path="../../../etc/passwd"), 'names the video "../../../etc/passwd", but the plan records no video'),
    (dict(video_path="videos/easy_0/eval_episode_1.mp4"), "but the plan records no video of it"),
    (dict(episode_index=0, seed=SEED, video_path="videos/easy_1/eval_episode_0.mp4"),
     'not the plan\'s "videos/easy_0/eval_episode_0.mp4"'),
])
def test_rules_refuse_a_record_outside_the_plan(bad, reason):
    coverage = cover(run_file().plan, [[*full_records(), record(TASKS[0], 1, **bad)]], [list(range(1, 8))])
    [foreign] = coverage.foreign
    assert reason in foreign.reason and foreign.line == 7


def test_rules_keep_identical_duplicates_and_refuse_different_results():
    records = full_records()
    coverage = cover(run_file().plan, [records, [records[1]]])
    assert list(coverage.duplicates) == [records[1].key] and not coverage.conflicts
    coverage = cover(run_file().plan, [records, [record(TASKS[0], 1, sum_reward=99.0)]])
    assert list(coverage.conflicts) == [records[1].key]
    error = record(TASKS[0], 1, status="error", error="crashed", video_path=None, success=False)
    coverage = cover(run_file().plan, [[error, *records]])  # an attempt that failed, then the result
    assert not coverage.conflicts and records[1] in coverage.records


def test_rules_refuse_a_record_of_another_shard():
    shard = Shard(0, 2)
    records = full_records()
    coverage = cover(run_file(shard).plan, [records], shards=[shard])
    assert len(coverage.foreign) == N  # positions 1, 3, 5 belong to shard 1/2
    assert "belongs to another shard than 0/2" in coverage.foreign[0].reason


# ── resume ───────────────────────────────────────────────────────────────────────────────────────────


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """A real, complete run of 2 x 2 Meta-World episodes (a few steps each, in process)."""
    pytest.importorskip("metaworld")
    tmp = tmp_path_factory.mktemp("finished")
    spec = write_spec(tmp, name="r", task="reach-v3,push-v3", max_steps=5, batch_size=1)  # random, 2 episodes a task
    out = tmp / "out"
    assert main(["run", str(spec), "--output-dir", str(out), "--no-progress"]) == 0
    return spec, out


def resume(spec: Path, out: Path) -> subprocess.CompletedProcess:
    return runner_run(spec, out, timeout=120)


def tampered(finished, tmp_path, edit) -> Path:
    spec, out = finished
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("run.json", "episodes.jsonl"):
        (copy / name).write_bytes((out / name).read_bytes())
    lines = (copy / "episodes.jsonl").read_text().splitlines()
    edit(lines)
    (copy / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    return copy


def _with(line: str, **changes) -> str:
    return json.dumps({**json.loads(line), **changes})


@pytest.mark.parametrize("edit, message", [
    (lambda lines: lines.append(_with(lines[0], sum_reward=123.0)),
     "1 episode(s) recorded with different results (reach-v3_0 episode 0"),
    (lambda lines: lines.__setitem__(1, _with(lines[1], seed=7)), "has seed 7, not eval.seed + 1 = 1001"),
    (lambda lines: lines.__setitem__(0, _with(lines[0], video_path="../../escape.mp4")),
     'names the video "../../escape.mp4", but the plan records no video of it'),
    (lambda lines: lines.append(_with(lines[0], episode_index=9, seed=1009)), "outside the plan"),
])
def test_resume_refuses_a_ledger_that_breaks_the_rules(finished, tmp_path, edit, message):
    spec, _ = finished
    copy = tampered(finished, tmp_path, edit)
    before = tree(copy), (copy / "episodes.jsonl").read_bytes()
    proc = resume(spec, copy)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "does not obey the ledger rules" in proc.stderr
    assert "episodes.jsonl" in proc.stderr and "Traceback" not in proc.stderr
    assert (tree(copy), (copy / "episodes.jsonl").read_bytes()) == before  # nothing touched


def test_resume_accepts_an_identical_duplicate(finished, tmp_path):
    spec, _ = finished
    copy = tampered(finished, tmp_path, lambda lines: lines.append(lines[0]))
    proc = resume(spec, copy)
    assert proc.returncode == 0 and "nothing left to run" in proc.stdout, proc.stderr
    assert json.loads((copy / "eval_info.json").read_text())["overall"]["n_episodes"] == 4


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(spec_hash="sha256:" + "0" * 64), "spec_hash is not the hash of spec"),
    (lambda d: d.update(n_episodes="2"), "n_episodes: '2' is not of type 'integer'"),
    (lambda d: d.pop("tasks"), "'tasks' is a required property"),
    (lambda d: d.update(tasks="reach"), "tasks: 'reach' is not of type 'array'"),
    (lambda d: d.update(shard={"index": 3, "count": 2}), "need 0 <= index < count"),
    (lambda d: d.update(labels=[]), "labels: [] is not of type 'object'"),
])
def test_a_run_file_runner_did_not_write_is_refused(finished, tmp_path, edit, message, capsys):
    spec, _ = finished
    copy = tampered(finished, tmp_path, lambda lines: None)
    data = json.loads((copy / "run.json").read_text())
    edit(data)
    (copy / "run.json").write_text(json.dumps(data))
    proc = resume(spec, copy)
    assert proc.returncode == 2 and "not a valid run file" in proc.stderr and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    code, _, err = merge(capsys, copy, "--output-dir", tmp_path / "merged")
    assert code == 2 and "not a valid run file" in err and message in err  # a bad input file: exit 2
    assert not (tmp_path / "merged").exists()


# ── bounded claims ───────────────────────────────────────────────────────────────────────────────────


def test_a_run_file_claiming_a_huge_plan_is_refused_at_once(tmp_path, capsys):
    run = run_file()
    data = run.to_json()
    data["tasks"] = [{"task_group": "g", "task_id": i, "task": "t", "text": ""} for i in range(200)]
    data["n_episodes"] = data["spec"]["eval"]["n_episodes"] = 10_000
    data["spec_hash"] = spec_hash(data["spec"])
    (tmp_path / "huge").mkdir()
    (tmp_path / "huge" / "run.json").write_text(json.dumps(data))
    with pytest.raises(RunFileError, match="the plan is too large: 200 tasks x 10,000 episodes"):
        read_run_file(tmp_path / "huge")
    data["n_episodes"] = data["spec"]["eval"]["n_episodes"] = 10**12
    data["spec_hash"] = spec_hash(data["spec"])
    (tmp_path / "huge" / "run.json").write_text(json.dumps(data))
    code, _, err = merge(capsys, tmp_path / "huge", "--output-dir", tmp_path / "out")
    assert code == 2 and "is greater than the maximum of 10000" in err


def test_a_huge_run_file_or_ledger_line_is_refused(tmp_path):
    (tmp_path / "run.json").write_bytes(b" " * (17 << 20))
    with pytest.raises(RunFileError, match="larger than 16 MiB"):
        read_run_file(tmp_path)
    (tmp_path / "episodes.jsonl").write_bytes(b"{" + b" " * MAX_LINE_BYTES + b"}\n")
    with pytest.raises(LedgerError, match="episodes.jsonl:1: a line longer than 1 MiB"):
        load_ledger(tmp_path / "episodes.jsonl")


def test_a_ledger_with_more_records_than_the_plan_can_make_is_refused(tmp_path):
    write_dir(tmp_path, run_file(), full_records() * 4, videos=False)
    with pytest.raises(LedgerError, match="more than 10 records"):
        load_ledger(tmp_path / "episodes.jsonl", max_records=10)


# ── merge writes only inside its output directory, and nothing when it fails ─────────────────────────


def test_merge_refuses_a_video_path_that_leaves_the_directory(tmp_path, capsys):
    records = full_records()
    records[0] = record(TASKS[0], 0, video_path="../../outside/stolen.mp4")
    src = write_dir(tmp_path / "a" / "b" / "src", run_file(), records)
    (tmp_path / "a" / "outside").mkdir()
    (tmp_path / "a" / "outside" / "stolen.mp4").write_bytes(b"secret")
    code, _, err = merge(capsys, src, "--output-dir", tmp_path / "merged")
    assert code == 1 and 'names the video "../../outside/stolen.mp4"' in err and "nothing was written" in err
    assert not (tmp_path / "merged").exists() and tree(tmp_path / "a" / "outside") == ["stolen.mp4"]


def test_merge_refuses_a_video_that_is_a_symlink_out_of_its_directory(tmp_path, capsys):
    src = write_dir(tmp_path / "src", run_file(), full_records())
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    video = src / video_relpath(TASKS[1], 0)
    video.unlink()
    video.symlink_to(secret)
    code, _, err = merge(capsys, src, "--output-dir", tmp_path / "merged")
    assert code == 1 and "leads outside" in err and "nothing was written" in err
    assert not (tmp_path / "merged").exists()


def test_a_failed_merge_leaves_the_output_directory_as_it_was(tmp_path, capsys):
    src = write_dir(tmp_path / "src", run_file(), full_records())
    code, _, err = merge(capsys, src, "--output-dir", tmp_path / "merged")
    assert code == 0, err
    before = {p: (tmp_path / "merged" / p).read_bytes() for p in tree(tmp_path / "merged")
              if (tmp_path / "merged" / p).is_file()}
    (src / video_relpath(TASKS[0], 0)).unlink()  # a video named in the ledger is missing now
    code, _, err = merge(capsys, src, "--output-dir", tmp_path / "merged")
    assert code == 1 and "is named in the ledger but missing" in err
    after = {p: (tmp_path / "merged" / p).read_bytes() for p in tree(tmp_path / "merged")
             if (tmp_path / "merged" / p).is_file()}
    assert after == before  # no staging directory left, no file changed
    code, _, err = merge(capsys, src, "--output-dir", tmp_path / "fresh")
    assert code == 1 and not (tmp_path / "fresh").exists()


def test_merge_output_is_complete_and_valid(tmp_path, capsys):
    a = write_dir(tmp_path / "shard-0-of-2", run_file(Shard(0, 2)), full_records()[0::2])
    b = write_dir(tmp_path / "shard-1-of-2", run_file(Shard(1, 2)), full_records()[1::2])
    code, out, err = merge(capsys, a, b)
    assert code == 0, err
    merged = read_run_file(tmp_path)
    assert merged.state == "complete" and merged.merged_from == (str(a), str(b))
    assert [r.key for r in load_ledger(tmp_path / "episodes.jsonl").records] == [r.key for r in full_records()]
    assert not [p for p in tree(tmp_path) if ".runner-merge-" in p]


def test_merge_refuses_a_shard_holding_another_shards_episodes(tmp_path, capsys):
    a = write_dir(tmp_path / "shard-0-of-2", run_file(Shard(0, 2)), full_records())  # all of them
    b = write_dir(tmp_path / "shard-1-of-2", run_file(Shard(1, 2)), full_records()[1::2])
    code, _, err = merge(capsys, a, b)
    assert code == 1 and "belongs to another shard than 0/2" in err and not (tmp_path / "eval_info.json").exists()


# ── output directories ───────────────────────────────────────────────────────────────────────────────


def test_runs_started_in_the_same_second_get_their_own_default_directory(tmp_path):
    base = tmp_path / "outputs" / "eval" / "2026-12-01" / "12-00-00_metaworld"
    claimed = [claim(base) for _ in range(3)]
    assert [p.name for p in claimed] == ["12-00-00_metaworld", "12-00-00-2_metaworld", "12-00-00-3_metaworld"]
    assert max(claimed, key=run_dir_order).name == "12-00-00-3_metaworld"


@pytest.mark.parametrize("argv, message", [
    (["run", "specs/metaworld.yaml", "--output-dir", ""], "argument --output-dir: an empty path"),
    (["merge", "x", "--output-dir", ""], "argument --output-dir: an empty path"),
    (["run", "specs/metaworld.yaml", "--set", "policy.type=random", "--output-dir", "x" * 300],
     "File name too long"),
    (["run", "specs/metaworld.yaml", "--set", "policy.type=random", "--episode-timeout", "nan"],
     "episode timeout must be a number of seconds >= 0"),
    (["run", "specs/metaworld.yaml", "--set", "policy.type=random", "--episode-timeout", "inf"],
     "episode timeout must be a number of seconds >= 0"),
    (["run", "specs/metaworld.yaml", "--set", "policy.type=random", "--batch-size", "100000"],
     "batch size must be 0 (auto) .. 1024"),
])
def test_bad_output_dirs_and_options_are_one_message(argv, message, tmp_path):
    pytest.importorskip("metaworld")
    proc = runner_cli(*argv, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not [name for name in os.listdir(REPO) if name.startswith("xxx")]


def test_the_spec_a_resume_needs_is_the_one_run_json_names(finished):
    """run_identity is what run.json hashes: the spec of a finished run hashes to its spec_hash."""
    spec, out = finished
    assert read_run_file(out).hash == spec_hash(run_identity(load_spec(spec)))
    assert read_run_file(out).tasks == tuple(get_adapter("metaworld").tasks(load_spec(spec).env))
    assert Plan(read_run_file(out).tasks, 2, 1000, 0) == read_run_file(out).plan
    assert os.path.isfile(out / "eval_info.json")
