"""The engine with the real simulator: seeds, batch-size independence, continuous scheduling, outputs."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import helpers
import numpy as np
import pytest

from runner.engine import RunOptions, auto_batch_size, evaluate, make_plan
from runner.engine.plan import render_threads
from runner.errors import ConfigError, EvaluationError
from runner.policies.base import Policy
from runner.results import read_ledger, validate_outputs
from runner.results.coverage import Plan
from runner.spec import load_spec
from runner.tasks import TaskRef

pytest.importorskip("metaworld")
pytestmark = pytest.mark.filterwarnings("ignore:Constant")


# Meta-World push-v3,reach-v3, the scripted experts, 3 episodes a task, batch size auto, async envs
write_spec = functools.partial(helpers.write_spec, policy={"type": "scripted"}, n=3, batch_size=0, use_async_envs=True)


def run(spec_path: Path, out: Path, **options):
    return evaluate(load_spec(spec_path), out, RunOptions(progress=False, **options))


def results(records) -> list[tuple]:
    """Per-episode results without timings, in plan order."""
    return sorted((r.task_group, r.task_id, r.episode_index, r.seed, r.steps, r.sum_reward, r.max_reward, r.success)
                  for r in records)


# ── plan ─────────────────────────────────────────────────────────────────────────────────────────────


def test_plan_seeds_videos_and_order():
    tasks = [TaskRef("easy", 0, "a-v3", "A"), TaskRef("easy", 1, "b-v3", "B")]
    jobs = make_plan(Plan(tuple(tasks), n_episodes=3, seed=100, videos=1), max_steps=lambda t: 7)
    assert [(j.task.name, j.index, j.seed) for j in jobs] == [
        ("a-v3", 0, 100), ("a-v3", 1, 101), ("a-v3", 2, 102), ("b-v3", 0, 100), ("b-v3", 1, 101), ("b-v3", 2, 102)]
    assert [j.video_path for j in jobs] == ["videos/easy_0/eval_episode_0.mp4", None, None,
                                            "videos/easy_1/eval_episode_0.mp4", None, None]
    assert {j.max_steps for j in jobs} == {7}


@pytest.mark.parametrize("cpus, n_jobs, in_workers, rendering, expected, why", [
    (2, 140, False, None, 1, "no rendering, policy batched in this process: LeRobot's rule, 0.7 x 2 CPUs"),
    (16, 140, False, "hardware", 11, "hardware rendering, policy batched in this process: LeRobot's rule"),
    (16, 5, False, None, 5, "at most the 5 episodes"),
    (2, 140, True, None, 2, "the policy runs in each worker: one slot per CPU (2)"),
    (128, 1000, True, "software", 64, "one slot per CPU (128)"),
    (1, 1, False, None, 1, "LeRobot's rule"),
    (2, 140, False, "software", 2, "software rendering: one slot per CPU (2), each rendering with 1 thread"),
    (8, 3, False, "software", 3, "at most the 3 episodes"),
])
def test_auto_batch_size(cpus, n_jobs, in_workers, rendering, expected, why):
    choice = auto_batch_size(n_jobs, policy_in_workers=in_workers, cpus=cpus, rendering=rendering)
    assert choice.size == expected and why in choice.reason, choice


def test_render_threads_share_the_cpus():
    assert [render_threads(8, w) for w in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]


@pytest.mark.slow
def test_software_rendering_workers_get_their_share_of_threads(tmp_path, monkeypatch):
    """An auto batch size on 2 CPUs with a policy that looks at images: one slot per CPU, each worker rendering with
    one llvmpipe thread; the reason and the share are in the result (and so in the run's summary)."""
    monkeypatch.delenv("LP_NUM_THREADS", raising=False)
    probes = tmp_path / "probes"
    probes.mkdir()
    policy = {"type": "python", "path": "tests.policies_for_tests:environment_probe", "kwargs": {"out": str(probes)}}
    spec = write_spec(tmp_path, task="push-v3", policy=policy, n=2, max_steps=2)
    result = run(spec, tmp_path / "out", cpus=2)
    assert result.rendering == "software" and result.batch_size == 2 and result.processes
    assert "the policy runs in each worker: one slot per CPU (2)" in result.batch_reason
    assert result.render_threads == "1"
    assert sorted(p.read_text() for p in probes.iterdir()) == ["1", "1"]  # two workers, one thread each
    monkeypatch.setenv("LP_NUM_THREADS", "3")  # a setting of the user's own wins
    assert run(spec, tmp_path / "again", cpus=2).render_threads == "3"


# ── results do not depend on how episodes are run ────────────────────────────────────────────────────


@pytest.mark.slow
@pytest.mark.parametrize("policy, max_steps", [({"type": "scripted"}, None), ({"type": "random"}, 25)],
                         ids=["scripted", "random"])
def test_same_episodes_whatever_the_batch_size(tmp_path, policy, max_steps):
    spec = write_spec(tmp_path, policy=policy, max_steps=max_steps)
    variants = {
        "batch 1": {"batch_size": 1},
        "batch 2": {"batch_size": 2},
        "batch 3": {"batch_size": 3},
        "batch 2, task-major": {"batch_size": 2, "schedule": "task-major"},
        "batch 2, policy in main": {"batch_size": 2, "policy_in_workers": False},
        "batch 3, policy in main": {"batch_size": 3, "policy_in_workers": False},
    }
    outcomes = {}
    for label, options in variants.items():
        result = run(spec, tmp_path / label.replace(" ", "_").replace(",", ""), **options)
        assert result.batch_size == options["batch_size"]
        assert result.processes == (options["batch_size"] > 1)
        outcomes[label] = results(read_ledger(result.out_dir / "episodes.jsonl"))
        assert outcomes[label] == results(result.records)
    reference = outcomes["batch 1"]
    assert len(reference) == 6
    for label, outcome in outcomes.items():
        assert outcome == reference, label
    if policy["type"] == "scripted":
        assert all(r[-1] for r in reference)  # the experts succeed on push and reach


@pytest.mark.slow
def test_in_process_slots_give_the_same_episodes(tmp_path):
    spec_async = write_spec(tmp_path, task="reach-v3", n=4, name="a")
    spec_sync = write_spec(tmp_path, task="reach-v3", n=4, use_async_envs=False, name="s")
    a = run(spec_async, tmp_path / "a", batch_size=2)
    s = run(spec_sync, tmp_path / "s", batch_size=2)
    assert a.processes and not s.processes
    assert results(a.records) == results(s.records)


@pytest.mark.slow
def test_scripted_experts_mostly_succeed(tmp_path):
    result = run(write_spec(tmp_path, task="push-v3", n=5), tmp_path / "out", batch_size=1)
    assert sum(r.success for r in result.records) >= 4
    assert result.eval_info["overall"]["pc_success"] >= 80


# ── continuous scheduling ────────────────────────────────────────────────────────────────────────────


def _by_key(trace):
    return {event.key[2]: event for event in trace}


@pytest.mark.slow
def test_free_slot_starts_the_next_episode_while_a_slow_one_runs(tmp_path):
    """Policy in the workers: episode 0 is made slow; the other slot keeps starting new episodes."""
    policy = {"type": "python", "path": "tests.policies_for_tests:per_env",
              "kwargs": {"delay_s": 0.03, "slow_episodes": [0]}}
    spec = write_spec(tmp_path, task="reach-v3", policy=policy, n=5, max_steps=40)
    result = run(spec, tmp_path / "out", batch_size=2)
    events = _by_key(result.trace)
    slow = events[0]
    others = [e for k, e in events.items() if k != 0]
    assert all(e.slot != slow.slot for e in others)  # one slot was busy with episode 0 all along
    assert events[2].start_s < slow.end_s  # episode 0 + batch size started before the batch's slowest ended
    assert sum(e.end_s < slow.end_s for e in others) >= 3
    for slot in {e.slot for e in result.trace}:  # a slot runs one episode at a time
        mine = sorted((e.start_s, e.end_s) for e in result.trace if e.slot == slot)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(mine, mine[1:], strict=False))


