"""Safe YAML loading that keeps the position of every key and value.

YAML 1.2 core schema: only `true`/`false` are booleans (`on`, `no`, `yes` stay strings), integers are
decimal or 0x-hex (no octal `010`, no sexagesimal `1:30`, no `1_000`), no timestamps, no custom tags.
Duplicate keys and merge keys (`<<`) are rejected; aliases are expanded with a budget (alias bombs fail
fast); size and depth are limited. Every problem found while converting is reported, not just the first.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runner.spec.problems import Pos, Problem, SpecError, dotted
from runner.text import visible

MAX_BYTES = 1 << 20  # specs are a few KiB; anything bigger is a mistake
MAX_NODES = 20_000  # after alias expansion
MAX_DEPTH = 50

_BOOL, _INT, _FLOAT, _NULL = (f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float", "null"))
_STR, _SEQ, _MAP = "tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"
_MERGE = "tag:yaml.org,2002:merge"
_SCALAR_TAGS = {_BOOL, _INT, _FLOAT, _NULL, _STR, _MERGE}


class _Loader(yaml.SafeLoader):
    """SafeLoader resolving plain scalars by the YAML 1.2 core schema."""


_Loader.yaml_implicit_resolvers = {}
for _tag, _regexp, _first in (
    (_BOOL, r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    (_NULL, r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    (_INT, r"^(?:[-+]?[0-9]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        _FLOAT,
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+.0123456789",
    ),
    (_MERGE, r"^(?:<<)$", "<"),
):
    _Loader.add_implicit_resolver(_tag, re.compile(_regexp), list(_first))


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    return int(text, 16) if text.startswith("0x") else int(text, 10)


_Loader.add_constructor(_INT, _construct_int)


@dataclass
class Document:
    """Plain data (dicts, lists, scalars) plus the position of every value and key."""

    data: Any
    values: dict[tuple, Pos] = field(default_factory=dict)
    keys: dict[tuple, Pos] = field(default_factory=dict)
    origin: str = "?"

    def pos(self, path: tuple) -> Pos:
        """Position of the value at `path`, or of its nearest written ancestor."""
        path = tuple(path)
        while path and path not in self.values:
            path = path[:-1]
        return self.values.get(path, Pos(self.origin, 1, 1))

    def key_pos(self, path: tuple) -> Pos:
        """Position of the key that names `path` (the value's position for list items and the root)."""
        return self.keys.get(tuple(path)) or self.pos(path)


def _mark(origin: str, mark: yaml.Mark | None) -> Pos:
    if mark is None:
        return Pos(origin, 1, 1)
    return Pos(origin, mark.line + 1, mark.column + 1)


def _offset_pos(origin: str, text: bytes | str, offset: int) -> Pos:
    newline = b"\n" if isinstance(text, bytes) else "\n"
    before = text[:offset]
    line = before.count(newline) + 1
    col = offset - (before.rfind(newline) + 1) + 1
    return Pos(origin, line, col)


def fail(pos: Pos, path: tuple | str, message: str) -> SpecError:
    return SpecError([Problem(pos, path if isinstance(path, str) else dotted(path), message)])


SPECIAL = "is a special file (a FIFO, socket or device)"


def read_bytes(path: Path, origin: str) -> bytes:
    """A spec file's bytes, reading at most one byte past the size limit."""
    try:
        if path.is_dir():
            raise fail(Pos(origin), "", "is a directory; name a spec file (e.g. specs/metaworld.yaml)")
        if path.exists() and not path.is_file():  # opening a FIFO would wait for a writer
            raise fail(Pos(origin), "", f"{SPECIAL}, not a spec file")
        with path.open("rb") as stream:
            raw = stream.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise fail(Pos(origin), "", "no such file") from None
    except OSError as exc:
        raise fail(Pos(origin), "", f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise fail(Pos(origin, 1, 1), "", f"file is larger than {MAX_BYTES} bytes; a spec is a few KiB of YAML")
    return raw


def decode(origin: str, raw: bytes) -> str:
    """Bytes -> text, rejecting huge, binary and non-UTF-8 input with a position."""
    if len(raw) > MAX_BYTES:
        raise fail(Pos(origin, 1, 1), "", f"file is larger than {MAX_BYTES} bytes; a spec is a few KiB of YAML")
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise fail(_offset_pos(origin, raw, nul), "", "binary data (NUL byte); a spec must be UTF-8 text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(
            _offset_pos(origin, raw, exc.start),
            "",
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8",
        ) from None


def load(origin: str, text: str, *, root: tuple = ()) -> Document:
    """Parse one YAML document into a `Document`; every failure is a `SpecError` with a position."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        raise fail(_mark(origin, exc.problem_mark or exc.context_mark), "", _syntax_message(exc)) from None
    except yaml.reader.ReaderError as exc:
        char = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
        raise fail(
            _offset_pos(origin, text, exc.position),
            "",
            f"control character {char} is not allowed in YAML; remove it or write it as an escape",
        ) from None
    except yaml.YAMLError as exc:
        raise fail(Pos(origin, 1, 1), "", f"YAML error: {exc}") from None
    except RecursionError:
        raise fail(Pos(origin, 1, 1), "", f"YAML nested too deeply (at most {MAX_DEPTH} levels)") from None
    doc = Document(None, origin=origin)
    if node is None:
        return doc
    converter = _Converter(origin, doc)
    doc.data = converter.convert(node, tuple(root), 0)
    if converter.problems:
        raise SpecError(converter.problems)
    return doc


def _syntax_message(exc: yaml.MarkedYAMLError) -> str:
    problem = exc.problem or "invalid YAML"
    if "expected a single document" in (exc.context or ""):
        return "YAML syntax error: a spec holds one YAML document; remove the `---` and what follows"
    if "'\\t'" in problem:
        return "YAML syntax error: tab character; YAML is indented with spaces only"
    if problem == "mapping values are not allowed here":
        return f"YAML syntax error: {problem} (check this line's indentation, or quote a value that contains ': ')"
    message = f"YAML syntax error: {problem}"
    if exc.context:
        started = ""
        if (
            exc.context_mark is not None
            and exc.problem_mark is not None
            and exc.context_mark.line != exc.problem_mark.line
        ):
            started = f" that started at line {exc.context_mark.line + 1}, column {exc.context_mark.column + 1}"
        message += f" ({exc.context}{started})"
    return message


class _Converter:
    """Nodes -> plain data, recording positions and collecting problems."""

    def __init__(self, origin: str, doc: Document):
        self.origin, self.doc = origin, doc
        self.problems: list[Problem] = []
        self.budget = MAX_NODES
        self.loader = _Loader("")

    def problem(self, mark: yaml.Mark, path: tuple, message: str) -> None:
        self.problems.append(Problem(_mark(self.origin, mark), dotted(path), message))

    def convert(self, node: yaml.Node, path: tuple, depth: int) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise fail(
                _mark(self.origin, node.start_mark),
                "",
                f"more than {MAX_NODES} values after expanding aliases (alias bomb?)",
            )
        if depth > MAX_DEPTH:
            raise fail(
                _mark(self.origin, node.start_mark), "", f"nested more than {MAX_DEPTH} levels deep (recursive alias?)"
            )
        self.doc.values.setdefault(path, _mark(self.origin, node.start_mark))
        if isinstance(node, yaml.MappingNode) and node.tag == _MAP:
            return self._mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode) and node.tag == _SEQ:
            return [self.convert(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        if not isinstance(node, yaml.ScalarNode) or node.tag not in _SCALAR_TAGS:
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            self.problem(node.start_mark, path, f"YAML tag {tag!r} is not allowed here; write a plain value")
            return None
        if node.tag == _MERGE:  # `<<` as a value, not as a key: just text
            return node.value
        try:
            value = self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, KeyError, TypeError):
            self.problem(node.start_mark, path, f"{visible(node.value)} is not a valid {node.tag.rsplit(':', 1)[-1]}")
            return None
        finally:
            self.loader.constructed_objects.clear()
        if isinstance(value, float) and value != value:
            self.problem(node.start_mark, path, "NaN is not allowed; write a number")
        elif isinstance(value, float) and value in (math.inf, -math.inf):
            # Not JSON: a spec must hash, print as JSON (`runner show`) and reach generated files unchanged.
            self.problem(node.start_mark, path, "infinity is not allowed; write a number (e.g. 1e9)")
        return value

    def _mapping(self, node: yaml.MappingNode, path: tuple, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                self.problem(
                    key_node.start_mark,
                    path + ("<<",),
                    "YAML merge keys (<<) are not supported; use `extends` or write the keys out",
                )
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.problem(key_node.start_mark, path, "keys must be plain strings, not a list or mapping")
                continue
            key = key_node.value
            if key in out:
                first = self.doc.keys[path + (key,)]
                self.problem(
                    key_node.start_mark, path + (key,), f"duplicate key (first at line {first.line}); remove one"
                )
                continue
            self.doc.keys[path + (key,)] = _mark(self.origin, key_node.start_mark)
            out[key] = self.convert(value_node, path + (key,), depth + 1)
        return out
