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
from runner.spec.yamlload import MAX_DEPTH, SPECIAL, Document, decode, load, read_bytes
from runner.text import cut, with_article

# dotted.key; parts after the first may hold / : - too (a remote policy's request keys: observation/image)
OVERRIDE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_/:-]+)*$")
MAX_OVERRIDE_ECHO = 120  # characters of a --set override named in messages
EXTENDS = re.compile(schema.schema()["properties"]["extends"]["pattern"])
MAX_EXTENDS = 16  # files in one extends chain (the shipped specs use 3)


def default_spec_paths(root: Path = Path(".")) -> list[Path]:
    """specs/*.yaml, without partials (files starting with `_`, meant only for `extends`)."""
    return sorted(p for p in (root / "specs").glob("*.yaml") if not p.name.startswith("_"))


def load_spec(path: str | os.PathLike, overrides: Sequence[str] = ()) -> Spec:
    """Load, merge, override, validate and build one spec; raises `SpecError` listing every problem."""
    path = Path(path)
    doc, problems = _resolve(path, overrides)
    # `ci.set` is checked against the spec as written: local --set overrides (e.g. env.task_ids for a
    # local run) never meet the CI-only overrides, so they must not be judged together.
    data = _validate(doc, path, problems, check_ci_set=not overrides)
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
    doc, problems = _resolve(Path(path), overrides)
    if problems:
        raise SpecError(problems)
    return doc


def _resolve(path: Path, overrides: Sequence[str]) -> tuple[Document, list[Problem]]:
    """The document, and the problems of overrides that could not be applied (the others are)."""
    doc = _read_with_extends(path, ())
    problems = []
    for override in overrides:
        try:
            _apply_override(doc, override)
        except SpecError as exc:
            problems.extend(exc.problems)
    return doc, problems


def _read(path: Path, origin: str) -> Document:
    doc = load(origin, decode(origin, read_bytes(path, origin)))
    if doc.data is None:
        raise SpecError(
            [Problem(Pos(origin, 1, 1), "", "empty spec; write a mapping with at least name, env and policy")]
        )
    return doc


def _read_with_extends(path: Path, chain: tuple[Path, ...]) -> Document:
    origin = os.path.normpath(str(path))
    doc = _read(path, origin)
    target = doc.data.get("extends") if isinstance(doc.data, dict) else None
    if not isinstance(target, str) or not EXTENDS.match(target):
        return doc  # absent, null or malformed: the schema reports a bad value
    parent_path = Path(os.path.normpath(path.parent / target))
    seen = chain + (path.resolve(),)
    if len(seen) > MAX_EXTENDS:
        raise SpecError([Problem(doc.pos(("extends",)), "extends", f"the extends chain is longer than {MAX_EXTENDS} "
                                 f"files (from {os.path.relpath(seen[0])}); a spec extends a partial or two")])
    try:
        target_path = parent_path.resolve()
        is_file, is_dir, exists = parent_path.is_file(), parent_path.is_dir(), parent_path.exists()
    except OSError as exc:  # a name the file system refuses (too long, a loop of links)
        raise SpecError([Problem(doc.pos(("extends",)), "extends", f"{cut(repr(str(parent_path)), 300)} cannot be "
                                 f"read: {exc.strerror or exc}")]) from None
    if target_path in seen:
        cycle = " -> ".join(os.path.relpath(p) for p in (*seen, target_path))
        raise SpecError([Problem(doc.pos(("extends",)), "extends", f"extends cycle: {cycle}")])
    if not is_file:
        what = "is a directory" if is_dir else SPECIAL if exists else "does not exist"
        named = cut(repr(str(parent_path)), 300)
        raise SpecError([Problem(doc.pos(("extends",)), "extends",
                                 f"{named} {what}; extends names a spec file relative to this one")])
    parent = _read_with_extends(parent_path, seen)
    if not isinstance(parent.data, dict):
        raise SpecError(
            [
                Problem(
                    parent.pos(()),
                    "",
                    f"a spec named by `extends` must be a mapping, not {with_article(schema.type_name(parent.data))}",
                )
            ]
        )
    merged = Document(parent.data, dict(parent.values), dict(parent.keys), origin=doc.origin)
    merged.data = _merge(merged, doc, doc.data, ())
    return merged


def _merge(into: Document, top: Document, value: Any, path: tuple) -> Any:
    """Deep-merge `value` (at `path` of `top`) into `into`: mappings merge, anything else replaces,
    and the positions of what was replaced are forgotten so errors point at the file that wins."""
    base = into.data
    for part in path:
        base = base.get(part, _ABSENT) if isinstance(base, dict) else _ABSENT
    if isinstance(base, dict) and isinstance(value, dict):
        out = dict(base)
        for key, sub in value.items():
            out[key] = _merge(into, top, sub, path + (key,))
        if path in top.values:
            into.values[path] = top.values[path]
        if path in top.keys:
            into.keys[path] = top.keys[path]
        return out
    _forget(into, path)
    _copy_positions(top, into, path)
    return copy.deepcopy(value)


