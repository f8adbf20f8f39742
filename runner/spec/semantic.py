"""Checks the schema cannot express: names valid for the env, cross-field rules."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from runner.spec import catalog
from runner.spec.problems import Problem, did_you_mean, dotted
from runner.spec.project import extra_names
from runner.spec.textrules import WORKFLOW_SECTIONS, expression_problem, hidden_char_problem
from runner.spec.yamlload import Document
from runner.tasks import plan_size_problem

CI_SET_SECTIONS = ("env", "policy", "eval")
PYTHON_FACTORY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")


def metaworld_task_names(item: str) -> tuple[str, ...] | None:
    """The Meta-World tasks a task item names (a task, with or without prefix, or a group); None if unknown."""
    if item in catalog.METAWORLD_GROUPS:
        return catalog.METAWORLD_GROUPS[item]
    name = item.removeprefix(catalog.METAWORLD_TASK_PREFIX)
    return (name,) if name in catalog.METAWORLD_TASKS else None


def _group_size(env_type: str, item: str) -> int | None:
    if env_type == "metaworld":
        names = metaworld_task_names(item)
        return None if names is None else len(names)
    if env_type == "libero":
        return catalog.LIBERO_SUITES[item][0] if item in catalog.LIBERO_SUITES else None
    return None


def _check_text(value: Any, path: tuple, doc: Document, problems: list[Problem]) -> None:
    """Every key and string of the spec against runner.spec.textrules (what gen-ci would refuse)."""
    if isinstance(value, dict):
        for key, sub in value.items():
            reason = hidden_char_problem(key) if isinstance(key, str) else None
            if reason:
                problems.append(Problem(doc.key_pos(path + (key,)), dotted(path + (key,)), f"the key {reason}"))
            _check_text(sub, path + (key,), doc, problems)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_text(item, path + (i,), doc, problems)
    elif isinstance(value, str):
        reason = hidden_char_problem(value)
        if reason is None and path and path[0] in WORKFLOW_SECTIONS:
            reason = expression_problem(value)
        if reason:
            problems.append(Problem(doc.pos(path), dotted(path), reason))


def _task_count(env: dict[str, Any]) -> int | None:
    """How many tasks `env.task` names (None: unknown here, e.g. a misspelled group)."""
    items = [t for t in env["task"].split(",") if t]
    if env["type"] not in ("metaworld", "libero"):
        return len(items)
    sizes = [_group_size(env["type"], item) for item in items]
    if None in sizes:
        return None
    if env["task_ids"] is not None:
        return len(items) * len(env["task_ids"])
    return sum(sizes)  # type: ignore[arg-type]


def check(data: dict[str, Any], doc: Document, source: Path | None, skip: Collection[str] = ()) -> list[Problem]:
    """Problems in data with defaults filled in; sections named in `skip` (top-level keys that failed the
    schema) and the checks that read them are left out, so the rest is still checked."""
    problems: list[Problem] = []

    def add(path: tuple, message: str, hint: str | None = None, *, at_key: bool = False) -> None:
        pos = doc.key_pos(path) if at_key else doc.pos(path)
        problems.append(Problem(pos, dotted(path), message, hint))

    def ok(*sections: str) -> bool:  # a section missing here was reported by the schema (e.g. misspelled)
        return not any(s in skip or s not in data for s in sections)

    if ok("name") and source is not None and data["name"] != source.stem:
        add(
            ("name",), f"{data['name']!r} must equal the file name {source.stem!r} (rename the file or change the name)"
        )
    if ok("env"):
        _check_env(data["env"], add)
    _check_text(data, (), doc, problems)
    if ok("env", "eval"):
        n_tasks = _task_count(data["env"])
        too_many = plan_size_problem(n_tasks, data["eval"]["n_episodes"]) if n_tasks is not None else None
        if too_many:
            add(("eval", "n_episodes"), too_many)
    if ok("env", "policy"):
        _check_policy(data["policy"], data["env"]["type"], add)
    if ok("ci"):
        ci = data["ci"]
        if ci["hub_login"] and "HF_TOKEN" not in ci["secrets"]:
            add(
                ("ci", "hub_login"),
                "needs ci.secrets.HF_TOKEN (the GitHub secret holding a Hugging Face token), "
                "e.g. secrets: {HF_TOKEN: HF_TOKEN}",
            )
        for key in ci["set"]:
            if key.split(".")[0] not in CI_SET_SECTIONS:
                add(
                    ("ci", "set", key), f"may only override {', '.join(s + '.*' for s in CI_SET_SECTIONS)}", at_key=True
                )
    if ok("install"):
        known_extras = extra_names()
        for i, extra in enumerate(data["install"]["extras"] if known_extras else ()):
            if extra not in known_extras:
                add(
                    ("install", "extras", i),
                    f"unknown extra {extra!r} of this project (known: {', '.join(known_extras)})",
                    did_you_mean(extra, known_extras),
                )
        root = project_root(source)
        for i, package in enumerate(data["install"]["code"] if root is not None else ()):
            directory = root / package
            if not directory.is_dir():
                add(("install", "code", i), f"{package!r} is not a directory of this project (paths are relative "
                    "to the directory that holds specs/)")
            elif not ((directory / "pyproject.toml").is_file() or (directory / "setup.py").is_file()):
                add(("install", "code", i), f"{package!r} has no pyproject.toml or setup.py, so it cannot be "
                    "installed; make it a Python package")
    return problems


def project_root(source: Path | None) -> Path | None:
    """The project a spec belongs to: the parent of its `specs/` directory (None: a spec not read from a file)."""
    if source is None:
        return None
    folder = source.resolve().parent
    return folder.parent if folder.name == "specs" else folder


def _check_env(env: dict[str, Any], add: Callable[..., None]) -> None:
    env_type = env["type"]
    items = [t for t in env["task"].split(",") if t]
    if env_type == "metaworld":
        choices = [*catalog.METAWORLD_GROUPS, *catalog.METAWORLD_TASKS]
        for item in items:
            if metaworld_task_names(item) is None:
                add(
                    ("env", "task"),
                    f"unknown Meta-World task or group {item!r} (groups: {', '.join(catalog.METAWORLD_GROUPS)}; "
                    "`runner list` shows the tasks)",
                    did_you_mean(item.removeprefix(catalog.METAWORLD_TASK_PREFIX), choices),
                )
    elif env_type == "libero":
        for item in items:
            if item not in catalog.LIBERO_SUITES:
                add(
                    ("env", "task"),
                    f"unknown LIBERO suite {item!r} (suites: {', '.join(catalog.LIBERO_SUITES)})",
                    did_you_mean(item, catalog.LIBERO_SUITES),
                )

    sizes = [s for s in (_group_size(env_type, i) for i in items) if s is not None]
    if env["task_ids"] is not None and sizes:
        limit = min(sizes)
        for i, task_id in enumerate(env["task_ids"]):
            if task_id >= limit:
                add(
                    ("env", "task_ids", i),
                    f"task id {task_id} is out of range (the selected tasks have ids 0..{limit - 1})",
                )

    cameras = {"metaworld": catalog.METAWORLD_CAMERAS, "libero": catalog.LIBERO_CAMERAS}.get(env_type)
    if cameras is not None:
        for name in env["camera_name_mapping"]:
            if name not in cameras:
                add(
                    ("env", "camera_name_mapping", name),
                    f"unknown {env_type} camera {name!r} (known: {', '.join(cameras)})",
                    did_you_mean(name, cameras),
                    at_key=True,
                )


def _check_policy(policy: dict[str, Any], env_type: str, add: Callable[..., None]) -> None:
    if policy["type"] in ("lerobot", "python") and not policy["path"]:
        example = "a hub id like user/model or a local directory" if policy["type"] == "lerobot" else "module:factory"
        add(("policy", "type"), f"policy type {policy['type']!r} needs policy.path ({example})")
    if policy["type"] == "python" and policy["path"] and not PYTHON_FACTORY.match(policy["path"]):
        add(
            ("policy", "path"),
            f"{policy['path']!r} must be module:factory for a python policy (e.g. my_pkg.policies:make)",
        )
    if policy["type"] == "scripted" and env_type != "metaworld":
        add(("policy", "type"), f"scripted experts exist only for Meta-World, not {env_type!r}")
