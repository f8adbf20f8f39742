"""JSON Schema validation with positions and hints, and filling in the schema's defaults."""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from runner.spec.problems import Problem, did_you_mean, dotted
from runner.spec.yamlload import Document

SCHEMA_FILE = "benchmark.schema.json"


def _schema_path() -> Path:
    """schema/ at the repo root in a checkout; the copy packaged inside `runner` otherwise."""
    repo = Path(__file__).resolve().parents[2] / "schema" / SCHEMA_FILE
    if repo.is_file():
        return repo
    return Path(str(resources.files("runner") / "_schema" / SCHEMA_FILE))


@functools.cache
def schema() -> dict[str, Any]:
    return json.loads(_schema_path().read_text(encoding="utf-8"))


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(schema())
    return jsonschema.Draft202012Validator(schema())


def resolve_ref(node: dict[str, Any]) -> dict[str, Any]:
    """Follow a local `$ref` (only `#/$defs/...` is used)."""
    while "$ref" in node:
        name = node["$ref"].removeprefix("#/$defs/")
        node = schema()["$defs"][name]
    return node


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


def check(doc: Document) -> list[Problem]:
    """Every schema violation in the document, each at the position of the offending key or value."""
    if not isinstance(doc.data, dict):
        return [Problem(doc.pos(()), "", f"the top level must be a mapping of keys, not a {_type_name(doc.data)}")]
    problems: list[Problem] = []
    for error in _validator().iter_errors(doc.data):
        problems.extend(_explain(error, doc))
    return problems


def _explain(error: jsonschema.ValidationError, doc: Document) -> list[Problem]:
    path = tuple(error.absolute_path)
    where = dotted(path)
    kind, sch, inst = error.validator, error.schema, error.instance
    if "propertyNames" in error.schema_path and isinstance(inst, str):
        rule = f"must match {error.validator_value}" if kind == "pattern" else error.message
        return [Problem(doc.key_pos(path + (inst,)), dotted(path + (inst,)), f"key {inst!r} is not allowed here ({rule})")]
    if kind == "additionalProperties" and isinstance(inst, dict):
        allowed = list(sch.get("properties", {}))
        return [
            Problem(doc.key_pos(path + (key,)), dotted(path + (key,)), "unknown key", did_you_mean(key, allowed))
            for key in inst
            if key not in allowed
        ]
    if kind == "required":
        missing = [k for k in error.validator_value if k not in inst]
        return [Problem(doc.pos(path), where, f"missing required key {k!r}") for k in missing]
    if kind == "enum":
        choices = ", ".join(map(str, error.validator_value))
        hint = did_you_mean(inst, error.validator_value) if isinstance(inst, str) else None
        return [Problem(doc.pos(path), where, f"{inst!r} is not one of: {choices}", hint)]
    if kind == "type":
        wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        wanted = " or ".join("list" if w == "array" else "mapping" if w == "object" else w for w in wanted)
        return [Problem(doc.pos(path), where, f"expected {wanted}, got {_type_name(inst)} {_short(inst)}")]
    if kind == "pattern":
        return [Problem(doc.pos(path), where, f"{_short(inst)} is not allowed here (must match {error.validator_value})")]
    if kind == "oneOf":
        return [Problem(doc.pos(path), where, f"{_short(inst)} is not valid: {sch.get('description', 'no alternative matches')}")]
    if kind == "uniqueItems":
        return [Problem(doc.pos(path), where, "items must be unique")]
    return [Problem(doc.pos(path), where, error.message)]


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def with_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of schema-valid data with every missing optional key set to the schema default."""
    out = copy.deepcopy(data)
    _fill(out, schema())
    return out


def _fill(value: Any, node: dict[str, Any]) -> None:
    node = resolve_ref(node)
    if isinstance(value, dict) and "properties" in node:
        for key, sub in node["properties"].items():
            sub_resolved = resolve_ref(sub)
            default = sub.get("default", sub_resolved.get("default", _MISSING))
            if key not in value and default is not _MISSING:
                value[key] = copy.deepcopy(default)
            if key in value:
                _fill(value[key], sub_resolved)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for item in value:
            _fill(item, node["items"])


_MISSING = object()