_ABSENT = object()


def _forget(doc: Document, path: tuple) -> None:
    n = len(path)
    for table in (doc.values, doc.keys):
        for sub in [p for p in table if p[:n] == path]:
            del table[sub]


def _copy_positions(source: Document, target: Document, path: tuple) -> None:
    n = len(path)
    for src, dst in ((source.values, target.values), (source.keys, target.keys)):
        dst.update({p: pos for p, pos in src.items() if p[:n] == path})


def _apply_override(doc: Document, override: str) -> None:
    origin = f"--set {cut(override, MAX_OVERRIDE_ECHO)}"
    key, sep, text = override.partition("=")
    key = key.strip()
    if not sep or not OVERRIDE_KEY.match(key):
        raise SpecError(
            [Problem(Pos(origin), "", "expected --set dotted.key=value (value in YAML, e.g. eval.n_episodes=5)")]
        )
    path = tuple(key.split("."))
    if len(path) > MAX_DEPTH:
        raise SpecError([Problem(Pos(origin), "", f"the key has {len(path)} parts; a spec is at most {MAX_DEPTH} "
                                                  "levels deep")])
    try:
        value_doc = load(origin, text, root=path)
    except SpecError as exc:  # positions inside a one-line value add nothing to `--set key=value`
        raise SpecError([Problem(Pos(origin), p.path or key, p.message, p.hint) for p in exc.problems]) from None
    node = doc.data
    if not isinstance(node, dict):
        return  # the schema reports that the spec is not a mapping
    for i, part in enumerate(path[:-1]):
        if part not in node:
            node[part] = {}
            doc.values[path[: i + 1]] = doc.keys[path[: i + 1]] = Pos(origin)
        node = node[part]
        if not isinstance(node, dict):
            where = dotted(path[: i + 1])
            raise SpecError(
                [
                    Problem(
                        Pos(origin),
                        where,
                        f"is a {schema.type_name(node)}, not a mapping, so --set cannot "
                        f"set {key} inside it; set {where} itself",
                    )
                ]
            )
    _forget(doc, path)
    node[path[-1]] = value_doc.data
    doc.keys[path] = Pos(origin)
    doc.values.update({p: Pos(origin) for p in value_doc.values})
    doc.values.setdefault(path, Pos(origin))


def _validate(doc: Document, source: Path | None, problems: Sequence[Problem] = (), *,
              check_ci_set: bool = True) -> dict[str, Any]:
    problems = [*problems, *schema.check(doc)]
    if not isinstance(doc.data, dict):
        raise SpecError(problems)
    data = schema.with_defaults(doc.data)
    problems += semantic.check(data, doc, source, skip=schema.sections(problems))
    if not problems and check_ci_set:
        problems = _check_ci_set(data, doc, source)
    if problems:
        raise SpecError(sorted(problems, key=lambda p: (p.pos, p.path)))
    return data


def _check_ci_set(data: dict[str, Any], doc: Document, source: Path | None) -> list[Problem]:
    """The `ci.set` overrides, applied together as CI applies them, must leave a valid spec. A problem
    is reported at the override it is about, or at `ci.set` when it follows from several."""
    overrides = data["ci"]["set"]
    problems = []
    trial = Document(copy.deepcopy(doc.data), dict(doc.values), dict(doc.keys), origin=doc.origin)
    trial.data.get("ci", {}).pop("set", None)
    for key, value in overrides.items():
        path = tuple(key.split("."))
        node = trial.data
        for part in path[:-1]:
            node = node.setdefault(part, {}) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            problems.append(
                Problem(
                    doc.key_pos(("ci", "set", key)),
                    dotted(("ci", "set", key)),
                    f"{dotted(path[:-1])} is not a mapping, so {key} cannot be set",
                )
            )
            continue
        node[path[-1]] = value
    if problems:
        return problems
    found = schema.check(trial)
    found += semantic.check(schema.with_defaults(trial.data), trial, source, skip=schema.sections(found))
    for problem in found:
        key = next((k for k in overrides if problem.path == k or problem.path.startswith((f"{k}.", f"{k}["))), None)
        path = ("ci", "set", key) if key is not None else ("ci", "set")
        problems.append(
            Problem(
                doc.key_pos(path),
                dotted(path),
                f"with the CI overrides applied, {problem.path}: {problem.message}",
                problem.hint,
            )
        )
    return problems
