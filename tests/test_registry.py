"""runner.adapters: the open registry of env families and policy types, and every registered descriptor."""

from __future__ import annotations

import json

import jsonschema
import pytest

from runner.adapters import (
    BUILTIN_ENVS,
    BUILTIN_POLICIES,
    EnvFamily,
    PolicyType,
    descriptor,
    env_family,
    import_target,
    names,
    policy_type,
    runtime,
)
from runner.errors import ConfigError
from runner.spec.schema import schema

ENVS, POLICIES = names("env"), names("policy")


@pytest.mark.parametrize("name", ENVS)
def test_every_env_family_is_one_light_package_with_a_runtime(name):
    family = env_family(name)
    assert isinstance(family, EnvFamily) and family.name == name and family.summary
    jsonschema.Draft202012Validator.check_schema(dict(family.kwargs_schema))
    module, attribute = import_target("env", name, family.runtime)
    assert module.__name__ == f"{family.runtime.partition(':')[0]}" and getattr(module, attribute).name == name
    if name in BUILTIN_ENVS:
        assert family.runtime.startswith(f"runner.envs.{name}.")  # one home: runner/envs/<name>/


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_type_is_one_light_package_with_a_runtime(name):
    kind = policy_type(name)
    assert isinstance(kind, PolicyType) and kind.name == name and kind.summary
    jsonschema.Draft202012Validator.check_schema(dict(kind.kwargs_schema))
    assert callable(runtime("policy", name))
    if name in BUILTIN_POLICIES:
        assert kind.runtime.startswith(f"runner.policies.{name}.")
    for env in kind.envs or ():
        assert env in ENVS


def test_the_schema_lists_the_builtin_types_for_editors():
    """schema/benchmark.schema.json names the built-ins (editors complete them); plugins are added at validation."""
    defs = schema()["$defs"]
    assert defs["env"]["properties"]["type"]["enum"] == list(BUILTIN_ENVS)
    assert defs["policy"]["properties"]["type"]["enum"] == list(BUILTIN_POLICIES)


def test_descriptors_import_no_simulator_nor_numpy():
    import subprocess
    import sys

    code = ("import sys\n"
            "for name in ('numpy', 'gymnasium', 'mujoco', 'metaworld', 'libero', 'torch', 'lerobot'):\n"
            "    sys.modules[name] = None\n"
            "from runner.adapters import env_family, policy_type, names\n"
            "[env_family(n) for n in names('env')]; [policy_type(n) for n in names('policy')]\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_unknown_name_suggests_the_closest():
    with pytest.raises(ConfigError, match=r"unknown policy type 'scriptd'; did you mean 'scripted'\? \(known: "):
        descriptor("policy", "scriptd")
    with pytest.raises(ConfigError, match=r"unknown env type 'metaword'; did you mean 'metaworld'"):
        env_family("metaword")


def test_a_registered_module_missing_from_the_installation():
    with pytest.raises(ConfigError, match=r"env type 'gone' has no adapter in this installation "
                                          r"\(runner_no_such_module is missing\)"):
        import_target("env", "gone", "runner_no_such_module:Thing")


def test_a_missing_dependency_inside_the_module_is_not_hidden(tmp_path, monkeypatch):
    (tmp_path / "adapter_with_bad_import.py").write_text("import runner_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="runner_no_such_dependency"):
        import_target("env", "bad", "adapter_with_bad_import:Adapter")


def test_kwargs_schemas_are_json():
    for name in ENVS:
        json.dumps(dict(env_family(name).kwargs_schema))
    for name in POLICIES:
        json.dumps(dict(policy_type(name).kwargs_schema))


# ── adapter hooks: base classes with defaults, checked when a family or policy class is first used ──────────


@pytest.mark.parametrize("name", ENVS)
def test_every_env_adapter_subclasses_the_base_with_compatible_hooks(name):
    from runner.envs import adapter_class
    from runner.envs.base import EnvAdapter

    assert issubclass(adapter_class(name), EnvAdapter)


def test_every_builtin_policy_class_subclasses_the_base_with_compatible_hooks():
    from runner.adapters import hook_problems
    from runner.policies.base import PerEnvBatch, PerEnvPolicy, Policy
    from runner.policies.lerobot.policy import LeRobotPolicy
    from runner.policies.python.policy import UserBatched, UserPerEnv
    from runner.policies.random.policy import RandomPolicy
    from runner.policies.remote.policy import RemotePolicy
    from runner.policies.scripted.policy import ScriptedExpert

    for cls in (LeRobotPolicy, UserBatched, PerEnvBatch):
        assert issubclass(cls, Policy) and hook_problems(cls, Policy, ("reset", "select_action")) == [], cls
    for cls in (RandomPolicy, RemotePolicy, ScriptedExpert, UserPerEnv):
        assert issubclass(cls, PerEnvPolicy) and hook_problems(cls, PerEnvPolicy, ("reset", "act")) == [], cls


def test_a_hook_with_other_parameters_is_named():
    from runner.adapters import hook_problems
    from runner.envs.base import REQUIRED_HOOKS, EnvAdapter

    class Wrong(EnvAdapter):
        def tasks(self, env):
            return []

        def max_steps(self, task, env):
            return 1

        def make(self, task, env):  # obs_keys and video missing
            raise AssertionError

        def needs_gl(self, env, *, obs_keys, video):  # keyword-only where the engine passes them by position
            return False

    problems = hook_problems(Wrong, EnvAdapter, REQUIRED_HOOKS)
    assert [p.split("(")[0] for p in problems] == ["needs_gl", "make"], problems
    assert "cannot be called as make(self, task: 'TaskRef', env: 'EnvSpec', *, obs_keys" in problems[1]

    class Lacking(EnvAdapter):
        def tasks(self, env):
            return []

    assert hook_problems(Lacking, EnvAdapter, REQUIRED_HOOKS) == ["max_steps() is not defined", "make() is not defined"]


def test_a_plugin_adapter_that_is_not_a_subclass_is_refused_with_its_name(monkeypatch):
    from runner import adapters
    from runner.envs import adapter_class

    class Duck:
        name = "duck"

    monkeypatch.setattr(adapters, "registered", lambda kind: {**BUILTIN_ENVS, "duck": "duck_plugin:FAMILY"}
                        if kind == "env" else dict(BUILTIN_POLICIES))
    monkeypatch.setattr(adapters, "load", lambda kind, name, target: EnvFamily("duck", "duck_plugin:Duck")
                        if target == "duck_plugin:FAMILY" else Duck)
    adapters.descriptor.cache_clear()
    adapter_class.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"^env type 'duck' \(duck_plugin:Duck\): Duck is not a subclass of "
                                              r"runner\.envs\.base\.EnvAdapter$"):
            adapter_class("duck")
    finally:
        adapters.descriptor.cache_clear()
        adapter_class.cache_clear()


def test_a_policy_make_that_returns_something_else_is_refused():
    from runner.policies import policy_class
    from runner.policies.base import make_per_env

    class Duck:
        def select_action(self, observation, task_texts, slots):
            raise AssertionError

    with pytest.raises(ConfigError, match=r"^policy type 'random' \(runner\.policies\.random\.policy:make\): Duck is "
                                          r"not a subclass of runner\.policies\.base\.Policy$"):
        policy_class("random", Duck)
    with pytest.raises(ConfigError, match=r"^per-env policy .*Duck: not a subclass of runner\.policies\.base\.PerEnvPolicy"):
        make_per_env(Duck)
