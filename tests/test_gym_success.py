"""Success rules for Gym envs (`env.success`), and an env that never reports success saying so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import write_spec_data

from runner.cli.main import main


def run(tmp_path: Path, capsys, success: dict | None, *, task: str = "CartPole-v1",
        policy: dict | None = None) -> tuple[dict, str]:
    env = {"type": "gym", "task": task}
    if success is not None:
        env["success"] = success
    spec = write_spec_data(tmp_path, {
        "env": env, "policy": policy or {"type": "python", "path": "tests.policies_for_tests:balance"},
        "eval": {"n_episodes": 3, "batch_size": 1, "videos": 0}, "ci": {"enabled": False}}, name="cart")
    assert main(["run", str(spec), "--output-dir", str(tmp_path / "out"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    return json.loads((tmp_path / "out" / "eval_info.json").read_text()), out


pytestmark = pytest.mark.usefixtures("in_repo")  # the python policy's module is tests.policies_for_tests


def test_a_balancing_policy_survives_to_the_time_limit(tmp_path, capsys):
    info, out = run(tmp_path, capsys, {"survive": True})
    task = info["per_task"][0]
    assert task["aggregated"]["pc_success"] == 100.0 and task["metrics"]["sum_rewards"] == [500.0] * 3
    assert task["success_reported"] and info["overall"]["success_unreported"] == [] and "note:" not in out


def test_a_return_threshold(tmp_path, capsys):
    info, _ = run(tmp_path, capsys, {"min_return": 475})
    assert info["overall"]["pc_success"] == 100.0
    info, _ = run(tmp_path / "random", capsys, {"min_return": 475}, policy={"type": "random"})
    assert info["overall"]["pc_success"] == 0.0 and info["overall"]["success_unreported"] == []


def test_an_env_that_never_reports_success_says_so(tmp_path, capsys):
    """CartPole's info has no success key: without a rule its 0 % is no result, and the run says so."""
    info, out = run(tmp_path, capsys, None)
    assert info["per_task"][0]["success_reported"] is False and info["overall"]["success_unreported"] == ["gym_0"]
    assert info["overall"]["pc_success"] == 0.0
    assert "note: the env never said whether 1 task(s) succeeded (gym_0)" in out and "env.success" in out
    ledger = [json.loads(line) for line in (tmp_path / "out" / "episodes.jsonl").read_text().splitlines()]
    assert all(record["success_reported"] is False for record in ledger)


def test_an_info_key_rule(tmp_path, capsys):
    """An info key the env never sets is the same as none: reported as missing, not as failures."""
    info, _ = run(tmp_path, capsys, {"info_key": "goal_reached"})
    assert info["overall"]["success_unreported"] == ["gym_0"]