@pytest.mark.slow
def test_batched_policy_slots_refill_at_once(tmp_path):
    """Policy in the main process: the slot whose episode ends first starts episode k + batch at once."""
    spec = write_spec(tmp_path, task="push-v3", n=4)  # expert episodes of 65, 46, 71, 55 steps
    result = run(spec, tmp_path / "out", batch_size=2, policy_in_workers=False)
    events = _by_key(result.trace)
    first, slowest = sorted([events[0], events[1]], key=lambda e: e.end_s)
    assert events[2].slot == first.slot  # the slot freed first took the next episode ...
    assert events[2].start_s < slowest.end_s  # ... before the batch's slowest episode ended


@pytest.mark.slow
def test_actions_decided_ahead_are_stepped_in_one_request(tmp_path):
    """A batched policy that hands a slot's queued chunk over at once (`take_queued`) gives the episodes it gives
    when each action comes from its own call, in worker processes and in this process; and it is then called only
    when a chunk is due, never just to pop a queued action."""
    outcomes, calls = {}, {}
    for ahead in (False, True):
        for async_envs in (True, False):
            label = f"ahead_{ahead}_async_{async_envs}".lower()
            log = tmp_path / f"{label}.calls"
            policy = {"type": "python", "path": "tests.policies_for_tests:chunk_queue",
                      "kwargs": {"replan": 4, "ahead": ahead, "out": str(log)}}
            spec = write_spec(tmp_path, task="reach-v3", policy=policy, n=3, max_steps=22, use_async_envs=async_envs,
                              name=label)
            result = run(spec, tmp_path / label, batch_size=2)
            assert result.processes == async_envs
            outcomes[label] = results(result.records)
            calls[label] = [int(n) for n in log.read_text().split()]
    reference = outcomes["ahead_false_async_true"]
    assert len(reference) == 3 and all(outcome == reference for outcome in outcomes.values()), outcomes
    for async_envs in (True, False):
        one_by_one, ahead = (calls[f"ahead_{a}_async_{async_envs}".lower()] for a in (False, True))
        assert sum(ahead) == sum(one_by_one)  # the same chunks ...
        assert 0 in one_by_one and 0 not in ahead  # ... and no call only to pop a queued action
        assert len(ahead) < len(one_by_one) / 2


