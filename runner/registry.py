"""Registries of adapters by name (`env.type`, `policy.type`): a name maps to a module imported on demand."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from types import ModuleType

from runner.errors import ConfigError


def import_registered(kind: str, name: str, registry: Mapping[str, str]) -> tuple[ModuleType, str]:
    """The module registered for `name` ("module" or "module:attribute") and the attribute part ("" if none).

    ConfigError for a name not in `registry` (with a did-you-mean hint), or for a registered module this
    installation lacks; any other import failure propagates as it is."""
    target = registry.get(name)
    if target is None:
        close = difflib.get_close_matches(name, list(registry), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown {kind} type {name!r}{hint} (known: {', '.join(registry)})")
    module_name, _, attribute = target.partition(":")
    try:
        return importlib.import_module(module_name), attribute
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise ConfigError(f"{kind} type {name!r} has no adapter in this installation "
                          f"({module_name} is missing)") from None
