"""`runner serve`'s protocols from the server's side: request layouts read backwards (`--request`), vla-eval's layout,
implicit episodes for clients that send no episode_start, action chunks (`--action-horizon`), one-line errors; and,
on real sockets with real Meta-World, runner's client against `runner serve` in vla-eval's protocol giving the local
run's episodes. Interop with the published openpi and vla-eval packages is in test_remote_openpi.py and
test_remote_vlaeval.py.
"""

from __future__ import annotations

import functools
import json

import gymnasium as gym
import numpy as np
import pytest
from helpers import episodes_of, one_error_line, runner_cli, runner_run, served, write_spec_data

from runner.errors import ConfigError
from runner.policies import make_policy
from runner.policies.base import EpisodeStart
from runner.policies.random.policy import RandomPolicy
from runner.policies.remote import request, vlaeval, wire
from runner.policies.scripted.policy import expert_for
from runner.serve.episodes import ImplicitEpisodes
from runner.serve.layout import BadRequest, Layout
from runner.serve.server import ServeOptions, action_horizon
from runner.spec import load_spec
from runner.tasks import TaskRef
from tests.openpi_peer import chunk_for

websockets_sync = pytest.importorskip("websockets.sync.client")
from websockets.exceptions import ConnectionClosed  # noqa: E402

TIMEOUT_S = 300
LIBERO_LAYOUT = {"observation/image": "pixels.image", "observation/wrist_image": "pixels.wrist_image",
                 "observation/state": "agent_pos", "prompt": "task"}
run = functools.partial(runner_run, batch_size=2, timeout=TIMEOUT_S)


def metaworld_spec(tmp_path, policy: dict, **eval_options):
    return write_spec_data(tmp_path, {"install": {"env": {"MUJOCO_GL": "egl"}},
                                      "env": {"type": "metaworld", "task": "push-v3,reach-v3", "max_steps": 30},
                                      "policy": policy,
                                      "eval": {"n_episodes": 2, "videos": 0, "seed": 1000, **eval_options}},
                           folder="specs")


def random_actions(seed: int, n: int) -> np.ndarray:
    """The first `n` actions of runner's random policy in an episode seeded `seed` (Meta-World's action space)."""
    local = RandomPolicy()
    local.reset(EpisodeStart(0, TaskRef("t", 0, "t", ""), 0, seed, gym.spaces.Box(-1.0, 1.0, (4,), np.float32)))
    return np.stack([local.act({}) for _ in range(n)])


# ── request layouts ──────────────────────────────────────────────────────────────────────────────────────────


def test_openpis_libero_layout_is_read_backwards_and_other_keys_are_ignored():
    layout = Layout(request.parse(LIBERO_LAYOUT), vla_eval=False)
    image, wrist = np.zeros((8, 8, 3), np.uint8), np.ones((4, 4, 3), np.uint8)
    observation, text = layout.read({"observation/image": image, "observation/wrist_image": wrist,
                                     "observation/state": np.float32(0.5), "prompt": "put the bowl away",
                                     "extra": "ignored"})
    assert text == "put the bowl away"
    assert set(observation) == {"pixels", "agent_pos"} and set(observation["pixels"]) == {"image", "wrist_image"}
    assert observation["pixels"]["wrist_image"] is wrist and observation["agent_pos"].shape == ()
    with pytest.raises(BadRequest, match=r"the request has no 'observation/state' \(--request maps it to agent_pos"):
        layout.read({"observation/image": image, "observation/wrist_image": wrist, "prompt": "x"})


def test_image_options_are_undone_where_they_can_be():
    original = np.random.default_rng(0).integers(0, 256, (6, 4, 3), dtype=np.uint8)
    mapping = {"img": {"from": "pixels", "flip": "both", "layout": "CHW", "dtype": "float32", "resize": [6, 4]}}
    items = request.parse(mapping)
    sent = request.build(items, {"pixels": original}, "t")["img"]
    assert sent.shape == (3, 6, 4) and sent.dtype == np.float32
    observation, _ = Layout(items, vla_eval=False).read({"img": sent})
    np.testing.assert_array_equal(observation["pixels"], original)


