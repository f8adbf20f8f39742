"""The remote-policy wire format and protocol without sockets: encoding, hostile messages (bounded, no pickle, no
traceback), action spaces, episode starts, the request mapping, the batching decision, the statistics."""

from __future__ import annotations

import gymnasium as gym
import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.errors import ConfigError
from runner.policies.base import EpisodeStart
from runner.policies.remote import protocol, request, wire
from runner.serve.batcher import dispatch_now
from runner.serve.layout import BadRequest, Layout, parse_observation
from runner.serve.server import ServeOptions, is_loopback
from runner.serve.stats import ServerStats, percentile
from runner.tasks import TaskRef

PUSH = TaskRef("easy", 3, "push-v3", "Push the puck to a goal")


@pytest.mark.parametrize("array", [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.zeros((0, 5), np.uint8), np.array(3.5),
    np.array([True, False]), np.arange(6, dtype=">i8")[::2], np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    np.array(["ab", "c"]),
])
def test_arrays_round_trip(array):
    back = wire.unpack(wire.pack({"a": array}))["a"]
    assert back.dtype == array.dtype and back.shape == array.shape and back.flags.writeable
    np.testing.assert_array_equal(back, array)


def test_scalars_and_plain_values_round_trip():
    message = {"f": np.float32(1.5), "i": np.int16(-3), "b": np.bool_(True), "s": "text", "l": [1, None, 2.5],
               "t": (1, 2), "bytes": b"\x00\x01"}
    back = wire.unpack(wire.pack(message))
    assert back["f"].dtype == np.float32 and back["i"] == -3 and back["b"] and back["t"] == [1, 2]
    assert back["bytes"] == b"\x00\x01" and back["l"] == [1, None, 2.5]


@pytest.mark.parametrize("value", [np.array([object()]), np.zeros(2, dtype=[("a", "<i4")]), np.array([1 + 2j]), {1, 2}])
def test_unsupported_values_are_refused_when_encoding(value):
    with pytest.raises(wire.WireError):
        wire.pack({"a": value})


def encoded(dtype: str = "<f8", data: bytes = b"\0" * 16, shape=(2,)) -> dict:
    return {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": list(shape)}


@pytest.mark.parametrize(("message", "expected"), [
    (encoded(shape=(3,)), "needs 24 bytes, not 16"),
    (encoded(dtype="|O"), "unsupported dtype"),
    (encoded(dtype="|V8"), "unsupported dtype"),
    (encoded(dtype="(2,)<f8"), "unsupported dtype"),
    (encoded(dtype="[('a', '<i4')]"), "dtype"),
    (encoded(dtype="<c16"), "unsupported dtype"),
    (encoded(dtype="what"), "unknown dtype"),
    (encoded(dtype=5), "needs a dtype string"),
    (encoded(shape=(-2,)), "shape must be a list"),
    (encoded(shape=(True, 2)), "shape must be a list"),
    (encoded(shape=[1] * 40), "shape must be a list"),
    ({**encoded(), b"shape": "2"}, "shape must be a list"),
    ({**encoded(), b"data": "text"}, "data must be bytes"),
    (encoded(data=b"", shape=(10**12, 10**12)), "needs"),
    ({b"__npgeneric__": True, b"data": [1], b"dtype": "<f8"}, "scalar's data"),
    ({b"__npgeneric__": True, b"data": 300, b"dtype": "|u1"}, "does not fit"),
])
def test_hostile_arrays_are_refused(message, expected):
    with pytest.raises(wire.WireError, match=expected):
        wire.unpack(msgpack.packb({"a": message}, use_bin_type=True))


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x91" * 100_000 + b"\xc0", msgpack.packb({1: 2}),
                                  msgpack.packb(msgpack.ExtType(1, b"x")), msgpack.packb([1]) + b"extra",
                                  msgpack.packb({str(i): i for i in range(20_000)})])
def test_malformed_messages_are_refused(data):
    with pytest.raises(wire.WireError, match="not a msgpack message"):
        wire.unpack(data)


def test_size_limit():
    with pytest.raises(wire.WireError, match="over the limit of 10"):
        wire.unpack(wire.pack({"a": "x" * 20}), max_bytes=10)
    with pytest.raises(wire.WireError, match="expected a binary frame"):
        wire.unpack("text")  # type: ignore[arg-type]


