"""The benchmark schema's file (schema/benchmark.schema.json), read without jsonschema, and the limits it sets: one
source for the bounds that code checks too (e.g. a batch size given on the command line, or by a client of
`runner serve`)."""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

SCHEMA_FILE = "benchmark.schema.json"


def schema_path() -> Path:
    """schema/ at the repo root in a checkout; the copy packaged inside `runner` otherwise."""
    repo = Path(__file__).resolve().parents[2] / "schema" / SCHEMA_FILE
    if repo.is_file():
        return repo
    return Path(str(resources.files("runner") / "_schema" / SCHEMA_FILE))


@functools.cache
def schema() -> dict[str, Any]:
    return json.loads(schema_path().read_text(encoding="utf-8"))


def maximum(section: str, key: str) -> int:
    """The schema's `maximum` of `<section>.<key>` (e.g. "eval", "batch_size")."""
    return int(schema()["$defs"][section]["properties"][key]["maximum"])


MAX_BATCH_SIZE = maximum("eval", "batch_size")

__all__ = ["MAX_BATCH_SIZE", "SCHEMA_FILE", "maximum", "schema", "schema_path"]
