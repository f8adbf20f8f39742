"""A policy server's metadata (anyone's data) as bounded JSON, kept in run.json's policy provenance as
`server_metadata` (schema/run.schema.json's "metadata" states the same bounds)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_DEPTH, MAX_ITEMS, MAX_TEXT, MAX_KEY = 6, 200, 2000, 200
MORE = "…"


def json_safe(value: Any, *, depth: int = MAX_DEPTH, items: int = MAX_ITEMS, text: int = MAX_TEXT) -> Any:
    """Data from anyone (a policy server's metadata) as bounded JSON for run.json: maps and lists at most `depth`
    deep and `items` entries in all (the rest counted under "…", or as "… N entries"), strings cut at `text`
    characters, keys as strings, arrays as {"dtype", "shape"}, bytes as {"bytes": size}, NaN and infinities as
    strings, anything else by its type's name."""
    return _safe(value, depth, [items], text)


def _safe(value: Any, depth: int, budget: list[int], text: int) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value[:text] if isinstance(value, str) else value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bytes": len(value)}
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if isinstance(shape, tuple) and dtype is not None:  # a NumPy array or scalar
        if shape == () and hasattr(value, "item"):
            try:
                return _safe(value.item(), depth, budget, text)
            except (TypeError, ValueError):
                pass
        return {"dtype": str(dtype)[:100], "shape": [int(n) for n in shape[:32]]}
    if isinstance(value, (Mapping, list, tuple)):
        size = len(value)
        if size and (depth <= 0 or budget[0] <= 0):
            return f"{MORE} {size} entries"
        room = budget[0] if size <= budget[0] else budget[0] - 1  # the marker of the rest takes an entry too
        entries = list(value.items())[:room] if isinstance(value, Mapping) else list(enumerate(value[:room]))
        left = size - len(entries)
        budget[0] -= len(entries) + (1 if left else 0)
        if isinstance(value, Mapping):
            out: Any = {_key(k): _safe(v, depth - 1, budget, text) for k, v in entries}
            if left:
                out[MORE] = f"{left} more"
        else:
            out = [_safe(v, depth - 1, budget, text) for _, v in entries] + ([f"{MORE} {left} more"] if left else [])
        return out
    return f"<{type(value).__name__[:100]}>"


def _key(key: Any) -> str:
    if isinstance(key, (bytes, bytearray)):
        key = bytes(key).decode("utf-8", errors="replace")
    return (key if isinstance(key, str) else str(key))[:MAX_KEY]


__all__ = ["MAX_DEPTH", "MAX_ITEMS", "MAX_KEY", "MAX_TEXT", "json_safe"]