@settings(max_examples=300, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_any_bytes_decode_or_are_refused(data):
    try:
        wire.unpack(data)
    except wire.WireError:
        pass


@settings(max_examples=200, derandomize=True)
@given(st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=20)
                    | st.binary(max_size=20), lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20))
def test_plain_messages_round_trip(value):
    assert wire.unpack(wire.pack(value)) == value


# ── protocol ─────────────────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("space", [
    gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Box(np.array([0, -2]), np.array([1, 2]), dtype=np.int64),
    gym.spaces.Discrete(3, start=-1), gym.spaces.MultiDiscrete([2, 5]), gym.spaces.MultiBinary([2, 3]),
])
def test_action_spaces_cross_the_wire(space):
    back = protocol.decode_space(wire.unpack(wire.pack(protocol.encode_space(space))))
    assert back == space
    space.seed(5)
    back.seed(5)
    np.testing.assert_array_equal(space.sample(), back.sample())


@pytest.mark.parametrize(("data", "expected"), [
    ({"type": "Tuple"}, "unknown action space type"), ("Box", "must be a map"),
    ({"type": "Box", "low": [0], "high": [1]}, "numeric array"),
    ({"type": "Box", "low": np.zeros(2), "high": np.ones(3), "dtype": "<f4"}, "same shape"),
    ({"type": "Box", "low": np.zeros(2), "high": np.ones(2), "dtype": "|O"}, "not numeric"),
    ({"type": "Discrete", "n": 0}, "integer in 1"), ({"type": "MultiBinary", "n": 3}, "list of positive"),
    ({"type": "Box", "low": np.zeros(200_000), "high": np.ones(200_000), "dtype": "<f4"}, "at most"),
])
def test_hostile_action_spaces(data, expected):
    with pytest.raises(protocol.ProtocolError, match=expected):
        protocol.decode_space(data)


def test_episode_start_round_trip():
    start = EpisodeStart(2, PUSH, 7, 1007, gym.spaces.Box(-1.0, 1.0, (4,), np.float32), n_slots=4)
    message = wire.unpack(wire.pack(protocol.episode_start(start)))
    assert message["__ctrl__"] == "episode_start" and message["__episode_id__"] == "easy_3/7"
    back = protocol.parse_episode_start(message, slot=0)
    assert (back.slot, back.task, back.episode_index, back.seed, back.n_slots) == (0, PUSH, 7, 1007, 4)
    assert back.action_space == start.action_space
    minimal = protocol.parse_episode_start({"__ctrl__": "episode_start", "__task__": "push-v3"}, slot=1)
    assert minimal.task == TaskRef("remote", 0, "push-v3", "push-v3") and minimal.action_space is None
    with pytest.raises(protocol.ProtocolError, match="__n_slots__"):
        protocol.parse_episode_start({"__n_slots__": 5000}, slot=0)


# ── the request mapping ──────────────────────────────────────────────────────────────────────────────────────

OBS = {"pixels": {"image": np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3), "wrist": np.zeros((4, 6, 3),
                                                                                                  np.uint8)},
       "agent_pos": np.arange(8.0)}


def test_native_layout_adds_the_task_text():
    assert request.build(None, OBS, "pick")["task"] == "pick"


def test_mapping_with_image_options():
    items = request.parse({"img": {"from": "pixels.image", "flip": "both", "layout": "CHW", "dtype": "float32"},
                           "state": "agent_pos", "prompt": "task",
                           "padded": {"from": "pixels.image", "resize": [6, 6]}})
    assert request.observation_keys(items) == frozenset({"pixels", "agent_pos"})
    built = request.build(items, OBS, "pick")
    assert built["prompt"] == "pick" and built["state"].tolist() == list(range(8))
    assert built["img"].shape == (3, 4, 6) and built["img"].dtype == np.float32
    np.testing.assert_allclose(built["img"], OBS["pixels"]["image"][::-1, ::-1].transpose(2, 0, 1) / 255.0)
    assert built["padded"].shape == (6, 6, 3) and not built["padded"][0].any() and not built["padded"][-1].any()


@pytest.mark.parametrize(("mapping", "observation", "expected"), [
    ({"x": "pixels.cam9"}, OBS, "no camera 'cam9' \\(cameras: image, wrist"),
    ({"x": "pixels"}, OBS, "several cameras; name one"),
    ({"x": "pixels.image"}, {"pixels": np.zeros((4, 4, 3), np.uint8)}, "gives one image"),
    ({"x": "environment_state"}, OBS, "has no 'environment_state' \\(it has agent_pos, pixels\\)"),
    ({"x": "pixels"}, {"pixels": np.zeros((4, 4), np.uint8)}, "expected a uint8 HWC image"),
])
def test_mapping_mistakes_are_config_errors(mapping, observation, expected):
    with pytest.raises(ConfigError, match=expected):
        request.build(request.parse(mapping), observation, "t")


