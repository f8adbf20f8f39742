"""From spec files (+ `extends`, + `--set` overrides) to validated `Spec` objects."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from runner.spec import schema, semantic
from runner.spec.model import Spec, build
from runner.spec.problems import Pos, Problem, SpecError, dotted
from runner.spec.yamlload import Document, decode, load

OVERRIDE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


def default_spec_paths(root: Path = Path(".")) -> list[Path]:
    """specs/*.yaml, without partials (files starting with `_`, meant only for `extends`)."""
    return sorted(p for p in (root / "specs").glob("*.yaml") if not p.name.startswith("_"))


def load_spec(path: str | os.PathLike, overrides: Sequence[str] = ()) -> Spec:
    """Load, merge, override, validate and build one spec; raises `SpecError` listing every problem."""
    path = Path(path)
    doc = resolve(path, overrides)
    data = _validate(doc, path)
    return build(Spec, data, source=path)


def load_specs(paths: Iterable[str | os.PathLike], overrides: Sequence[str] = ()) -> list[Spec]:
    """Load several specs, collecting the problems of all of them before raising."""
    specs, problems = [], []
    for path in paths:
        try:
            specs.append(load_spec(path, overrides))
        except SpecError as exc:
            problems.extend(exc.problems)
    if problems:
        raise SpecError(problems)
    return specs


def resolve(path: Path, overrides: Sequence[str] = ()) -> Document:
    """The spec's document after `extends` and `--set`, before validation."""
    doc = _read_with_extends(path, ())
    for override in overrides:
        _apply_override(doc, override)
    return doc


def _read(path: Path, origin: str) -> Document:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError([Problem(Pos(origin), "", "no such file")]) from None
    except IsADirectoryError:
        raise SpecError([Problem(Pos(origin), "", "is a directory, not a spec file")]) from None
    except OSError as exc:
        raise SpecError([Problem(Pos(origin), "", f"cannot read: {exc.strerror}")]) from None
    doc = load(origin, decode(origin, raw))
    if doc.data is None:
        raise SpecError([Problem(Pos(origin, 1, 1), "", "empty spec (expected a mapping with name, env and policy)")])
    return doc


def _read_with_extends(path: Path, chain: tuple[Path, ...]) -> Document:
    origin = os.path.normpath(str(path))
    doc = _read(path, origin)
    if not isinstance(doc.data, dict) or "extends" not in doc.data or doc.data["extends"] is None:
        return doc
    target = doc.data["extends"]
    if not isinstance(target, str) or not target:
        return doc  # the schema reports the bad type
    parent_path = Path(os.path.normpath(path.parent / target))
    here = path.resolve()
    seen = chain + (here,)
    if parent_path.resolve() in seen:
        cycle = " -> ".join(os.path.relpath(p) for p in (*seen, parent_path.resolve()))
        raise SpecError([Problem(doc.pos(("extends",)), "extends", f"extends cycle: {cycle}")])
    if not parent_path.is_file():
        raise SpecError([Problem(doc.pos(("extends",)), "extends", f"no such spec file {str(parent_path)!r}")])
    parent = _read_with_extends(parent_path, seen)
    if not isinstance(parent.data, dict):
        raise SpecError([Problem(parent.pos(()), "", "a spec named by `extends` must be a mapping")])
    merged = Document(_deep_merge(parent.data, doc.data))
    merged.values = {**parent.values, **doc.values}
    merged.keys = {**parent.keys, **doc.keys}
    return merged


def _deep_merge(base: Any, top: Any) -> Any:
    if isinstance(base, dict) and isinstance(top, dict):
        out = dict(base)
        for key, value in top.items():
            out[key] = _deep_merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(top)


def _apply_override(doc: Document, override: str) -> None:
    origin = f"--set {override}"
    key, sep, text = override.partition("=")
    key = key.strip()
    if not sep or not OVERRIDE_KEY.match(key):
        raise SpecError([Problem(Pos(origin), "", "expected --set dotted.key=value (value in YAML, e.g. eval.n_episodes=5)")])
    path = tuple(key.split("."))
    value_doc = load(origin, text, root=path)
    node = doc.data
    for i, part in enumerate(path[:-1]):
        if not isinstance(node, dict):
            raise SpecError([Problem(Pos(origin), dotted(path[:i]), "is not a mapping, so it has no keys to set")])
        node = node.setdefault(part, {})
    if not isinstance(node, dict):
        raise SpecError([Problem(Pos(origin), dotted(path[:-1]), "is not a mapping, so it has no keys to set")])
    node[path[-1]] = value_doc.data
    for i in range(len(path)):
        doc.keys[path[: i + 1]] = Pos(origin)
    for sub in [p for p in doc.values if p[: len(path)] == path]:
        del doc.values[sub]
    doc.values.update({p: Pos(origin) for p in value_doc.values})


def _validate(doc: Document, source: Path | None) -> dict[str, Any]:
    problems = schema.check(doc)
    if problems:
        raise SpecError(sorted(problems, key=lambda p: (p.pos, p.path)))
    data = schema.with_defaults(doc.data)
    problems = semantic.check(data, doc, source)
    problems += _check_ci_set(data, doc, source)
    if problems:
        raise SpecError(sorted(problems, key=lambda p: (p.pos, p.path)))
    return data


def _check_ci_set(data: dict[str, Any], doc: Document, source: Path | None) -> list[Problem]:
    """Each `ci.set` override must leave a valid spec; problems point at the override."""
    problems = []
    for key, value in data["ci"]["set"].items():
        if key.split(".")[0] not in semantic.CI_SET_SECTIONS:
            continue  # semantic.check reports it
        trial = Document(copy.deepcopy(doc.data), dict(doc.values), dict(doc.keys))
        trial.data.get("ci", {}).pop("set", None)
        node = trial.data
        path = tuple(key.split("."))
        for part in path[:-1]:
            node = node.setdefault(part, {}) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            problems.append(Problem(doc.key_pos(("ci", "set", key)), dotted(("ci", "set", key)), "does not name a setting"))
            continue
        node[path[-1]] = value
        found = schema.check(trial)
        if not found:
            found = semantic.check(schema.with_defaults(trial.data), trial, source)
        for problem in found:
            problems.append(Problem(doc.key_pos(("ci", "set", key)), dotted(("ci", "set", key)),
                                    f"{problem.path}: {problem.message}", problem.hint))
    return problems