@pytest.mark.parametrize("junk, says", [
    ("not actions", "returned a str from take_queued in reach-v3"),
    ([[0.0, 0.0]], "chunk_queue''s take_queued returned an action of shape (2,); the env expects shape (4,)"),
    ([[0.0], [0.0, 1.0]], "returned a tuple from take_queued in reach-v3"),
], ids=["string", "wrong shape", "ragged"])
def test_actions_decided_ahead_are_checked(tmp_path, junk, says):
    policy = {"type": "python", "path": "tests.policies_for_tests:chunk_queue", "kwargs": {"junk": junk}}
    spec = write_spec(tmp_path, task="reach-v3", policy=policy, n=1, max_steps=5)
    with pytest.raises(EvaluationError) as caught:
        run(spec, tmp_path / "out", batch_size=1)
    assert says in str(caught.value) and "\n" not in str(caught.value), caught.value


@pytest.mark.slow
def test_spread_schedule_builds_each_task_once(tmp_path):
    spec = write_spec(tmp_path, task="reach-v3,push-v3,door-open-v3,drawer-close-v3", n=3)
    result = run(spec, tmp_path / "out", batch_size=2, schedule="spread")
    by_slot: dict[int, list[str]] = {}
    for event in sorted(result.trace, key=lambda e: e.start_s):
        tasks = by_slot.setdefault(event.slot, [])
        if not tasks or tasks[-1] != event.key[0]:
            tasks.append(event.key[0])
    switches = sum(len(t) for t in by_slot.values())
    assert switches <= 4 + 1  # four tasks, plus at most one slot joining another's task at the end