# ── the server's pieces ──────────────────────────────────────────────────────────────────────────────────────


def test_parse_observation():
    observation, text = parse_observation({"pixels": {"a": np.zeros((2, 2, 3), np.uint8)}, "prompt": "go",
                                           "agent_pos": np.zeros(3)})
    assert text == "go" and set(observation) == {"pixels", "agent_pos"}
    for bad, expected in [({"agent_pos": [1, 2]}, "numeric array"), ({"x": 1}, "unknown request key 'x'"),
                          ({}, "empty request"), ({"task": 5}, "must be a string"),
                          ({"pixels": {}}, "camera names"), ({"agent_pos": np.array(["a"])}, "numeric array")]:
        with pytest.raises(BadRequest, match=expected):
            Layout(None, vla_eval=False).read(bad)


@pytest.mark.parametrize(("pending", "expected", "waited", "now"), [
    (8, 100, 0.0, True),  # a full batch
    (3, 3, 0.0, True),  # every connection in an episode is waiting
    (2, 3, 0.001, False),  # one more may come
    (2, 3, 0.005, True),  # waited long enough
    (1, 0, 0.0, True),  # no connection counts as in an episode
])
def test_dispatch_decision(pending, expected, waited, now):
    assert dispatch_now(pending, expected, 8, waited, 0.005) is now


def test_loopback_and_keys(monkeypatch):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("gpu-box")
    with pytest.raises(ConfigError, match="--api-key-env NAME"):
        ServeOptions(host="0.0.0.0").api_key()
    assert ServeOptions(host="0.0.0.0", insecure=True).api_key() is None
    monkeypatch.setenv("K", "secret")
    assert ServeOptions(host="10.0.0.1", api_key_env="K").api_key() == "secret"
    with pytest.raises(ConfigError, match=r"\$UNSET_K, which is not set"):
        ServeOptions(api_key_env="UNSET_K").api_key()
    for bad in ({"port": 70000}, {"max_batch": 0}, {"max_wait_ms": -1}, {"max_message_mb": 0}):
        with pytest.raises(ConfigError):
            ServeOptions(**bad)


def test_percentiles_and_the_log_line():
    assert percentile([], 50) is None and percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    stats = ServerStats()
    assert stats.window_line(0) is None
    for size in (1, 2, 2):
        stats.batch(size)
    for ms in (1, 2, 3, 4, 5):
        stats.request_done(ms / 1000)
    line = stats.window_line(2)
    assert "batch sizes 1x1 2x2 (mean 1.667)" in line and "p50 3.0" in line and "2 connections" in line
    assert stats.snapshot()["batch_sizes"] == {"1": 1, "2": 2} and stats.window_line(2) is None


# ── the two protocols' client sides: layouts, nesting, what metadata declares, the contract ─────────────────────

from runner.contract import compare  # noqa: E402
from runner.envs import get_adapter  # noqa: E402
from runner.errors import EvaluationError  # noqa: E402
from runner.policies.remote import vlaeval  # noqa: E402
from runner.policies.remote.policy import options, served_contract  # noqa: E402
from runner.policies.remote.metadata import json_safe  # noqa: E402
from runner.spec import SpecError, load_spec  # noqa: E402

REMOTE = ["policy.type=remote", "policy.url=ws://127.0.0.1:1", "policy.path=null"]
IMAGE = {"name": "image", "dims": 0, "format": "rgb_hwc_uint8"}


def remote_spec(kwargs: dict | None = None):
    import json

    return load_spec("specs/metaworld.yaml", [*REMOTE, *([f"policy.kwargs={json.dumps(kwargs)}"] if kwargs else [])])


