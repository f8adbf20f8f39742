"""The ledger (episodes.jsonl): append + fsync per episode, torn last lines, corruption, hard kills."""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap

import pytest
from helpers import kill_9_once_started

from runner.errors import RunnerError
from runner.results.ledger import Ledger, LedgerError, load_ledger, read_ledger
from runner.results.records import ERROR, EpisodeRecord


def rec(k: int, **kw) -> EpisodeRecord:
    base = dict(
        task_group="easy",
        task_id=0,
        task="push-v3",
        episode_index=k,
        seed=1000 + k,
        steps=50,
        sum_reward=1.5 * k,
        max_reward=0.5,
        success=k % 2 == 0,
        wall_s=0.25,
    )
    base.update(kw)
    return EpisodeRecord(**base)


def test_round_trip_and_one_line_per_record(tmp_path):
    path = tmp_path / "deep" / "dir" / "episodes.jsonl"  # parents are created
    records = [
        rec(0),
        rec(1, video_path="videos/easy_0/eval_episode_1.mp4"),
        rec(2, status=ERROR, error="timeout after 60 s", success=False, sum_reward=math.nan),
    ]
    with Ledger(path) as ledger:
        for r in records:
            ledger.append(r)
            # written and flushed at once: visible to another reader before close
            assert len(path.read_text().splitlines()) == records.index(r) + 1
    lines = path.read_text().splitlines()
    assert all(isinstance(json.loads(line), dict) for line in lines)
    assert json.loads(lines[2])["sum_reward"] is None  # strict JSON, no NaN
    back = read_ledger(path)
    assert back[:2] == records[:2]
    assert math.isnan(back[2].sum_reward) and back[2].error == "timeout after 60 s"


def test_appending_after_close_is_refused(tmp_path):
    ledger = Ledger(tmp_path / "e.jsonl")
    ledger.close()
    with pytest.raises(ValueError, match="closed"):
        ledger.append(rec(0))


def test_torn_last_line_is_dropped_and_reported(tmp_path):
    path = tmp_path / "episodes.jsonl"
    good = "".join(json.dumps(rec(k).to_json()) + "\n" for k in range(3))
    torn = json.dumps(rec(3).to_json())[:37]
    path.write_text(good + torn)
    contents = load_ledger(path)
    assert [r.episode_index for r in contents.records] == [0, 1, 2]
    assert contents.dropped_lines == 1 and contents.dropped_text == torn
    assert read_ledger(path) == contents.records


def test_reopening_cuts_the_torn_line_before_appending(tmp_path):
    path = tmp_path / "episodes.jsonl"
    good = "".join(json.dumps(rec(k).to_json()) + "\n" for k in range(2))
    path.write_text(good + '{"task_group": "ea')
    with Ledger(path) as ledger:
        assert ledger.existing.dropped_lines == 1
        assert [r.episode_index for r in ledger.existing.records] == [0, 1]
        ledger.append(rec(2))
    contents = load_ledger(path)
    assert contents.dropped_lines == 0
    assert [r.episode_index for r in contents.records] == [0, 1, 2]


def test_complete_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps(rec(0).to_json()) + "\n" + json.dumps(rec(1).to_json()))
    assert load_ledger(path).dropped_lines == 0
    with Ledger(path) as ledger:
        ledger.append(rec(2))
    assert [r.episode_index for r in read_ledger(path)] == [0, 1, 2]


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        ("this is not json", "Expecting value"),
        ("[1, 2]", "expected a JSON object"),
        ('{"task_group": "easy"}', "missing field 'task_id'"),
        (json.dumps({**rec(0).to_json(), "success": "yes"}), "field 'success' has a wrong type"),
        (json.dumps({**rec(0).to_json(), "status": "crashed"}), "field 'status' must be one of"),
        (json.dumps({**rec(0).to_json(), "episode_index": -1}), "'episode_index' must be >= 0"),
    ],
    ids=["not-json", "not-object", "missing-field", "wrong-type", "bad-status", "negative-index"],
)
def test_garbage_in_the_middle_names_file_and_line(tmp_path, bad_line, reason):
    path = tmp_path / "episodes.jsonl"
    lines = [json.dumps(rec(0).to_json()), bad_line, json.dumps(rec(1).to_json())]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LedgerError) as info:
        load_ledger(path)
    assert str(info.value).startswith(f"{path}:2: not a valid episode record")
    assert reason in str(info.value)
    assert isinstance(info.value, RunnerError)  # the CLI prints it as one message
    with pytest.raises(LedgerError):
        Ledger(path)  # never append to a corrupt ledger
    assert path.read_text() == "\n".join(lines) + "\n"  # untouched


def test_blank_lines_are_ignored(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps(rec(0).to_json()) + "\n\n" + json.dumps(rec(1).to_json()) + "\n\n")
    contents = load_ledger(path)
    assert len(contents.records) == 2 and contents.dropped_lines == 0


def test_missing_ledger_is_a_clear_error(tmp_path):
    with pytest.raises(LedgerError, match="no such ledger"):
        load_ledger(tmp_path / "nope.jsonl")


def test_unwritable_location_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(LedgerError, match="cannot open the ledger"):
        Ledger(blocker / "episodes.jsonl")


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from runner.results.ledger import Ledger
    from runner.results.records import EpisodeRecord
    with Ledger(Path(sys.argv[1])) as ledger:
        k = 0
        while True:
            ledger.append(EpisodeRecord("easy", 0, "push-v3", k, 1000 + k, 500, 1.0 * k, 1.0, True, 0.1,
                                        error=None, video_path="x" * 2000))
            if k == 0:
                print("started", flush=True)
            k += 1
    """
)


def test_kill_9_while_appending_leaves_a_readable_ledger(tmp_path):
    """A real hard kill in the middle of appending: every surviving record is whole and in order."""
    for attempt in range(3):
        path = tmp_path / f"episodes{attempt}.jsonl"
        kill_9_once_started(WRITER, path, after_s=0.05 + 0.05 * attempt)
        contents = load_ledger(path)
        n = len(contents.records)
        assert n >= 1
        assert [r.episode_index for r in contents.records] == list(range(n))
        with Ledger(path) as ledger:  # resume appends cleanly after whatever the kill left
            ledger.append(dataclasses.replace(contents.records[0], episode_index=n))
        again = load_ledger(path)
        assert again.dropped_lines == 0 and len(again.records) == n + 1
