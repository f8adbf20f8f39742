"""`lerobot`: a pretrained LeRobot policy (LeRobot >= 0.6, Python >= 3.12), run as `lerobot-eval` runs it.

`policy.path` is a local directory written by `save_pretrained` (config.json, model.safetensors and the
`policy_preprocessor.json` / `policy_postprocessor.json` pipelines) or a Hugging Face hub id. Loading is
LeRobot's own: `PreTrainedConfig.from_pretrained` (with `--empty_cameras` and `--device` as overrides),
the policy class's `from_pretrained`, and `make_pre_post_processors` with the saved pipelines, the device
and `policy.rename_map` as overrides. `policy.device: auto` picks LeRobot's choice (cuda, mps, xpu, cpu).

Each step, as `lerobot-eval`'s rollout: the env observation goes through LeRobot's `preprocess_observation`
(uint8 HWC images -> float CHW in [0, 1]; `agent_pos` -> `observation.state`, ...), the task text is added
as `task`, the saved preprocessor runs on the batch, one action per env comes out, and the saved
postprocessor runs on those actions. Env adapters emit observations in the layout LeRobot's own env
processors produce, so no env processor runs here.

Per-slot state. LeRobot's `select_action` keeps one action queue (and for some policies an observation
history) for the whole batch, and `reset()` clears it for every env at once; slots here start episodes
at different times. So:
- chunking policies (`act` without temporal ensembling, `smolvla`, `pi0`, `pi05`; one observation step):
  each slot has its own queue of `n_action_steps` actions, refilled by `predict_action_chunk` when it
  runs dry. `policy.kwargs.forward` picks how refills are batched:
  `padded` (default): one forward with one row per slot (row i = slot i, the layout of lerobot-eval's
  batch; rows of slots that need no refill are filled with a copy). A forward's row results depend on
  its batch size but not on the other rows (checked on CPU here), so an episode's numbers depend only on
  itself and the batch size, never on timing or on its neighbours, and equal lerobot-eval's at the same
  batch size. `per_slot`: one forward per slot (the same numbers at every batch size, equal to
  lerobot-eval's at batch size 1). `grouped`: only the rows that need a refill (least compute; the last
  bits can then vary with timing).
  Rows are grouped by task text so text padding never depends on other tasks. Flow-matching policies
  draw their noise per row from a generator seeded with the episode's seed. `select_chunk(..., H)` (`runner serve`'s
  answer to openpi's clients) gives the first H of a fresh chunk, postprocessed, and empties the slot's queue: called
  every H steps it gives `select_action`'s actions when n_action_steps == H; H up to the chunk size, 1 when a
  pipeline keeps state (relative actions: each step's action needs that step's observation).
- every other policy (no `predict_action_chunk`, an observation history, temporal ensembling, or a type
  not listed above) runs as one copy per slot that shares the weights, with batch size 1 and the slot's
  own torch RNG stream (seeded with the episode's seed): exactly lerobot-eval at batch size 1, unbatched.

Before the first episode, `contract()` (the config's input and output features, in runner's observation keys)
is checked against what the spec's env gives (runner.engine.preflight's contract step). Before the first action,
the features the policy expects are checked again against what the env produced
(after `env.camera_name_mapping`, LeRobot's key conventions and `policy.rename_map`); a missing key or a
state of the wrong size fails at once, naming the missing and the extra keys. LeRobot's
`observation.images.empty_camera_<i>` placeholders (`policy.empty_cameras`) are exempt.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections import deque
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from runner.adapters import option_default
from runner.contract import CHW, HWC, IMAGE, STATE as STATE_KIND, Input, PolicyContract
from runner.policies.lerobot import TYPE
from runner.errors import ConfigError, HubUnreachable, MissingDependencyError
from runner.policies.base import AGENT_POS, ENV_STATE, PIXELS, EpisodeStart, Policy
from runner.spec import EnvSpec, PolicySpec

MIN_VERSION = (0, 6)
INSTALL = "pip install 'runner[lerobot]' (LeRobot >= 0.6 needs Python >= 3.12)"
CHUNK_TYPES = frozenset({"act", "smolvla", "pi0", "pi05"})
EMPTY_CAMERA = re.compile(r"^observation\.images\.empty_camera_\d+$")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
IMAGE_PREFIX = "observation.image"
STATE, ENV_STATE_KEY = "observation.state", "observation.environment_state"  # LeRobot's OBS_STATE, OBS_ENV_STATE
# How LeRobot's preprocess_observation names runner's observation keys (before policy.rename_map).
LEROBOT_NAMES = {PIXELS: IMAGE_PREFIX, f"{PIXELS}.": f"{IMAGE_PREFIX}s.", AGENT_POS: STATE, ENV_STATE: ENV_STATE_KEY}
# Config options with which a LeRobot policy resizes its images itself (SmolVLA, pi0/pi05, diffusion, ...): then an
# image of any size fits; without one, another size changes what the network sees (ACT's ResNet takes any size).
RESIZE_OPTIONS = ("resize_imgs_with_padding", "image_resolution", "resize_shape", "image_resize_shape")


def make(policy: PolicySpec, env: EnvSpec) -> LeRobotPolicy:
    preflight(policy)
    return LeRobotPolicy(policy, forward=policy.kwargs.get("forward", option_default(TYPE, "forward")))


def preflight(policy: PolicySpec) -> None:
    """Cheap checks before anything is loaded or written: LeRobot installed, a hub id reachable (the kwargs were
    checked against the type's descriptor when the spec was loaded)."""
    _import_lerobot()
    path, hub = _source(policy.path)
    if hub:
        from runner.policies.hub import unreachable

        problem = unreachable(path)
        if problem is not None:
            raise _hub_error(path, problem)


def _import_lerobot() -> None:
    """MissingDependencyError unless LeRobot >= 0.6 is installed (checked by its distribution, not imported)."""
    import sys
    from importlib import metadata

    try:
        version = metadata.version("lerobot")
    except metadata.PackageNotFoundError:
        where = "" if sys.version_info >= (3, 12) else f" (this is Python {sys.version_info[0]}.{sys.version_info[1]})"
        raise MissingDependencyError(f"the lerobot policy needs LeRobot >= 0.6: {INSTALL}{where}") from None
    if tuple(int(p) for p in re.findall(r"\d+", version)[:2]) < MIN_VERSION:
        raise MissingDependencyError(f"the lerobot policy needs LeRobot >= 0.6, found {version}: {INSTALL}")


# -- loading ---------------------------------------------------------------------------------------


def resolve_device(device: str) -> str:
    """`auto` -> LeRobot's pick (cuda, mps, xpu, cpu); an explicit device must be available."""
    from lerobot.utils.device_utils import is_torch_device_available

    if device == "auto":  # LeRobot's order (its auto_select_torch_device), without its log lines
        for name in ("cuda", "mps", "xpu"):
            if is_torch_device_available(name):
                return name
        return "cpu"
    if not is_torch_device_available(device):
        raise ConfigError(f"policy.device {device!r} is not available on this machine (use auto or cpu)")
    return device


def _source(path: str | None) -> tuple[str, bool]:
    """(path, is_hub_id); ConfigError for a local path that is not a policy directory."""
    if not path:
        raise ConfigError("policy.path: the lerobot policy needs a local directory or a hub id")
    local = Path(path).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ConfigError(f"policy.path {path!r} has no config.json: not a directory written by "
                              f"LeRobot's save_pretrained")
        return str(local), False
    if HUB_ID.match(path) and not path.startswith("."):
        return path, True
    raise ConfigError(f"policy.path {path!r}: no such directory (and not a hub id like owner/name)")


def _hub_error(repo_id: str, why: BaseException | str) -> HubUnreachable:
    reason = why if isinstance(why, str) else f"{type(why).__name__}; offline?"
    return HubUnreachable(
        f"policy.path {repo_id!r} is a Hugging Face hub id and it could not be fetched "
        f"({reason}). Download it where the hub is reachable "
        f"(hf download {repo_id} --local-dir DIR) and pass the directory instead: --set policy.path=DIR")


def _is_hub_failure(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    hub = {"LocalEntryNotFoundError", "OfflineModeIsEnabled", "HfHubHTTPError", "RepositoryNotFoundError",
           "GatedRepoError", "RevisionNotFoundError", "EntryNotFoundError", "ConnectError", "ConnectionError",
           "TimeoutException", "HTTPError"}
    return bool(names & hub) or (exc.__cause__ is not None and _is_hub_failure(exc.__cause__))


@dataclass
class Loaded:
    policy: Any
    preprocessor: Any
    postprocessor: Any
    device: str


def load(spec: PolicySpec) -> Loaded:
    """The policy and its saved processors, loaded the way lerobot-eval loads them."""
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    path, hub = _source(spec.path)
    device = resolve_device(spec.device)
    try:
        saved = PreTrainedConfig.from_pretrained(path)
        overrides = [f"--device={device}"]
        if spec.empty_cameras:
            if not hasattr(saved, "empty_cameras"):
                raise ConfigError(f"policy.empty_cameras: LeRobot policy type {saved.type!r} has no empty cameras "
                                  f"(only types with an empty_cameras option, e.g. smolvla, pi0, pi05, xvla)")
            overrides.append(f"--empty_cameras={spec.empty_cameras}")
        config = PreTrainedConfig.from_pretrained(path, cli_overrides=overrides)
        config.pretrained_path = Path(path) if not hub else path
        policy = get_policy_class(config.type).from_pretrained(path, config=config)
        policy.to(config.device)
        policy.eval()
        preprocessor, postprocessor = make_pre_post_processors(
            policy_cfg=config,
            pretrained_path=path,
            preprocessor_overrides={
                "device_processor": {"device": str(config.device)},
                "rename_observations_processor": {"rename_map": dict(spec.rename_map)},
            },
        )
    except ConfigError:
        raise
    except Exception as exc:
        if hub and _is_hub_failure(exc):
            raise _hub_error(path, exc) from None
        raise ConfigError(f"policy.path {path!r}: LeRobot could not load the policy: "
                          f"{type(exc).__name__}: {exc}") from None
    if str(config.device).startswith("cuda"):
        import torch

        torch.backends.cudnn.benchmark = True  # as lerobot-eval
        torch.backends.cuda.matmul.allow_tf32 = True
    return Loaded(policy, preprocessor, postprocessor, str(config.device))


# -- features --------------------------------------------------------------------------------------


def observation_keys(input_features: Mapping[str, Any], rename_map: Mapping[str, str]) -> frozenset[str]:
    """The env observation keys a policy with these input features reads."""
    wanted = set(input_features) | {src for src, dst in rename_map.items() if dst in input_features}
    keys = set()
    if any(k.startswith(IMAGE_PREFIX) for k in wanted):
        keys.add(PIXELS)
    if STATE in wanted:
        keys.add(AGENT_POS)
    if ENV_STATE_KEY in wanted:
        keys.add(ENV_STATE)
    return frozenset(keys)


def feature_mismatch(expected: Mapping[str, Any], provided: Mapping[str, tuple[int, ...]],
                     rename_map: Mapping[str, str]) -> str | None:
    """Why the env's observation (LeRobot keys before `rename_map` -> per-row shape) does not fit the
    policy's input features; None if it does."""
    renamed = {rename_map.get(key, key): (key, tuple(shape)) for key, shape in provided.items()}
    missing = sorted(k for k in expected if k not in renamed and not EMPTY_CAMERA.match(k))
    extra = sorted(k for k in renamed if k.startswith(IMAGE_PREFIX) and k not in expected)
    wrong = sorted(f"{k} has shape {renamed[k][1]}, the policy expects {tuple(expected[k].shape)}"
                   for k in expected if k in renamed and not k.startswith(IMAGE_PREFIX)
                   and renamed[k][1] != tuple(expected[k].shape))
    if not missing and not wrong:
        return None

    def show(key: str) -> str:
        source = renamed[key][0]
        return key if source == key else f"{key} (renamed from {source})"

    parts = [f"missing {', '.join(missing)}"] if missing else []
    parts.append(f"extra {', '.join(map(show, extra)) if extra else 'none'}")
    parts.extend(wrong)
    hint = ""
    if len(missing) == 1 and len(extra) == 1:
        source = renamed[extra[0]][0]
        if source == missing[0]:
            hint = f"; drop policy.rename_map's entry for {source}"
        else:
            hint = f"; map it with policy.rename_map: {{{source}: {missing[0]}}} (or env.camera_name_mapping)"
    elif missing:
        hint = "; map the env's keys with policy.rename_map or env.camera_name_mapping"
    unused = sorted(k for k in rename_map if k not in provided)
    if unused:
        hint += f" (policy.rename_map names keys the env does not produce: {', '.join(unused)})"
    return (f"the policy's input features do not match the env's observation after mapping: "
            f"{'; '.join(parts)}{hint}")


def contract(config: Any, rename_map: Mapping[str, str], who: str = "the checkpoint") -> PolicyContract:
    """What a LeRobot policy config declares, in runner's observation keys: each input feature (LeRobot's
    `observation.images.<cam>` is the env's `pixels.<cam>`, ... ; `policy.rename_map` undone; empty cameras left
    out), the action size, the chunk and the actions executed of it."""
    inverse = {dst: src for src, dst in rename_map.items()}
    resized = any(getattr(config, option, None) is not None for option in RESIZE_OPTIONS)
    inputs = []
    for key, feature in config.input_features.items():
        if EMPTY_CAMERA.match(key) or getattr(feature.type, "value", feature.type) == "LANGUAGE":
            continue
        before = inverse.get(key, key)
        image = before.startswith(IMAGE_PREFIX)
        inputs.append(Input(key, runner_key(before), tuple(feature.shape), IMAGE if image else STATE_KIND,
                            CHW if image else HWC, resized and image))
    action = config.output_features.get("action")
    chunk = getattr(config, "chunk_size", None) or getattr(config, "horizon", None)
    steps = getattr(config, "n_action_steps", None)
    return PolicyContract(inputs=tuple(inputs),
                          action_dim=int(action.shape[0]) if action is not None and len(action.shape) == 1 else None,
                          chunk_size=chunk if isinstance(chunk, int) else None,
                          n_action_steps=steps if isinstance(steps, int) else None,
                          image_format="float32 CHW in [0, 1]" + (", resized by the policy" if resized else ""),
                          who=who, names=LEROBOT_NAMES, renames=dict(rename_map), rename_option="policy.rename_map")


def runner_key(key: str) -> str | None:
    """The env observation key LeRobot's preprocess_observation turns into `key` (None: none)."""
    if key == IMAGE_PREFIX:
        return PIXELS
    if key.startswith(f"{IMAGE_PREFIX}s."):
        return f"{PIXELS}.{key.removeprefix(f'{IMAGE_PREFIX}s.')}"
    return {STATE: AGENT_POS, ENV_STATE_KEY: ENV_STATE}.get(key)


# -- the adapter -----------------------------------------------------------------------------------


@dataclass
class SlotState:
    seed: int
    n_slots: int = 1  # the batch size of the run the episode belongs to (the padded forward's width)
    queue: deque = field(default_factory=deque)  # raw policy actions (A,), before the postprocessor
    generator: Any = None  # torch.Generator for this episode's flow-matching noise
    instance: Any = None  # per-slot policy copy (policies without per-slot chunking)
    rng_state: Any = None  # that copy's torch RNG stream


class LeRobotPolicy(Policy):
    """Batched LeRobot policy with per-slot episode state (see the module docstring)."""

    def __init__(self, spec: PolicySpec, *, forward: str = "padded") -> None:
        import torch

        self.spec = spec
        self.forward = forward
        self.rename_map = dict(spec.rename_map)
        loaded = load(spec)
        self.policy = loaded.policy
        self.preprocessor = loaded.preprocessor
        self.postprocessor = loaded.postprocessor
        self.device = loaded.device
        self.config = self.policy.config
        self.chunked = chunking(self.policy)
        self.stateless = pipelines_stateless(self.preprocessor, self.postprocessor)
        self.n_action_steps = int(getattr(self.config, "n_action_steps", 1) or 1)
        self.chunk_size = int(getattr(self.config, "chunk_size", None) or self.n_action_steps)  # predict_action_chunk's
        self.observation_keys = observation_keys(self.config.input_features, self.rename_map)
        self._slots: dict[int, SlotState] = {}
        self._checked: set[Any] = set()
        self._noise_rows: list[Any] | None = None
        self._amp = self.config.use_amp
        self._torch = torch
        if self.chunked:
            self._install_noise()
        self.policy.reset()

    # protocol

    def reset(self, starts: Sequence[EpisodeStart]) -> None:
        torch = self._torch
        for start in starts:
            state = SlotState(seed=start.seed, n_slots=max(start.n_slots, start.slot + 1))
            if self.chunked:
                state.generator = torch.Generator().manual_seed(start.seed)
            else:
                old = self._slots.get(start.slot)
                state.instance = old.instance if old is not None else _shared_copy(self.policy)
                state.instance.reset()
                state.rng_state = (torch.Generator().manual_seed(start.seed).get_state(), None)
            self._slots[start.slot] = state

    def select_action(self, observation: Mapping[str, Any], task_texts: Sequence[str],
                      slots: Sequence[int]) -> np.ndarray:
        torch = self._torch
        with torch.inference_mode(), self._autocast():
            need = [i for i, slot in enumerate(slots) if not self._slots[slot].queue] if self.chunked else None
            if need == [] and self.stateless and self._checked:
                # Every row pops a queued action: the observation is not looked at, and a pipeline without
                # state would only redo work on it (~2 ms a row for a 480x480 image here).
                return self._postprocessed([self._slots[slot].queue.popleft() for slot in slots])
            batch = self._convert(observation, task_texts)
            self._check(batch)
            if not self.chunked:
                return self._act_per_instance(batch, slots)
            if need:
                self._refill(batch, slots, need)
            if not self.stateless:
                self.preprocessor(_copy(batch))  # every step, as lerobot-eval: stateful steps see the current obs
            actions = torch.stack([self._slots[slot].queue.popleft() for slot in slots])
            actions = self.postprocessor(actions)
        return actions.to("cpu").numpy()

    def take_queued(self, slot: int) -> np.ndarray | None:
        """The slot's queued actions (K, A), postprocessed and removed from its queue, when they need no
        observation (a chunk, pipelines without state); None otherwise."""
        state = self._slots.get(slot)
        if not (self.chunked and self.stateless and self._checked and state is not None and state.queue):
            return None
        actions = list(state.queue)
        state.queue.clear()
        with self._torch.inference_mode(), self._autocast():
            return self._postprocessed(actions)

    def max_horizon(self) -> int:
        """The chunk size for a chunked policy whose pipelines keep no state; 1 otherwise."""
        return self.chunk_size if self.chunked and self.stateless else 1

    def select_chunk(self, observation: Mapping[str, Any], task_texts: Sequence[str], slots: Sequence[int],
                     horizon: int) -> np.ndarray:
        """The first `horizon` actions of a fresh chunk per row (B, horizon, A), postprocessed; the slots' queues are
        emptied, so the next call predicts again (select_action's actions when n_action_steps == horizon)."""
        if not self.chunked:
            return super().select_chunk(observation, task_texts, slots, horizon)
        if not 1 <= horizon <= self.max_horizon():
            raise ConfigError(self._horizon_problem(horizon))
        torch = self._torch
        with torch.inference_mode(), self._autocast():
            batch = self._convert(observation, task_texts)
            self._check(batch)
            for slot in slots:
                self._slots[slot].queue.clear()
            self._refill(batch, slots, list(range(len(slots))), keep=horizon)
            if not self.stateless:  # horizon 1: as select_action, the pipeline sees the rows in their order
                self.preprocessor(_copy(batch))
            rows = [self._slots[slot].queue for slot in slots]
            if any(len(row) != horizon for row in rows):
                raise RuntimeError(f"predict_action_chunk returned chunks of {min(map(len, rows))} actions, fewer "
                                   f"than the horizon {horizon} (the config's chunk_size is {self.chunk_size})")
            actions = self.postprocessor(torch.stack([action for row in rows for action in row]))  # (B * H, A)
            for row in rows:
                row.clear()
        return actions.to("cpu").numpy().reshape(len(slots), horizon, *actions.shape[1:])

    def contract(self) -> PolicyContract:
        return contract(self.config, self.rename_map)

    def runtime(self) -> dict[str, Any]:
        torch = self._torch
        dtype = next((str(p.dtype) for p in self.policy.parameters()), None)
        return {"device": self.device, "dtype": dtype, "autocast": bool(self._amp),
                "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
                "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
                "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32)}

    def release(self, slot: int) -> None:
        self._slots.pop(slot, None)

    def close(self) -> None:
        self._slots.clear()

    # internals

    def _horizon_problem(self, horizon: int) -> str:
        what = f"policy {self.spec.path!r} ({self.config.type})"
        if self.max_horizon() == 1 < self.chunk_size:
            return (f"action horizon {horizon}: {what} serves one action per request: its processor pipelines keep "
                    f"state from step to step ({', '.join(stateful_steps(self.preprocessor, self.postprocessor))}), "
                    f"so each action needs its own step's observation")
        return f"action horizon {horizon}: {what} predicts chunks of {self.chunk_size} actions (1 to {self.chunk_size})"

    def _postprocessed(self, actions: list[Any]) -> np.ndarray:
        """Queued raw actions, one per row, through the postprocessor."""
        return self.postprocessor(self._torch.stack(actions)).to("cpu").numpy()

    def _autocast(self) -> Any:
        if not self._amp:
            return nullcontext()
        return self._torch.autocast(device_type=self._torch.device(self.device).type)

    def _convert(self, observation: Mapping[str, Any], task_texts: Sequence[str]) -> dict[str, Any]:
        from lerobot.envs.utils import preprocess_observation

        batch = preprocess_observation({k: v for k, v in observation.items()})
        batch["task"] = list(task_texts)
        return batch

    def _check(self, batch: Mapping[str, Any]) -> None:
        provided = {k: tuple(v.shape[1:]) for k, v in batch.items() if hasattr(v, "shape")}
        signature = tuple(sorted(provided.items()))
        if signature in self._checked:
            return
        problem = feature_mismatch(self.config.input_features, provided, self.rename_map)
        if problem:
            raise ConfigError(f"policy {self.spec.path!r}: {problem}")
        self._checked.add(signature)

    def _refill(self, batch: dict[str, Any], slots: Sequence[int], need: list[int], keep: int | None = None) -> None:
        """Predict a chunk for the rows in `need` (indices into the batch) and queue its first `keep` actions
        (default: n_action_steps) per slot."""
        keep = keep or self.n_action_steps
        groups: dict[str, list[int]] = {}
        for i in need:
            groups.setdefault(batch["task"][i], []).append(i)
        for rows in groups.values():
            if self.forward == "per_slot":
                for i in rows:
                    self._predict(batch, slots, [i], {i: 0}, keep)
            elif self.forward == "grouped":
                self._predict(batch, slots, rows, {i: pos for pos, i in enumerate(rows)}, keep)
            else:  # padded: row s of the forward is slot s; as wide as the widest run among the live slots
                width = max(max(state.n_slots for state in self._slots.values()), max(slots) + 1)
                by_slot = {slots[i]: i for i in rows}
                layout = [by_slot.get(s, rows[0]) for s in range(width)]
                self._predict(batch, slots, layout, {i: slots[i] for i in rows}, keep)

    def _predict(self, batch: dict[str, Any], slots: Sequence[int], layout: list[int],
                 positions: dict[int, int], keep: int) -> None:
        """One forward of the batch rows in `layout`; batch row i's chunk (at forward row `positions[i]`)
        goes to slot `slots[i]`'s queue. Other forward rows are fillers."""
        processed = self.preprocessor(_take(batch, layout))
        noise: list[Any] = [None] * len(layout)
        for i, pos in positions.items():
            noise[pos] = self._slots[slots[i]].generator
        self._noise_rows = noise
        try:
            chunk = self.policy.predict_action_chunk(processed)
        finally:
            self._noise_rows = None
        for i, pos in positions.items():
            self._slots[slots[i]].queue.extend(chunk[pos, :keep].unbind(0))

    def _act_per_instance(self, batch: dict[str, Any], slots: Sequence[int]) -> np.ndarray:
        """Policies without per-slot chunking: each slot's own copy, batch size 1, its own RNG stream."""
        torch = self._torch
        cuda = self.device.startswith("cuda")
        out = []
        for i, slot in enumerate(slots):
            state = self._slots[slot]
            cpu_state, cuda_state = state.rng_state
            with torch.random.fork_rng(devices=[torch.device(self.device).index or 0] if cuda else []):
                torch.set_rng_state(cpu_state)
                if cuda:
                    if cuda_state is None:
                        torch.cuda.manual_seed(state.seed)
                    else:
                        torch.cuda.set_rng_state(cuda_state)
                processed = self.preprocessor(_take(batch, [i]))
                action = state.instance.select_action(processed)
                state.rng_state = (torch.get_rng_state(), torch.cuda.get_rng_state() if cuda else None)
            out.append(self.postprocessor(action))
        return torch.cat(out).to("cpu").numpy()

    def _install_noise(self) -> None:
        """Flow-matching models: draw each row's noise from its episode's generator."""
        model = getattr(self.policy, "model", None)
        original = getattr(model, "sample_noise", None)
        if not callable(original):
            return
        torch = self._torch

        def sample_noise(shape: Sequence[int], device: Any) -> Any:
            rows = self._noise_rows
            if rows is None or len(rows) != shape[0]:
                return original(shape, device)
            filler = torch.Generator().manual_seed(0)
            noise = [torch.randn(tuple(shape[1:]), generator=g or filler, dtype=torch.float32) for g in rows]
            return torch.stack(noise).to(device)

        model.sample_noise = sample_noise


def chunking(policy: Any) -> bool:
    """Whether per-slot action queues fed by `predict_action_chunk` reproduce the policy's `select_action`."""
    config = policy.config
    rtc = getattr(config, "rtc_config", None)
    return (config.type in CHUNK_TYPES
            and callable(getattr(policy, "predict_action_chunk", None))
            and getattr(config, "n_obs_steps", 1) == 1
            and getattr(config, "temporal_ensemble_coeff", None) is None
            and isinstance(getattr(config, "n_action_steps", None), int)
            and not (rtc is not None and getattr(rtc, "enabled", False)))


# LeRobot processor steps that keep nothing from one call to the next (a RelativeActionsProcessorStep, for one,
# remembers the last state for its AbsoluteActionsProcessorStep; unknown steps are taken to keep something).
STATELESS_STEPS = frozenset({
    "AddBatchDimensionProcessorStep", "AddBatchDimensionObservationStep", "AddBatchDimensionActionStep",
    "AddBatchDimensionComplementaryDataStep", "DeviceProcessorStep", "NormalizerProcessorStep",
    "UnnormalizerProcessorStep", "RenameObservationsProcessorStep", "TokenizerProcessorStep",
    "NewLineTaskProcessorStep", "IdentityProcessorStep", "Pi0NewLineProcessor",
    "Pi05PrepareStateTokenizerProcessorStep",
})


def stateless(pipeline: Any) -> bool:
    """Whether a processor pipeline's output depends only on its input (every step a known stateless one), so
    calls whose output is not used may be left out."""
    steps = getattr(pipeline, "steps", None)
    return steps is not None and all(type(step).__name__ in STATELESS_STEPS for step in steps)


def stateful_steps(preprocessor: Any, postprocessor: Any) -> list[str]:
    """The steps of a policy's two pipelines that may carry something from one call to the next (none: the pair is
    stateless). Relative actions count only when enabled: pi0's and pi05's pipelines always hold the pair, disabled
    unless `use_relative_actions`, and the preprocessor step's cached state is read only by an enabled
    AbsoluteActionsProcessorStep."""
    pre, post = (getattr(pipeline, "steps", None) for pipeline in (preprocessor, postprocessor))
    if pre is None or post is None:
        return ["a pipeline without steps"]
    relative = {"RelativeActionsProcessorStep", "AbsoluteActionsProcessorStep"}
    enabled = [step for step in [*pre, *post] if type(step).__name__ in relative and getattr(step, "enabled", True)]
    return [type(step).__name__ for step in [*pre, *post] if type(step).__name__ not in STATELESS_STEPS
            and not (type(step).__name__ in relative and not enabled)]


def pipelines_stateless(preprocessor: Any, postprocessor: Any) -> bool:
    """Whether both pipelines' outputs depend only on their inputs (see `stateful_steps`)."""
    return not stateful_steps(preprocessor, postprocessor)


def _shared_copy(policy: Any) -> Any:
    """A copy of the policy with its own state (queues, histories) and the same weights."""
    memo = {id(t): t for t in itertools.chain(policy.parameters(), policy.buffers())}
    return copy.deepcopy(policy, memo)


def _take(batch: Mapping[str, Any], rows: list[int], n: int | None = None) -> dict[str, Any]:
    """Rows of a converted batch (tensors with a batch axis, the task list, nested dicts), in this order."""
    n = len(batch["task"]) if n is None else n
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, Mapping):
            out[key] = _take(value, rows, n)
        elif hasattr(value, "shape") and len(value.shape) > 0 and value.shape[0] == n:
            out[key] = value[rows]
        elif isinstance(value, list) and len(value) == n:
            out[key] = [value[i] for i in rows]
        else:
            out[key] = value
    return out


def _copy(batch: Mapping[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, list) else v for k, v in batch.items()}
