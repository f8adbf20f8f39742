"""Output files: atomic JSON writes, paths, write_outputs, and validate_outputs against the schemas."""

from __future__ import annotations

import json
import math
import os
import textwrap
from datetime import datetime
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from helpers import kill_9_once_started

from runner.results import outputs
from runner.results.ledger import Ledger
from runner.results.locations import default_run_dir
from runner.results.outputs import (
    OutputValidationError,
    validate_outputs,
    video_relpath,
    write_json_atomic,
    write_outputs,
)
from runner.results.records import ERROR, EpisodeRecord
from runner.results.schema import EPISODE, EVAL_INFO, METRICS, RUN, load_schema
from runner.results.video import VideoWriter
from runner.tasks import TaskRef

TASKS = [TaskRef("easy", 0, "push-v3", "Push the puck to a goal."), TaskRef("easy", 1, "reach-v3", "Reach a goal.")]


def test_paths():
    when = datetime(2026, 3, 7, 9, 5, 2)
    assert default_run_dir("metaworld", when) == Path("outputs/eval/2026-03-07/09-05-02_metaworld")
    assert video_relpath(TASKS[1], 3) == "videos/easy_1/eval_episode_3.mp4"


@pytest.mark.parametrize("name", [EPISODE, EVAL_INFO, METRICS, RUN])
def test_schemas_are_valid_draft_2020_12(name):
    """Checked here, not each time a results file is read."""
    schema = load_schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_write_json_atomic_format(tmp_path):
    path = tmp_path / "sub" / "x.json"
    write_json_atomic(path, {"b": 1, "a": [1.5, None]})
    assert path.read_text() == '{\n  "b": 1,\n  "a": [\n    1.5,\n    null\n  ]\n}\n'  # key order kept, newline
    assert os.listdir(path.parent) == ["x.json"]


def test_write_json_atomic_refuses_nan_and_keeps_old_file(tmp_path):
    path = tmp_path / "x.json"
    write_json_atomic(path, {"v": 1})
    with pytest.raises(ValueError):
        write_json_atomic(path, {"v": math.nan})
    assert json.loads(path.read_text()) == {"v": 1}
    assert os.listdir(tmp_path) == ["x.json"]


def test_write_json_atomic_failure_before_replace_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "x.json"
    write_json_atomic(path, {"v": "old"})

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs.os, "replace", broken_replace)
    with pytest.raises(outputs.OutputError, match="No space left on device"):
        write_json_atomic(path, {"v": "new"})
    assert json.loads(path.read_text()) == {"v": "old"}
    assert os.listdir(tmp_path) == ["x.json"]  # the temp file is cleaned up


REWRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from runner.results.outputs import write_json_atomic
    path = Path(sys.argv[1])
    big = {"pad": "x" * 2_000_000}
    i = 0
    while True:
        write_json_atomic(path, {"version": i, **big})
        if i == 0:
            print("started", flush=True)
        i += 1
    """
)


def test_kill_9_during_rewrites_leaves_old_or_new_file(tmp_path):
    """A real hard kill while a 2 MB file is rewritten in a loop: the file always parses completely."""
    path = tmp_path / "eval_info.json"
    for attempt in range(3):
        kill_9_once_started(REWRITER, path, after_s=0.05 + 0.07 * attempt)
        data = json.loads(path.read_text())
        assert isinstance(data["version"], int) and len(data["pad"]) == 2_000_000


def make_run(out: Path, *, with_error: bool = True, videos: int = 1) -> tuple[dict, dict]:
    """A small but complete output directory, written the way the engine writes it."""
    records = []
    with Ledger(out / "episodes.jsonl") as ledger:
        for task in TASKS:
            for k in range(3):
                video = None
                if k < videos:
                    video = video_relpath(task, k)
                    with VideoWriter(out / video, fps=80) as w:
                        for i in range(4):
                            w.add(np.full((16, 16, 3), 40 * i, np.uint8))
                if with_error and task.task_id == 1 and k == 2:
                    r = EpisodeRecord(
                        task.group,
                        task.task_id,
                        task.name,
                        k,
                        1000 + k,
                        0,
                        math.nan,
                        math.nan,
                        False,
                        0.1,
                        None,
                        ERROR,
                        "worker died (exit -11)",
                    )
                else:
                    r = EpisodeRecord(
                        task.group, task.task_id, task.name, k, 1000 + k, 20, 2.0 * k, 1.0, k != 1, 0.1, video
                    )
                ledger.append(r)
                records.append(r)
    return write_outputs(
        out, records=records[::-1], tasks=TASKS, eval_s=3.5, env="metaworld", task="easy", policy="scripted"
    )


def test_write_outputs_and_validate(tmp_path):
    eval_info, metrics = make_run(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["episodes.jsonl", "eval_info.json", "metrics.json", "videos"]
    assert json.loads((tmp_path / "eval_info.json").read_text()) == eval_info
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert metrics["n_errors"] == 1 and metrics["n_episodes"] == 5
    assert set(metrics["task_descriptions"]) == {"easy_0", "easy_1"}
    validate_outputs(tmp_path)  # raises on any problem


def problems_of(out: Path, **kw) -> list[str]:
    with pytest.raises(OutputValidationError) as info:
        validate_outputs(out, **kw)
    return info.value.problems


def test_validate_reports_missing_files(tmp_path):
    problems = problems_of(tmp_path)
    assert any("no such ledger" in p for p in problems)
    assert "eval_info.json: missing" in problems and "metrics.json: missing" in problems


def test_validate_reports_nan_schema_and_missing_video(tmp_path):
    make_run(tmp_path)
    info_path = tmp_path / "eval_info.json"
    info_path.write_text(info_path.read_text().replace('"eval_s": 3.5', '"eval_s": NaN', 1))
    assert any("eval_info.json: not strict JSON" in p for p in problems_of(tmp_path))

    make_run(tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    del metrics["task_descriptions"]
    metrics["n_episodes"] = "5"
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    problems = problems_of(tmp_path)
    assert "metrics.json: (top): 'task_descriptions' is a required property" in problems
    assert "metrics.json: n_episodes: '5' is not of type 'integer'" in problems

    make_run(tmp_path)
    (tmp_path / "videos/easy_1/eval_episode_0.mp4").unlink()
    assert problems_of(tmp_path) == ["video videos/easy_1/eval_episode_0.mp4: missing or empty"]
    validate_outputs(tmp_path, check_videos=False)


def test_validate_reports_ledger_problems(tmp_path):
    make_run(tmp_path)
    ledger = tmp_path / "episodes.jsonl"
    lines = ledger.read_text().splitlines()
    bad = json.loads(lines[0])
    bad["extra"] = 1
    ledger.write_text("\n".join([json.dumps(bad), *lines[1:]]) + "\n" + '{"torn": ')
    problems = problems_of(tmp_path)
    assert "episodes.jsonl:1: (top): Additional properties are not allowed ('extra' was unexpected)" in problems
    assert any(p.startswith("episodes.jsonl: torn last line") for p in problems)


def test_validate_checks_eval_info_against_the_ledger(tmp_path):
    make_run(tmp_path)
    ledger = tmp_path / "episodes.jsonl"
    ledger.write_text("".join(ledger.read_text().splitlines(keepends=True)[1:]))  # drop one episode
    assert problems_of(tmp_path) == ["eval_info.json: differs from what episodes.jsonl aggregates to"]

    make_run(tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    metrics["pc_success"] = 99.0
    metrics["task_descriptions"].pop("easy_1")
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    problems = problems_of(tmp_path)
    assert any(p.startswith("metrics.json: pc_success = 99.0 but eval_info.json overall.pc_success") for p in problems)
    assert "metrics.json: task_descriptions has no entry for easy_1" in problems


def test_an_uncommitted_spec_makes_the_run_dirty(tmp_path):
    """run.json's runner.dirty covers the spec and its partials: an untracked or edited spec file inside the checkout
    is named, as a commit alone could not reproduce the run."""
    import subprocess

    from runner.results.provenance import git_state

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "_base.yaml").write_text("install: {}\n")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "c")
    committed = (tmp_path / "specs" / "_base.yaml",)
    assert git_state(tmp_path, committed)["dirty"] is False
    (tmp_path / "specs" / "new.yaml").write_text("name: new\n")
    state = git_state(tmp_path, (*committed, tmp_path / "specs" / "new.yaml"))
    assert state["dirty"] is True and state["uncommitted_specs"] == ["specs/new.yaml"]
    (tmp_path / "specs" / "_base.yaml").write_text("install: {apt: [x]}\n")
    assert git_state(tmp_path, committed)["uncommitted_specs"] == ["specs/_base.yaml"]
    assert git_state(tmp_path, (tmp_path.parent / "elsewhere.yaml",))["dirty"] is True  # the checkout itself changed
