"""Where each value of a resolved spec comes from: the spec itself, a partial it extends, a `--set`, or a default.
`runner show --origins` prints the spec as YAML with that as a comment on every value that is not the spec's own."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from runner.spec.yamlload import Document
from runner.text import escape

PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
COMMENT_COLUMN = 56  # comments line up here (or one space after a longer line)
DEFAULT = "default"


def origin(doc: Document, path: tuple) -> str | None:
    """The file (`file:line`), `--set ...` or "default" that `path` comes from; None: the spec file itself."""
    pos = doc.values.get(tuple(path))
    if pos is None:
        return DEFAULT
    if pos.file == doc.origin:
        return None
    return f"{pos.file}:{pos.line}" if pos.line else pos.file


def annotated(data: Mapping[str, Any], doc: Document) -> str:
    """`data` (the resolved spec, defaults filled in) as YAML, each value that is not the spec file's own followed
    by `# <origin>`. Scalars, lists and empty mappings are written in flow style (JSON, which YAML reads), one per
    line, so that every line has one origin."""
    lines: list[str] = []
    _mapping(data, doc, (), 0, lines)
    return "\n".join(lines)


def _mapping(data: Mapping[str, Any], doc: Document, path: tuple, indent: int, lines: list[str]) -> None:
    for key, value in data.items():
        here = (*path, key)
        name = key if PLAIN_KEY.match(str(key)) else json.dumps(str(key))
        head = " " * indent + f"{name}:"
        if isinstance(value, Mapping) and value:
            lines.append(head)  # a section: its values say where each comes from
            _mapping(value, doc, here, indent + 2, lines)
        else:
            lines.append(_with_comment(f"{head} {_flow(value)}", origin(doc, here)))


def _flow(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def _with_comment(line: str, where: str | None) -> str:
    if where is None:
        return line
    return f"{line:<{COMMENT_COLUMN}} # {escape(where)}" if len(line) < COMMENT_COLUMN else f"{line} # {escape(where)}"


__all__ = ["DEFAULT", "annotated", "origin"]