def test_vla_eval_request_keys_nest():
    items = request.parse({"images.agentview": "pixels.image", "images.wrist": "pixels.wrist", "state": "agent_pos",
                           "task_description": "task"})
    built = request.build(items, OBS, "pick", nested=True)
    assert set(built) == {"images", "state", "task_description"} and set(built["images"]) == {"agentview", "wrist"}
    np.testing.assert_array_equal(built["images"]["agentview"], OBS["pixels"]["image"])
    assert set(request.build(items, OBS, "pick")) == {"images.agentview", "images.wrist", "state", "task_description"}
    for mapping, expected in [({"a": "task", "a.b": "task"}, "a.b nests under a, which is a request key"),
                              ({"a.b": "task", "a": "task"}, "a is a request key and holds others nested under it"),
                              ({"a.b": "task", "a.b.c": "task"}, "a.b.c nests under a.b, which is a request key")]:
        with pytest.raises(ConfigError, match=expected):
            request.build(request.parse(mapping), OBS, "t", nested=True)


def test_vla_eval_default_layout():
    side = vlaeval.Client()
    one = side.layout({"pixels": OBS["pixels"]["image"], "agent_pos": np.zeros(4), "environment_state": np.ones(39)},
                      "pick")
    assert set(one) == {"images", "state", "environment_state", "task_description"} and list(one["images"]) == ["image"]
    state_only = side.layout({"agent_pos": np.arange(4.0)}, "t")
    assert set(state_only) == {"state", "task_description"} and state_only["state"].tolist() == [0, 1, 2, 3]
    assert set(side.layout(OBS, "t")["images"]) == {"image", "wrist"}
    assert protocol.OpenPI().layout({"agent_pos": 1}, "t") == {"agent_pos": 1, "task": "t"}


@pytest.mark.parametrize(("side", "metadata", "keys", "declared"), [
    (protocol.OpenPI(), {"policy_name": "pi0"}, {"agent_pos", "environment_state"}, False),  # openpi's servers
    (protocol.OpenPI(), "not a map", {"agent_pos", "environment_state"}, False),
    (protocol.OpenPI(), {"contract": {"action_dim": 7}}, {"agent_pos", "environment_state"}, False),
    (protocol.OpenPI(), {"observation_keys": None}, None, True),  # runner serve: every key
    (protocol.OpenPI(), {"observation_keys": ["environment_state", "x"]}, {"environment_state"}, True),
    (protocol.OpenPI(), {"contract": {"inputs": {"pixels.top": {}, "agent_pos": {}}}}, {"pixels", "agent_pos"}, True),
    (vlaeval.Client(), {"model_server": "X"}, {"agent_pos", "environment_state"}, False),
    (vlaeval.Client(), {"observation_spec": {"language": {"dims": 0}}}, {"agent_pos", "environment_state"}, True),
    (vlaeval.Client(), {"observation_spec": {"image": IMAGE}}, {"pixels", "agent_pos", "environment_state"}, True),
    (vlaeval.Client(), {"observation_spec": {"head": {"name": "head", "dims": 0, "format": "rgb_hwc_uint8"}}},
     {"pixels", "agent_pos", "environment_state"}, True),
    (vlaeval.Client(), {"observation_spec": {"image": IMAGE}, "runner": {"observation_keys": []}}, set(), True),
])
def test_what_a_servers_metadata_declares_it_reads(side, metadata, keys, declared):
    found = side.inputs(metadata)
    assert (found.keys, found.declared) == (None if keys is None else frozenset(keys), declared)


def test_a_vla_eval_hello_is_checked_against_the_env():
    spec = remote_spec({"protocol": "vla-eval"})
    opts = options(spec.policy, spec.env)
    assert opts.benchmark == "metaworld" and options(spec.policy).benchmark is None
    provides = get_adapter("metaworld").provides(spec.env)
    url = "ws://127.0.0.1:1"
    seven = {"action_spec": {"pos": {"dims": 3}, "rot": {"dims": 3}, "grip": {"dims": 1}},
             "observation_spec": {"image": IMAGE, "state": {"name": "state", "dims": 8, "format": "raw"}}}
    verdict = compare(served_contract(seven, opts), provides, "metaworld")
    assert verdict.message() == (
        f"policy contract: the policy server at {url} reads state (8,) but env metaworld gives state (4,) (its "
        f"agent_pos): the policy was made for another env's state; use one made for metaworld; and the policy server "
        f"at {url} returns actions of 7 numbers but env metaworld takes 4; use a policy made for metaworld")
    fits = compare(served_contract({"action_spec": {"a": {"dims": 4}}}, opts), provides, "metaworld")
    assert fits.ok and "actions of 4" in fits.line()
    assert served_contract({"model_server": "X"}, opts) is None
    mapped = options(remote_spec({"protocol": "vla-eval", "request": {"state": "environment_state"}}).policy)
    verdict = compare(served_contract(seven, mapped), provides, "metaworld")
    assert "reads state (8,) but env metaworld gives state (39,) (its environment_state)" in verdict.message()
    for bad in ({"action_spec": {"a": {"dims": "7"}}}, {"action_spec": [1]}, {"observation_spec": {"s": 3}}):
        with pytest.raises(EvaluationError, match=f"the policy server at {url} declares a malformed contract in its "
                                                  "HELLO: (action|observation)_spec") as info:
            served_contract(bad, opts)
        assert "\n" not in str(info.value)


