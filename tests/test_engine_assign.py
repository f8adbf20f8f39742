"""The scheduler's decisions and the action checks, as pure functions: no process, no simulator."""

from __future__ import annotations

import re
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest

from runner.engine.actions import ActionSpec, check_action, check_batch
from runner.engine.assign import FAIL_FAST_EPISODES, Attempts, Pending, next_task
from runner.errors import EvaluationError


@dataclass(frozen=True)
class Job:
    task: str
    index: int


def pending(tasks: dict[str, int]) -> Pending:
    return Pending(Job(task, k) for task, n in tasks.items() for k in range(n))


# ── which task a free slot takes ─────────────────────────────────────────────────────────────────────


def test_task_major_takes_the_first_pending_task():
    p = pending({"a": 2, "b": 2})
    assert next_task(p, "task-major", "b", {}) == "a"
    p.take("a"), p.take("a")
    assert next_task(p, "task-major", "a", {}) == "b"


def test_spread_keeps_the_slots_task_then_takes_a_free_task_then_the_busiest():
    p = pending({"a": 3, "b": 3, "c": 1})
    assert next_task(p, "spread", "b", {"a": 1}) == "b"  # keeps its task
    assert next_task(p, "spread", None, {"a": 1}) == "b"  # the first task no other slot is on
    assert next_task(p, "spread", None, {"a": 1, "b": 1, "c": 1}) in ("a", "b")  # most pending per slot
    assert next_task(p, "spread", None, {"a": 2, "b": 1, "c": 1}) == "b"


def test_nothing_pending_and_an_unknown_schedule():
    assert next_task(Pending(), "spread", None, {}) is None
    with pytest.raises(ValueError, match="unknown schedule 'fastest'"):
        next_task(pending({"a": 1}), "fastest", None, {})


def test_pending_keeps_plan_order_and_puts_retries_first():
    p = pending({"a": 2, "b": 1})
    first = p.take("a")
    assert (first, len(p), list(p.tasks())) == (Job("a", 0), 2, ["a", "b"])
    p.put_back(first)
    assert p.take("a") == Job("a", 0) and p.take("a") == Job("a", 1)
    assert "a" not in p and list(p.tasks()) == ["b"]
    p.put_back(Job("a", 1))  # a task that had run out comes back (after the others: it was done)
    assert list(p.tasks()) == ["b", "a"] and bool(p)


# ── attempts ─────────────────────────────────────────────────────────────────────────────────────────


def test_attempts_retry_up_to_the_bound_then_give_up():
    attempts = Attempts(max_retries=2)
    verdicts = [attempts.failed("e") for _ in range(3)]
    assert [(v.retry, v.attempt, v.total) for v in verdicts] == [(True, 1, 3), (True, 2, 3), (False, 3, 3)]
    assert attempts.n_errors == 1
    assert not Attempts(max_retries=0).failed("e").retry


def test_a_setup_is_broken_when_the_first_episodes_all_fail():
    attempts = Attempts(max_retries=0)
    for k in range(FAIL_FAST_EPISODES - 1):
        attempts.failed(k)
    assert not attempts.setup_broken
    attempts.failed("last")
    assert attempts.setup_broken
    ok_first = Attempts(max_retries=0)
    ok_first.succeeded()
    for k in range(10):
        ok_first.failed(k)
    assert not ok_first.setup_broken
    resumed = Attempts(max_retries=0, fail_fast=False)
    for k in range(10):
        resumed.failed(k)
    assert not resumed.setup_broken


# ── actions ──────────────────────────────────────────────────────────────────────────────────────────

BOX = gym.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)


@pytest.mark.parametrize("action", [np.zeros(4, np.float32), [0.5, -0.5, 2.0, -3.0], np.arange(4), np.ones(4, int)])
def test_box_actions_of_the_right_shape_pass_even_out_of_bounds(action):
    assert check_action(action, ActionSpec(BOX), lambda: "ep").shape == (4,)


@pytest.mark.parametrize("action, message", [
    (np.array([0, np.nan, 0, 0], np.float32), "a non-finite action (nan at index 1: NaN or infinity)"),
    (np.array([np.inf, 0, 0, 0]), "a non-finite action (inf at index 0"),
    (np.array([0, 0, 0, -np.inf]), "(-inf at index 3"),
    (np.zeros(3), "an action of shape (3,); the env expects shape (4,)"),
    (np.zeros((1, 4)), "shape (1, 4)"),
    (np.zeros(4, complex), "an action that is not a number array (a ndarray of dtype complex128)"),
    (np.array(["a"] * 4), "not a number array (a ndarray of dtype <U1)"),
    (np.zeros(4, bool), "an action of dtype bool (the env takes numbers)"),
    ([0.0, [1.0], 0.0, 0.0], "not a number array (a list)"),
    (None, "not a number array (a NoneType)"),
    ({"x": 1}, "not a number array (a dict)"),
    (np.array([object()] * 4), "not a number array (a ndarray of dtype object)"),
])
def test_anything_else_is_a_policy_error_naming_the_episode(action, message):
    with pytest.raises(EvaluationError, match="returned .*in push-v3_0 episode 2") as caught:
        check_action(action, ActionSpec(BOX), lambda: "push-v3_0 episode 2")
    assert message in str(caught.value)


def test_discrete_spaces_take_integers_in_range():
    spec = ActionSpec(gym.spaces.Discrete(3, start=1))
    assert check_action(np.int64(2), spec, lambda: "ep").shape == ()
    for bad, message in [(0, "the action 0, outside the env's range 1..3"), (4, "outside"),
                         (1.0, "dtype float64 (the env takes integers)")]:
        with pytest.raises(EvaluationError, match=re.escape(message)):
            check_action(bad, spec, lambda: "ep")
    multi = ActionSpec(gym.spaces.MultiDiscrete([2, 5]))
    check_action([1, 4], multi, lambda: "ep")
    with pytest.raises(EvaluationError, match="outside the env's range"):
        check_action([2, 0], multi, lambda: "ep")
    check_action([0, 1, 1], ActionSpec(gym.spaces.MultiBinary(3)), lambda: "ep")


def test_a_batch_is_checked_row_by_row():
    specs = [ActionSpec(BOX)] * 3
    assert check_batch(np.zeros((3, 4)), specs, lambda i: f"episode {i}").shape == (3, 4)
    actions = np.zeros((3, 4))
    actions[2, 1] = np.nan
    with pytest.raises(EvaluationError, match=r"non-finite action .* \(row 2\) in episode 2"):
        check_batch(actions, specs, lambda i: f"episode {i}")
    for bad, message in [(np.zeros((2, 4)), "actions of shape (2, 4) (a ndarray of dtype float64) for 3 envs; "
                                            "expected an array of shape (3, 4)"),
                         (np.float32(0), "of shape ()"),
                         ([np.zeros(4), np.zeros(3), np.zeros(4)], "that are not a number array (a list) for 3 envs")]:
        with pytest.raises(EvaluationError) as caught:
            check_batch(bad, specs, lambda i: f"episode {i}")
        assert message in str(caught.value)