def test_vla_evals_layout_and_nested_request_keys():
    image = np.zeros((8, 8, 3), np.uint8)
    observation, text = Layout(None, vla_eval=True).read(
        {"images": {"agentview": image, "wrist": image}, "task_description": "open the drawer", "state": np.zeros(8),
         "controller_states": np.zeros(3)})
    assert text == "open the drawer" and set(observation) == {"pixels", "agent_pos"}
    assert set(observation["pixels"]) == {"agentview", "wrist"}
    one, _ = Layout(None, vla_eval=True).read({"images": {"image": image}, "task_description": "x"})
    assert one["pixels"] is image  # the one camera "image" is the env's one image
    nested = Layout(request.parse({"images.agentview": "pixels.image", "states": "agent_pos",
                                   "task_description": "task"}), vla_eval=True)
    observation, text = nested.read({"images": {"agentview": image}, "states": np.zeros(9), "task_description": "y"})
    assert observation["pixels"] == {"image": image} and observation["agent_pos"].shape == (9,) and text == "y"
    for bad, expected in [({"images": []}, "'images' must map"), ({"state": "x"}, "'state' must be a numeric array"),
                          ({"task_description": 3}, "must be a string"), ({"other": 1}, "an empty request")]:
        with pytest.raises(BadRequest, match=expected):
            Layout(None, vla_eval=True).read(bad)


def test_runners_own_layout_takes_numpy_scalars_and_refuses_other_keys():
    observation, _ = Layout(None, vla_eval=False).read({"agent_pos": np.float64(2.0), "task": "t"})
    assert observation["agent_pos"] == np.array(2.0)
    with pytest.raises(BadRequest, match="other layouts need --request"):
        Layout(None, vla_eval=False).read({"observation/state": np.zeros(2)})


# ── implicit episodes and action horizons ────────────────────────────────────────────────────────────────────


def test_implicit_episodes_are_numbered_and_find_the_specs_task_and_action_space(tmp_path):
    pytest.importorskip("metaworld")
    spec = load_spec(metaworld_spec(tmp_path, {"type": "random"}))
    episodes = ImplicitEpisodes(spec, needs_action_space=True, log=lambda line: None)
    assert [episodes.next_seed() for _ in range(3)] == [(0, 1000), (1, 1001), (2, 1002)]
    by_name = episodes.start(0, 0, 1000, ("reach-v3",))
    assert by_name.task.name == "reach-v3" and by_name.task.group != "remote" and by_name.seed == 1000
    assert by_name.action_space == gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    by_text = episodes.start(1, 1, 1001, ("not a task", by_name.task.text))
    assert by_text.task == by_name.task
    for said in (" REACH a goal  position", "metaworld-reach-v3"):  # case, spacing, the env type as a prefix
        assert episodes.task((said,)) == by_name.task
    unknown = episodes.start(0, 2, 1002, ("fly to the moon",))
    assert unknown.task.name == "fly to the moon" and unknown.task.group == "remote"
    assert unknown.action_space == by_name.action_space  # the spec's first task's
    assert "push-v3" in episodes.known() and "reach-v3" in episodes.known()


def test_the_action_horizon_is_the_policys_own_and_at_most_what_it_can_give(tmp_path):
    spec = load_spec(metaworld_spec(tmp_path, {"type": "random"}))
    random = make_policy(spec.policy, spec.env)
    assert action_horizon("random", random, None, ServeOptions()) == 1
    with pytest.raises(ConfigError, match=r"gives one action a request, not chunks \(it predicts one action at a time"):
        action_horizon("random", random, None, ServeOptions(action_horizon=5))
    chunky = load_spec(metaworld_spec(tmp_path, {"type": "python", "path": "tests.policies_for_tests:chunk_server",
                                                 "kwargs": {"horizon": 10}}))
    policy = make_policy(chunky.policy, chunky.env)
    assert policy.max_horizon() == 10
    assert action_horizon("p", policy, None, ServeOptions(action_horizon=4)) == 4
    with pytest.raises(ConfigError, match="predicts chunks of 10 actions: --action-horizon must be 1..10, not 11"):
        action_horizon("p", policy, None, ServeOptions(action_horizon=11))
    with pytest.raises(ConfigError, match="--protocol must be one of openpi, vla-eval"):
        ServeOptions(protocol="grpc")


# ── on real sockets ──────────────────────────────────────────────────────────────────────────────────────────


def connect(url: str):
    ws = websockets_sync.connect(url, compression=None, legacy=True)
    return ws, wire.unpack(ws.recv(timeout=30))


def ask(ws, message):
    ws.send(wire.pack(message))
    reply = ws.recv(timeout=60)
    return reply if isinstance(reply, str) else wire.unpack(reply)


