"""A third-party package adds an env family and a policy type through entry points, without editing runner:
installed into a fresh venv beside runner, it is validated (its kwargs schema with file:line:col), listed and
evaluated like a built-in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, runner_cli

UV = Path(sys.executable).with_name("uv")

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "runner-toy"
version = "0.1.0"
requires-python = ">=3.11"

[project.entry-points."runner.envs"]
toy = "runner_toy:FAMILY"
toy-wrong = "runner_toy:WRONG"

[project.entry-points."runner.policies"]
toy-oracle = "runner_toy:ORACLE"
"""

DESCRIPTORS = '''\
"""A toy family: walk along a line to a goal (light part: no import of the runtime)."""
from runner.adapters import EnvFamily, PolicyType

FAMILY = EnvFamily(
    name="toy",
    runtime="runner_toy.adapter:ToyAdapter",
    summary="Walk along a line to a goal",
    kwargs_schema={"type": "object", "additionalProperties": False,
                   "properties": {"goal": {"type": "integer", "minimum": 1, "maximum": 100}}},
    items={"line": 1, "lines": 2},
    item_hint="tasks: line, lines",
)
WRONG = EnvFamily(name="toy-wrong", runtime="runner_toy.adapter:WrongAdapter", summary="A hook with other parameters",
                  items={"line": 1})
ORACLE = PolicyType(name="toy-oracle", runtime="runner_toy.policy:make", summary="Always step right", envs=("toy", "toy-wrong"))
'''

ADAPTER = '''\
from typing import ClassVar

import gymnasium as gym
import numpy as np

from runner.envs.base import EnvAdapter, TaskEnv, select_task_ids, unique_groups
from runner.tasks import TaskRef

NAMES = {"line": ("line",), "lines": ("short-line", "long-line")}


class ToyAdapter(EnvAdapter):
    name: ClassVar[str] = "toy"

    def tasks(self, env):
        return [TaskRef(group, i, name, f"walk the {name}") for group in unique_groups(env.tasks)
                for i, name in select_task_ids(group, NAMES[group], env.task_ids)]

    def max_steps(self, task, env):
        return env.max_steps or 50

    def make(self, task, env, *, obs_keys, video):
        return LineEnv(task, int(env.kwargs.get("goal", 5)))


class WrongAdapter(ToyAdapter):
    name: ClassVar[str] = "toy-wrong"

    def make(self, task, env):  # the engine passes obs_keys and video too
        return LineEnv(task, 5)


class LineEnv(TaskEnv):
    control_fps = 10.0

    def __init__(self, task, goal):
        self.task, self.goal = task, goal + (3 if task.name == "long-line" else 0)
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Dict({"agent_pos": gym.spaces.Box(-100, 100, (1,), np.float32)})
        self.x = 0

    def reset(self, *, seed=None, options=None):
        self.x = 0
        return {"agent_pos": np.array([self.x], np.float32)}, {}

    def step(self, action):
        self.x += 1 if int(action) == 1 else -1
        done = self.x == self.goal
        return {"agent_pos": np.array([self.x], np.float32)}, float(done), done, False, {"is_success": done}

    def render(self):
        return np.zeros((8, 8, 3), np.uint8)
'''

POLICY = '''\
import numpy as np

from runner.policies.base import PerEnvBatch, PerEnvPolicy


class StepRight(PerEnvPolicy):
    def reset(self, start):
        pass

    def act(self, observation):
        return np.int64(1)


def make(policy, env):
    return PerEnvBatch(StepRight, frozenset({"agent_pos"}))
'''


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    if not UV.is_file():
        pytest.skip("uv is a dev dependency")
    root = tmp_path_factory.mktemp("plugin")
    package = root / "runner-toy"
    (package / "runner_toy").mkdir(parents=True)
    (package / "pyproject.toml").write_text(PYPROJECT)
    (package / "runner_toy" / "__init__.py").write_text(DESCRIPTORS)
    (package / "runner_toy" / "adapter.py").write_text(ADAPTER)
    (package / "runner_toy" / "policy.py").write_text(POLICY)
    venv = root / "venv"
    for argv in ([str(UV), "venv", "--quiet", "--python", sys.executable, str(venv)],
                 [str(UV), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), "-e", str(REPO),
                  str(package)]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr
    return venv


def runner(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The venv's `runner` console script."""
    return runner_cli(*args, command=[str(venv / "bin" / "runner")], cwd=cwd)


def test_a_plugin_family_and_policy_type_are_validated_listed_and_evaluated(venv, tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "toy.yaml").write_text(
        "name: toy\nenv:\n  type: toy\n  task: line,lines\n  kwargs: {goal: 4}\npolicy:\n  type: toy-oracle\n"
        "eval: {n_episodes: 2, batch_size: 2, videos: 0}\nci: {enabled: false}\n")
    assert runner(venv, tmp_path, "validate", "specs/toy.yaml").stdout == "specs/toy.yaml: ok\n"
    listed = runner(venv, tmp_path, "list", "specs/toy.yaml").stdout
    assert "line_0" in listed and "walk the long-line" in listed
    run = runner(venv, tmp_path, "run", "specs/toy.yaml", "--output-dir", "out", "--no-progress")
    assert run.returncode == 0, run.stderr
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["n_episodes"] == 6 and metrics["pc_success"] == 100.0
    # the plugin's kwargs schema and its policy's env rule, checked by `runner validate` with positions
    (tmp_path / "specs" / "bad.yaml").write_text(
        "name: bad\nenv:\n  type: toy\n  task: lnie\n  kwargs: {gaol: 4}\npolicy:\n  type: toy-oracel\n")
    bad = runner(venv, tmp_path, "validate", "specs/bad.yaml")
    assert bad.returncode == 2, bad.stderr
    lines = bad.stderr.splitlines()
    assert "specs/bad.yaml:5:12: env.kwargs.gaol: unknown key (known keys: goal); did you mean 'goal'?" in lines
    assert any(line.startswith("specs/bad.yaml:7:9: policy.type: \"toy-oracel\" is not one of:") and
               line.endswith("did you mean 'toy-oracle'?") for line in lines), lines


def test_a_plugin_adapter_whose_hook_has_other_parameters_is_refused_with_its_name(venv, tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "wrong.yaml").write_text(
        "name: wrong\nenv: {type: toy-wrong, task: line}\npolicy: {type: toy-oracle}\n"
        "eval: {n_episodes: 1, videos: 0}\nci: {enabled: false}\n")
    run = runner(venv, tmp_path, "run", "specs/wrong.yaml", "--output-dir", "out", "--no-progress")
    assert run.returncode == 2 and run.stderr.startswith(
        "runner: error: env type 'toy-wrong' (runner_toy.adapter:WrongAdapter): WrongAdapter: make(self, task, env) "
        "cannot be called as make(self, task: 'TaskRef', env: 'EnvSpec', *, obs_keys"), run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "out").exists()


def test_a_plugin_cannot_take_a_builtin_name(venv, tmp_path):
    code = ("from runner.adapters import registered\n"
            "assert registered('env')['metaworld'] == 'runner.envs.metaworld:FAMILY'\n"
            "print(registered('env')['toy'], registered('policy')['toy-oracle'])")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["runner_toy:FAMILY", "runner_toy:ORACLE"], done.stderr
