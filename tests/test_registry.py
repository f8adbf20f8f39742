"""`runner.registry.import_registered`: the lookup behind `env.type` and `policy.type`."""

from __future__ import annotations

import pytest

from runner.errors import ConfigError
from runner.registry import import_registered

REGISTRY = {"json": "json:dumps", "gone": "runner_no_such_module:Thing", "plain": "json"}


def test_registered_module_and_attribute():
    module, attribute = import_registered("env", "json", REGISTRY)
    assert module.__name__ == "json" and attribute == "dumps"
    assert import_registered("policy", "plain", REGISTRY)[1] == ""


def test_unknown_name_suggests_the_closest():
    with pytest.raises(ConfigError, match=r"unknown policy type 'jsno'; did you mean 'json'\? "
                                          r"\(known: json, gone, plain\)"):
        import_registered("policy", "jsno", REGISTRY)


def test_registered_module_missing_from_the_installation():
    with pytest.raises(ConfigError, match=r"env type 'gone' has no adapter in this installation "
                                          r"\(runner_no_such_module is missing\)"):
        import_registered("env", "gone", REGISTRY)


def test_a_missing_dependency_inside_the_module_is_not_hidden(tmp_path, monkeypatch):
    (tmp_path / "adapter_with_bad_import.py").write_text("import runner_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="runner_no_such_dependency"):
        import_registered("env", "bad", {"bad": "adapter_with_bad_import:Adapter"})