def test_vla_eval_options_are_refused_under_openpi_and_request_keys_must_nest():
    with pytest.raises(SpecError, match="image_format is an option of protocol vla-eval, not of openpi"):
        remote_spec({"image_format": "png"})
    with pytest.raises(SpecError, match="benchmark is an option of protocol vla-eval"):
        remote_spec({"protocol": "openpi", "benchmark": "libero"})
    with pytest.raises(SpecError, match="images holds a value and images.top nests under it"):
        remote_spec({"protocol": "vla-eval", "request": {"images": "pixels", "images.top": "pixels"}})
    with pytest.raises(SpecError, match="an empty part between dots"):
        remote_spec({"protocol": "vla-eval", "request": {"images..top": "pixels"}})
    assert remote_spec({"request": {"images": "pixels", "images.top": "task"}}).policy.kwargs  # openpi: plain keys
    opts = options(remote_spec({"protocol": "vla-eval", "image_format": "jpeg", "benchmark": "mine"}).policy)
    assert (opts.protocol, opts.image_format, opts.benchmark) == ("vla-eval", "jpeg", "mine")


def test_server_metadata_is_kept_bounded_and_json_safe():
    import json

    import jsonschema

    from runner.results.schema import load_schema

    deep: dict = {"leaf": 1}
    for _ in range(50):
        deep = {"d": deep}
    hostile = {"text": "é" * 10_000, b"bytes-key": 1, 7: "int key", "k" * 500: 1, "array": np.zeros((2, 3), "<u2"),
               "scalar": np.float32(2.5), "flag": np.bool_(True), "inf": float("inf"), "nan": float("nan"),
               "blob": b"\0" * 99, "set": {1, 2}, "tuple": (1, 2), "deep": deep,
               "wide": {str(i): list(range(50)) for i in range(1000)}}
    safe = json_safe(hostile)
    text = json.dumps(safe, allow_nan=False)  # run.json's writer
    assert json.loads(text) == safe and len(text) < 50_000
    assert len(safe["text"]) == 2000 and safe["bytes-key"] == 1 and safe["7"] == "int key" and "k" * 200 in safe
    assert safe["array"] == {"dtype": "uint16", "shape": [2, 3]} and safe["scalar"] == 2.5 and safe["flag"] is True
    assert (safe["inf"], safe["nan"], safe["blob"], safe["set"], safe["tuple"]) == ("inf", "nan", {"bytes": 99},
                                                                                     "<set>", [1, 2])

    def leaf(value) -> bool:  # an array or bytes, named
        return not isinstance(value, (dict, list)) or (isinstance(value, dict) and set(value) in ({"dtype", "shape"},
                                                                                                  {"bytes"}))

    def count(value) -> int:
        children = [] if leaf(value) else list(value.values() if isinstance(value, dict) else value)
        return len(children) + sum(count(v) for v in children)

    def depth(value) -> int:
        children = [] if leaf(value) else list(value.values() if isinstance(value, dict) else value)
        return 0 if leaf(value) else 1 + max((depth(v) for v in children), default=0)

    assert count(safe) <= 200 and depth(safe) <= 6 and safe["wide"]["…"].endswith("more")
    assert json_safe({"a": [1, 2, 3]}, items=1) == {"a": "… 3 entries"}
    assert json_safe([[1, 2, 3]], items=3) == [[1, "… 2 more"]] and json_safe({"x": {}}) == {"x": {}}
    schema = load_schema("run.schema.json")
    policy_schema = {"$defs": schema["$defs"], **schema["properties"]["provenance"]["properties"]["policy"]}
    validator = jsonschema.Draft202012Validator(policy_schema)
    validator.validate({"type": "remote", "url": "ws://x", "server_metadata": safe})
    for bad in ({"x": "y" * 3000}, {"x": [0] * 300}, {str(i): i for i in range(300)}):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate({"server_metadata": bad})