@pytest.mark.slow
def test_spec_eval_schedule_is_the_default_and_the_option_overrides_it(tmp_path):
    spec = write_spec(tmp_path, task="reach-v3,push-v3", policy={"type": "random"}, n=4, max_steps=5,
                      schedule="task-major")

    def started(result) -> list[tuple]:
        return [e.key for e in sorted(result.trace, key=lambda e: e.start_s)]

    plan_order = [("reach-v3", 0, k) for k in range(4)] + [("push-v3", 0, k) for k in range(4)]
    task_major = run(spec, tmp_path / "a", batch_size=2)  # eval.schedule: task-major
    assert started(task_major) == plan_order  # one task at a time, in plan order
    spread = run(spec, tmp_path / "b", batch_size=2, schedule="spread")
    assert {key[0] for key in started(spread)[:2]} == {"reach-v3", "push-v3"}  # the two slots on two tasks
    assert results(spread.records) == results(task_major.records)


# ── outputs ──────────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.slow
def test_outputs_follow_the_documented_layout(tmp_path):
    import imageio.v3 as iio
    import imageio_ffmpeg

    spec = write_spec(tmp_path, task="reach-v3,metaworld-button-press-v3", n=2, videos=1, max_steps=12)
    result = run(spec, tmp_path / "out", batch_size=2)
    validate_outputs(result.out_dir)
    videos = sorted(p.relative_to(result.out_dir).as_posix() for p in result.out_dir.rglob("*.mp4"))
    assert videos == ["videos/metaworld-button-press-v3_0/eval_episode_0.mp4", "videos/reach-v3_0/eval_episode_0.mp4"]
    frames = iio.imread(result.out_dir / videos[1], index=None)
    assert frames.shape[1:] == (480, 480, 3) and len(frames) == 13  # reset + 12 steps
    reader = imageio_ffmpeg.read_frames(str(result.out_dir / videos[1]))
    meta = next(reader)
    reader.close()
    assert meta["fps"] == pytest.approx(80)  # Meta-World's control rate
    assert result.metrics["task_descriptions"] == {"reach-v3_0": "Reach a goal position",
                                                   "metaworld-button-press-v3_0": "Press a button"}
    assert not list(result.out_dir.rglob(".*partial*"))
    assert result.videos == 2 and 0 < result.video_s < result.episodes_s


def test_refuses_an_output_dir_with_results(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "episodes.jsonl").write_text('{"x": 1}\n')
    with pytest.raises(ConfigError, match="already holds results"):
        run(write_spec(tmp_path), out)


@pytest.mark.slow
def test_library_use_from_a_script_without_main_guard(tmp_path):
    """Workers never re-run the caller's script (multiprocessing would, and fail without a main guard)."""
    import subprocess
    import sys

    spec = write_spec(tmp_path, task="reach-v3", n=2)
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from pathlib import Path\n"
        "from runner.engine import RunOptions, evaluate\n"
        "from runner.spec import load_spec\n"
        f"result = evaluate(load_spec({str(spec)!r}), Path({str(tmp_path / 'out')!r}), "
        "RunOptions(batch_size=2, progress=False))\n"
        "print('episodes', len(result.records), 'processes', result.processes)\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "episodes 2 processes True" in proc.stdout


# ── when a policy call waits ─────────────────────────────────────────────────────────────────────────


class _Slot:
    """A slot that records what it is sent (never replies)."""

    inline = False

    def __init__(self, index: int) -> None:
        self.index = index
        self.sent: list[str] = []

    def send(self, command, payload) -> None:
        self.sent.append(command)


