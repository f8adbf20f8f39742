"""The documented layouts of runner's outputs (schema/*.schema.json, Draft 2020-12) and checks against them.

- episode.schema.json:   one line of episodes.jsonl
- eval_info.schema.json: eval_info.json
- metrics.schema.json:   metrics.json
- run.schema.json:       run.json
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

EPISODE = "episode.schema.json"
EVAL_INFO = "eval_info.schema.json"
METRICS = "metrics.schema.json"
RUN = "run.schema.json"


def schema_path(name: str) -> Path:
    """schema/ at the repo root in a checkout; the copy packaged inside `runner` otherwise."""
    repo = Path(__file__).resolve().parents[2] / "schema" / name
    if repo.is_file():
        return repo
    return Path(str(resources.files("runner") / "_schema" / name))


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    return json.loads(schema_path(name).read_text(encoding="utf-8"))


@functools.cache
def _validator(name: str) -> Any:
    import jsonschema  # only needed to validate

    return jsonschema.Draft202012Validator(load_schema(name))  # tests check the committed schemas


def schema_problems(data: Any, name: str, where: str) -> list[str]:
    """Readable problems of `data` against schema `name`: '<where>: <json path>: <message>'."""
    problems = []
    for err in sorted(_validator(name).iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path) or "(top)"
        problems.append(f"{where}: {path.lstrip('.')}: {err.message}")
    return problems


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def strict_loads(text: str) -> Any:
    """json.loads that refuses NaN, Infinity and -Infinity (not JSON)."""
    return json.loads(text, parse_constant=_reject_constant)


def read_json_limited(path: Path, limit: int) -> Any:
    """The strict JSON (strict_loads) of a file of at most `limit` bytes: OSError as reading raises it, ValueError
    (UnicodeDecodeError included) or RecursionError for a larger file or anything but strict JSON."""
    with Path(path).open("rb") as f:
        raw = f.read(limit + 1)
    if len(raw) > limit:
        raise ValueError(f"larger than {limit >> 20} MiB")
    return strict_loads(raw.decode("utf-8"))

