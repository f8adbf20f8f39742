"""`runner new`: a minimal spec for a family and task that validates, generates CPU-only CI and runs."""

from __future__ import annotations

import pytest
import yaml
from helpers import runner_cli, runner_run, episodes_of

CASES = {  # name: (runner new arguments, what its install section holds)
    "reach": (["--env", "metaworld", "--task", "reach-v3"], {"extras": ["metaworld"]}),
    "cartpole": (["--env", "gym", "--task", "CartPole-v1"], {}),
    "pendulum": (["--env", "gym", "--task", "InvertedPendulum-v5", "--videos", "1"],
                 {"pip": ["mujoco==3.8.1"], "env": {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"},
                  "apt": ["libegl1", "libegl-mesa0", "libgl1", "libgl1-mesa-dri"]}),
    "lander": (["--env", "gym", "--task", "LunarLander-v3", "--videos", "1", "--pip", "pygame-ce==2.5.6"],
               {"pip": ["box2d==2.3.10", "pygame-ce==2.5.6"]}),
    "spatial": (["--env", "libero", "--task", "libero_spatial"],
                {"extras": ["libero"], "env": {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"},
                 "apt": ["cmake", "make", "g++", "libegl1", "libegl-mesa0", "libgl1", "libgl1-mesa-dri"]}),
}


@pytest.fixture
def project(tmp_path):
    (tmp_path / "specs").mkdir()
    return tmp_path


def new(project, *args):
    return runner_cli("new", *args, cwd=project)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_new_spec_validates_with_the_install_section_it_needs_and_gets_cpu_ci(project, name):
    args, install = CASES[name]
    proc = new(project, name, *args)
    assert proc.returncode == 0, proc.stderr
    path = project / "specs" / f"{name}.yaml"
    assert f"wrote specs/{name}.yaml" in proc.stdout
    data = yaml.safe_load(path.read_text())
    assert data["install"] == install and "extends" not in data  # nothing inherited from a GPU partial
    assert path.read_text().count("\n# ") >= 5  # a comment per section
    runner_cli("validate", f"specs/{name}.yaml", cwd=project, check=True)
    shown = path.read_text().split("`runner show ", 1)[1].split("`", 1)[0].split()  # the command its comment names
    assert shown == [f"specs/{name}.yaml", "--origins"]
    assert "# default" in runner_cli("show", *shown, cwd=project, check=True).stdout  # it runs, as written
    runner_cli("gen-ci", cwd=project, check=True)
    workflow = (project / ".github" / "workflows" / f"benchmark_{name}.yml").read_text()
    assert "ubuntu-latest" in workflow and "--gpus" not in workflow and "HF_TOKEN" not in workflow
    assert "schedule" not in yaml.safe_load(workflow)[True]


@pytest.mark.parametrize("name", ["reach", "cartpole"])
def test_a_new_spec_runs(project, name):
    assert new(project, name, *CASES[name][0]).returncode == 0
    out = project / "out"
    proc = runner_run(project / "specs" / f"{name}.yaml", out, "eval.n_episodes=2", "env.max_steps=20", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert len(episodes_of(out)) == 2


def test_the_policy_default_is_the_scripted_expert_where_there_is_one(project):
    assert new(project, "reach", "--env", "metaworld", "--task", "reach-v3").returncode == 0
    assert new(project, "cartpole", "--env", "gym", "--task", "CartPole-v1").returncode == 0
    assert yaml.safe_load((project / "specs" / "reach.yaml").read_text())["policy"] == {"type": "scripted"}
    assert yaml.safe_load((project / "specs" / "cartpole.yaml").read_text())["policy"] == {"type": "random"}


@pytest.mark.parametrize("args, message", [
    (["Bad", "--env", "gym", "--task", "CartPole-v1"], "'Bad' is not a spec name"),
    (["t", "--env", "gym", "--task", "CartPole-v7"], "runner new --task: env.task: unknown Gymnasium env id "
                                                     "'CartPole-v7'"),
    (["t", "--env", "gymm", "--task", "x"], "runner new --env: env.type:"),
    (["t", "--env", "metaworld", "--task", "reach"], "did you mean 'reach-v3'?"),
    (["t", "--env", "metaworld", "--task", "reach-v3", "--policy", "lerobot"], "runner new --policy: policy.type: "
                                                                                "policy type 'lerobot' needs policy.path"),
    (["t", "--env", "gym", "--task", "LunarLander-v3", "--videos", "1"], "needs pygame-ce (a version >=2.1.3), which is "
                                                                         "not installed here"),
    (["t", "--env", "gym", "--task", "CartPole-v1", "--policy", "python", "--path", "mine:make"],
     "runner new --path: policy.path: 'mine:make' is your code"),
    (["t", "--env", "gym", "--task", "CartPole-v1", "-o", "other.yaml"], "a spec's file is named after it: t.yaml"),
])
def test_mistakes_are_one_message_and_nothing_is_written(project, args, message):
    proc = new(project, *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert list((project / "specs").iterdir()) == [] and not (project / "other.yaml").exists()


def test_an_existing_spec_is_kept_unless_forced(project):
    path = project / "specs" / "t.yaml"
    path.write_text("mine")
    proc = new(project, "t", "--env", "gym", "--task", "CartPole-v1")
    assert proc.returncode == 2 and "--force" in proc.stderr and path.read_text() == "mine"
    assert new(project, "t", "--env", "gym", "--task", "CartPole-v1", "--force").returncode == 0
    assert "name: t" in path.read_text()
