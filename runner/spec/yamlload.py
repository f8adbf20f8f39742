"""Safe YAML loading that keeps the position of every key and value.

YAML 1.2 booleans only (`on`, `no`, `yes` stay strings), no timestamps, duplicate keys rejected,
aliases expanded with a budget (alias bombs fail fast), size and depth limits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from runner.spec.problems import Pos, Problem, SpecError, dotted

MAX_BYTES = 1 << 20  # specs are small; anything bigger is a mistake
MAX_NODES = 20_000  # after alias expansion
MAX_DEPTH = 50


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema booleans and no timestamps."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


@dataclass
class Document:
    """Plain data (dicts, lists, scalars) plus the position of every value and key."""

    data: Any
    values: dict[tuple, Pos] = field(default_factory=dict)
    keys: dict[tuple, Pos] = field(default_factory=dict)

    def pos(self, path: tuple) -> Pos:
        """Position of the value at `path`, or of its nearest written ancestor."""
        path = tuple(path)
        while path and path not in self.values:
            path = path[:-1]
        return self.values.get(path, Pos(next(iter(self.values.values())).file if self.values else "?", 1, 1))

    def key_pos(self, path: tuple) -> Pos:
        return self.keys.get(tuple(path)) or self.pos(path)


def _mark(origin: str, mark: yaml.Mark | None) -> Pos:
    if mark is None:
        return Pos(origin, 1, 1)
    return Pos(origin, mark.line + 1, mark.column + 1)


def _offset_pos(origin: str, raw: bytes, offset: int) -> Pos:
    before = raw[:offset]
    line = before.count(b"\n") + 1
    col = offset - (before.rfind(b"\n") + 1) + 1
    return Pos(origin, line, col)


def decode(origin: str, raw: bytes) -> str:
    """Bytes -> text, rejecting huge, binary and non-UTF-8 input with a position."""
    if len(raw) > MAX_BYTES:
        raise SpecError([Problem(Pos(origin, 1, 1), "", f"file is {len(raw)} bytes; a spec may be at most {MAX_BYTES}")])
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise SpecError([Problem(_offset_pos(origin, raw, nul), "", "binary data (NUL byte); a spec must be UTF-8 text")])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            [Problem(_offset_pos(origin, raw, exc.start), "", f"not UTF-8 text (byte 0x{raw[exc.start]:02x})")]
        ) from None


def load(origin: str, text: str, *, root: tuple = ()) -> Document:
    """Parse one YAML document into a `Document`; every failure is a `SpecError` with a position."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.problem:
            message = f"{exc.problem} ({exc.context})"
        raise SpecError([Problem(_mark(origin, mark), "", f"YAML syntax error: {message}")]) from None
    except yaml.YAMLError as exc:  # e.g. several documents in one stream
        raise SpecError([Problem(Pos(origin, 1, 1), "", f"YAML error: {exc}")]) from None
    except RecursionError:
        raise SpecError([Problem(Pos(origin, 1, 1), "", "YAML nested too deeply")]) from None
    doc = Document(None)
    if node is None:
        return doc
    budget = [MAX_NODES]
    doc.data = _convert(origin, node, root, doc, budget, 0)
    return doc


def _convert(origin: str, node: yaml.Node, path: tuple, doc: Document, budget: list, depth: int) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise SpecError([Problem(_mark(origin, node.start_mark), "", f"more than {MAX_NODES} values after expanding aliases (alias bomb?)")])
    if depth > MAX_DEPTH:
        raise SpecError([Problem(_mark(origin, node.start_mark), "", f"nested more than {MAX_DEPTH} levels deep")])
    doc.values.setdefault(path, _mark(origin, node.start_mark))
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise SpecError([Problem(_mark(origin, key_node.start_mark), dotted(path), "keys must be plain strings")])
            key = key_node.value
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise SpecError([Problem(_mark(origin, key_node.start_mark), dotted(path), "YAML merge keys (<<) are not supported; use `extends`")])
            if key in out:
                first = doc.keys[path + (key,)]
                raise SpecError(
                    [Problem(_mark(origin, key_node.start_mark), dotted(path + (key,)), f"duplicate key (first at line {first.line})")]
                )
            doc.keys[path + (key,)] = _mark(origin, key_node.start_mark)
            out[key] = _convert(origin, value_node, path + (key,), doc, budget, depth + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(origin, item, path + (i,), doc, budget, depth + 1) for i, item in enumerate(node.value)]
    try:
        value = _Loader("").construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        raise SpecError([Problem(_mark(origin, node.start_mark), dotted(path), f"bad value: {exc}")]) from None
    if isinstance(value, float) and value != value:  # .nan
        raise SpecError([Problem(_mark(origin, node.start_mark), dotted(path), "NaN is not allowed")])
    if isinstance(value, bytes):
        raise SpecError([Problem(_mark(origin, node.start_mark), dotted(path), "binary values are not allowed")])
    return value