class _Policy(Policy):
    def __init__(self) -> None:
        self.calls = 0

    def reset(self, starts) -> None:
        pass

    def select_action(self, observation, texts, slots):
        self.calls += 1
        return np.zeros((len(slots), 4), np.float32)


def test_a_policy_call_waits_for_a_late_reply_only_once():
    """A slot with an observation waits (up to max_wait) for another slot's reset due soon, so that both share a
    forward pass; a reset that is late (an env build, a slow worker) is waited for once, not before every call."""
    import gymnasium as gym

    from runner.engine.actions import ActionSpec
    from runner.engine.plan import EpisodeJob
    from runner.engine.scheduler import MAX_WAIT_S, Scheduler
    from runner.engine.worker import START, STEP

    task = TaskRef("g", 0, "reach-v3", "reach")
    policy = _Policy()
    scheduler = Scheduler([_Slot(0), _Slot(1)], [], on_done=lambda *a: None, policy=policy)
    ready, late = scheduler.states
    ready.job = late.job = EpisodeJob(task, 0, 1000, 10, None)
    ready.action_spec = ActionSpec(gym.spaces.Box(-1, 1, (4,), np.float32))
    late.request, late.sent_s = START, time.perf_counter()

    def observe() -> None:
        ready.request, ready.observation, ready.has_observation = None, {"agent_pos": np.zeros(4)}, True

    observe()
    scheduler._act()
    assert policy.calls == 0  # the other slot's reset may come at once: wait
    scheduler._waiting_since -= MAX_WAIT_S + 0.1
    scheduler._act()
    assert policy.calls == 1 and ready.slot.sent == [STEP]  # waited long enough: go ahead
    for _ in range(3):
        observe()
        scheduler._act()
    assert policy.calls == 4  # the same late reset holds no call back again


# ── stopping a worker ────────────────────────────────────────────────────────────────────────────────


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to see where the worker waits")
def test_sigterm_ends_a_worker_waiting_for_a_request_at_once(tmp_path):
    """A worker's SIGTERM handler only notes the signal; the wake-up fd ends its wait for the next request, so it
    exits 143 at once instead of when the main process escalates to SIGKILL."""
    from runner.engine.pool import CLOSE_TIMEOUT_S, open_slots
    from runner.engine.worker import ERROR, WorkerConfig
    from runner.spec.model import thaw

    spec = load_spec(write_spec(tmp_path, task="reach-v3", policy={"type": "random"}))
    config = WorkerConfig("metaworld", thaw(spec.env), None, None, str(tmp_path), False)
    [slot] = open_slots(1, config, processes=True)
    try:
        slot.send("ping", None)
        assert slot.recv()[0] == ERROR  # it serves requests
        wchan = Path(f"/proc/{slot.process.pid}/wchan")
        deadline = time.monotonic() + 60
        while "poll" not in wchan.read_text():  # until it waits for the next one
            if time.monotonic() > deadline:
                pytest.skip(f"cannot tell from {wchan} that the worker waits ({wchan.read_text()!r})")
            time.sleep(0.01)
        slot.process.terminate()
        slot.process.join(CLOSE_TIMEOUT_S)
        assert slot.process.exitcode == 143
    finally:
        slot.close(graceful=False)


def test_a_second_signal_that_lands_in_a_finalizer_still_abandons():
    """The second signal raises KeyboardInterrupt wherever the main thread is. CPython swallows it in a `__del__`
    ("Exception ignored"): stop_on_signals delivers it again, also when runner.cli.main's hook is not there."""
    import os
    import signal

    from runner.engine.signals import stop_on_signals

    class SignalledWhenCollected:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:  # where the handler runs and raises
                pass

    with pytest.raises(KeyboardInterrupt), stop_on_signals(60) as stop:
        os.kill(os.getpid(), signal.SIGINT)  # the first signal only stops scheduling
        deadline = time.monotonic() + 30
        while not stop.requested and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stop.requested and not stop.abandon()
        SignalledWhenCollected()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # where it is delivered again
            pass
