"""The options of each env family (`env.kwargs`) and policy type (`policy.kwargs`), described from the same kwargs
schemas that check them: `runner list --options` prints them and docs/options.md is generated from them, so
neither can drift from what is checked."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from runner.adapters import KINDS, EnvFamily, PolicyType, descriptor, names

NO_DEFAULT = "—"


def kind_of(name: str) -> str:
    """"env" or "policy" for a registered name (a ConfigError with did-you-mean otherwise)."""
    if name in names("env"):
        return "env"
    if name in names("policy"):
        return "policy"
    import difflib

    from runner.errors import ConfigError

    known = [*names("env"), *names("policy")]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"{name!r} is neither an env family nor a policy type{hint} (known: {', '.join(known)})")


def type_text(prop: Mapping[str, Any]) -> str:
    """A property's type in words: "integer 8..4096", "one of: fast, full", "string or list"."""
    if "enum" in prop:
        return "one of: " + ", ".join(json.dumps(v) if not isinstance(v, str) else v for v in prop["enum"])
    if "oneOf" in prop:
        return " or ".join(type_text(p) for p in prop["oneOf"])
    kinds = prop.get("type", "any")
    text = " or ".join(kinds) if isinstance(kinds, list) else str(kinds)
    low = prop.get("minimum", prop.get("exclusiveMinimum"))
    high = prop.get("maximum")
    if low is not None or high is not None:
        text += f" {'' if low is None else low}..{'' if high is None else high}"
    if kinds == "array" and "items" in prop:
        text += f" of ({type_text(prop['items'])})"
    return text


def rows(item: EnvFamily | PolicyType) -> list[tuple[str, str, str, str]]:
    """(option, type, default, meaning) of each option its kwargs schema names."""
    out = []
    for name, prop in (item.kwargs_schema.get("properties") or {}).items():
        default = json.dumps(prop["default"]) if "default" in prop else NO_DEFAULT
        out.append((name, type_text(prop), default, str(prop.get("description", ""))))
    return out


def extra_note(item: EnvFamily | PolicyType) -> str:
    """What the table cannot show: whether other options are accepted."""
    extra = item.kwargs_schema.get("additionalProperties", True)
    if extra is False:
        return "no other options"
    if item.name == "gym":
        return "any other option is the env constructor's own (validate checks it against the env's signature)"
    return "other options are passed through unchecked"


def section(kind: str, name: str) -> tuple[str, list[tuple[str, str, str, str]], str]:
    item = descriptor(kind, name)
    key = "env.kwargs" if kind == "env" else "policy.kwargs"
    return f"{name} ({key})", rows(item), extra_note(item)


def text(kind: str, name: str) -> str:
    title, table, note = section(kind, name)
    lines = [title]
    for option, kind_text, default, meaning in table:
        lines.append(f"  {option:<20} {kind_text}; default {default}")
        if meaning:
            lines.append(f"  {'':<20} {meaning}")
    lines.append(f"  ({note})" if table or note != "no other options" else "  (no options)")
    return "\n".join(lines)


def markdown(kind: str, name: str) -> str:
    title, table, note = section(kind, name)
    lines = [f"### `{name}` (`{'env' if kind == 'env' else 'policy'}.kwargs`)", ""]
    if table:
        lines += ["| option | type | default | meaning |", "|---|---|---|---|"]
        lines += [f"| `{o}` | {t.replace('|', '/')} | `{d}` | {m.replace('|', '/')} |" for o, t, d, m in table]
        lines.append("")
    lines.append(f"{note[0].upper()}{note[1:]}.")
    return "\n".join(lines)


def document() -> str:
    """docs/options.md: the options of every built-in env family and policy type (a plugin documents its own)."""
    parts = ["# Options of env families and policy types", "",
             "Generated from the kwargs schemas that check them (each section is what `runner list --options NAME "
             "--format markdown` prints); "
             "`tests/test_options.py` fails when this file differs. A spec sets them under `env.kwargs` / "
             "`policy.kwargs`, or `--set env.kwargs.NAME=VALUE`.", "", "## Env families", ""]
    parts += [markdown("env", n) + "\n" for n in KINDS["env"][1]]
    parts += ["## Policy types", ""]
    parts += [markdown("policy", n) + "\n" for n in KINDS["policy"][1]]
    return "\n".join(parts).rstrip() + "\n"


__all__ = ["document", "kind_of", "markdown", "rows", "text", "type_text"]