def test_a_client_without_episode_start_gets_implicit_episodes_and_chunks(tmp_path):
    """openpi's way: no control messages. Random: connection n is episode n, seeded eval.seed + n, with the env's
    action space; a chunked policy answers (H, A) with --action-horizon H."""
    pytest.importorskip("metaworld")
    spec = metaworld_spec(tmp_path, {"type": "random"})
    state = np.linspace(-1, 1, 4)
    with served(spec, log_dir=tmp_path) as server:
        got = []
        for _ in range(2):
            ws, metadata = connect(server.url)
            with ws:
                got.append([ask(ws, {"agent_pos": state, "prompt": "push-v3"})["actions"] for _ in range(3)])
    assert metadata["action_horizon"] == 1
    for n, actions in enumerate(got):
        assert [a.shape for a in actions] == [(1, 4)] * 3
        np.testing.assert_array_equal(np.concatenate(actions), random_actions(1000 + n, 3))
    chunky = metaworld_spec(tmp_path, {"type": "python", "path": "tests.policies_for_tests:chunk_server",
                                       "kwargs": {"horizon": 10}})
    with served(chunky, log_dir=tmp_path, args=("--action-horizon", "5")) as server:
        ws, metadata = connect(server.url)
        with ws:
            reply = ask(ws, {"agent_pos": state, "prompt": "push-v3"})
    assert metadata["action_horizon"] == 5
    np.testing.assert_array_equal(reply["actions"], chunk_for(state, 10, 4)[:5])


def test_serve_errors_are_one_line(tmp_path):
    """A wrong task (a text frame naming the spec's tasks, never a traceback), a malformed --request."""
    pytest.importorskip("metaworld")
    spec = metaworld_spec(tmp_path, {"type": "scripted"})
    with served(spec, log_dir=tmp_path) as server:
        ws, _ = connect(server.url)
        with ws:
            reply = ask(ws, {"environment_state": np.zeros(39), "prompt": "fly to the moon"})
    assert isinstance(reply, str) and "\n" not in reply and "Traceback" not in reply
    assert "no scripted expert for 'fly to the moon'" in reply and "is none of the spec's (push-v3, reach-v3)" in reply
    with served(spec, log_dir=tmp_path) as server:
        ws, _ = connect(server.url)
        with ws:
            reply = ask(ws, {"agent_pos": np.zeros(4), "prompt": "push-v3"})
    assert reply.startswith("bad request: the request has no environment_state, which policy 'scripted' reads")
    proc = runner_cli("serve", spec, "--port", "0", "--request", '{"state": "joint_angles"}', timeout=TIMEOUT_S)
    assert proc.returncode == 2 and "--request: state: 'joint_angles' is not valid" in one_error_line(proc)


def test_runners_client_in_vla_evals_protocol_equals_a_local_run(tmp_path):
    """The seeded random policy: runner's exact episode (its seed, action space) travels in EPISODE_START's "runner"
    part (scripted experts against vla-eval's own client and server: test_remote_vlaeval.py)."""
    pytest.importorskip("metaworld")
    spec = metaworld_spec(tmp_path, {"type": "random"})
    local = run(spec, tmp_path / "local")
    assert local.returncode == 0, local.stderr
    with served(spec, log_dir=tmp_path, args=("--protocol", "vla-eval")) as server:
        remote = run(spec, tmp_path / "remote", "policy.type=remote", f"policy.url={server.url}",
                     f"policy.kwargs={json.dumps({'protocol': 'vla-eval'})}")
        assert remote.returncode == 0, remote.stderr
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{vlaeval.HEALTH_PATH}", timeout=10) as health:
            assert health.status == 200 and json.loads(health.read()) == {"status": "ok"}
    assert episodes_of(tmp_path / "remote") == episodes_of(tmp_path / "local")


def test_vla_eval_requests_that_cannot_be_taken_are_error_messages(tmp_path):
    """A bad observation or a policy failure: an ERROR with the request's seq, the connection stays open; a frame
    that is no message at all: an ERROR, then close 1007. Other connections are not affected."""
    pytest.importorskip("metaworld")
    spec = metaworld_spec(tmp_path, {"type": "scripted"})

    def exchange(ws, kind, payload, seq):
        ws.send(vlaeval.pack(kind, payload, seq))
        return vlaeval.unpack(ws.recv(timeout=60))

    with served(spec, log_dir=tmp_path, args=("--protocol", "vla-eval")) as server:
        with websockets_sync.connect(server.url, compression=None, legacy=True) as ws:
            hello = exchange(ws, vlaeval.HELLO, vlaeval.hello_payload(benchmark="t"), 1)
            assert hello.type == vlaeval.HELLO and hello.seq == 1 and hello.payload["runner"]["server"] == "runner"
            bad = exchange(ws, vlaeval.OBSERVATION, {"state": "not numbers"}, 2)
            assert bad.type == vlaeval.ERROR and bad.seq == 2
            assert "'state' must be a numeric array" in bad.payload["error"]
            ws.send(vlaeval.pack(vlaeval.EPISODE_START, {"task": {"name": "fly to the moon"}}, 3))  # not answered
            failed = exchange(ws, vlaeval.OBSERVATION, {"environment_state": np.zeros(39), "task_description": "x"}, 4)
            assert failed.type == vlaeval.ERROR and failed.seq == 4 and "no scripted expert" in failed.payload["error"]
            ws.send(vlaeval.pack(vlaeval.EPISODE_START, {"task": {"name": "reach-v3"}}, 5))
            ok = exchange(ws, vlaeval.OBSERVATION, {"environment_state": np.zeros(39), "task_description": "x"}, 6)
            assert ok.type == vlaeval.ACTION and ok.seq == 6 and ok.payload["actions"].shape == (4,)
        with websockets_sync.connect(server.url, compression=None, legacy=True) as ws:
            ws.send(wire.pack({"type": "observation"}))  # no payload, seq, timestamp
            error = vlaeval.unpack(ws.recv(timeout=60))
            assert error.type == vlaeval.ERROR and "missing payload, seq, timestamp" in error.payload["error"]
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=60)
            assert closed.value.rcvd.code == 1007


def test_one_openpi_connection_gets_a_new_implicit_episode_when_its_prompt_changes(tmp_path):
    """openpi's LIBERO loop keeps one connection for every task: a new prompt is a new implicit episode (its task's
    expert; the next seed), the same prompt continues the episode."""
    pytest.importorskip("metaworld")
    state = np.random.default_rng(0).uniform(-0.5, 0.5, 39)
    with served(metaworld_spec(tmp_path, {"type": "scripted"}), log_dir=tmp_path) as server:
        ws, _ = connect(server.url)
        with ws:
            got = [ask(ws, {"environment_state": state, "prompt": p})["actions"][0] for p in ("push-v3", "reach-v3")]
    for action, task in zip(got, ("push-v3", "reach-v3"), strict=True):
        np.testing.assert_array_equal(action, expert_for(task).get_action(state))
    with served(metaworld_spec(tmp_path, {"type": "random"}), log_dir=tmp_path) as server:
        ws, _ = connect(server.url)
        with ws:
            replies = [ask(ws, {"agent_pos": np.zeros(4), "prompt": p})["actions"][0]
                       for p in ("push-v3", "push-v3", "reach-v3")]
    np.testing.assert_array_equal(np.stack(replies), np.concatenate([random_actions(1000, 2), random_actions(1001, 1)]))


def test_a_client_in_the_other_protocol_is_told_which_one_to_set(tmp_path):
    pytest.importorskip("metaworld")
    spec = metaworld_spec(tmp_path, {"type": "scripted"})
    quick = {"connect_timeout_s": 1, "connect_retries": 0}
    with served(spec, log_dir=tmp_path, args=("--protocol", "vla-eval")) as server:
        proc = run(spec, tmp_path / "a", "policy.type=remote", f"policy.url={server.url}",
                   f"policy.kwargs={json.dumps(quick)}")
    assert proc.returncode == 4 and "if it is one, set policy.kwargs.protocol: vla-eval" in one_error_line(proc)
    with served(spec, log_dir=tmp_path) as server:
        proc = run(spec, tmp_path / "b", "policy.type=remote", f"policy.url={server.url}",
                   f"policy.kwargs={json.dumps({**quick, 'protocol': 'vla-eval'})}")
    assert proc.returncode == 4 and "if it is one, set policy.kwargs.protocol: openpi" in one_error_line(proc)
    layout = '{"observation/state": "environment_state", "prompt": "task"}'
    with served(spec, log_dir=tmp_path, args=("--request", layout)) as server:
        proc = run(spec, tmp_path / "c", "policy.type=remote", f"policy.url={server.url}")
    assert proc.returncode == 2 and not (tmp_path / "c" / "episodes.jsonl").exists()
    assert "reads requests with the keys observation/state, prompt (runner serve --request); the spec has no " \
           "policy.kwargs.request" in one_error_line(proc)
