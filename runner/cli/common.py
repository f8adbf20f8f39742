"""Options shared by the subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runner.errors import ConfigError


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples in descriptions as written."""


def add_set_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec value, e.g. --set eval.n_episodes=5 (value parsed as YAML; repeatable)",
    )


def spec_paths(given: list[str]) -> list[Path]:
    """The specs named on the command line, or specs/*.yaml (without partials)."""
    from runner.spec import default_spec_paths

    if given:
        return [Path(p) for p in given]
    found = default_spec_paths(Path("."))
    if not found:
        raise ConfigError(
            "no specs given and none found in ./specs/*.yaml (run from the repository root or name a spec)"
        )
    return found


def output_dir_arg(text: str) -> Path:
    """An --output-dir value: a non-empty path (an empty one would mean the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a directory")
    return Path(text)


def say(message: str = "") -> None:
    print(message, file=sys.stdout, flush=True)


def unknown_arguments(command: argparse.ArgumentParser, extra: list[str]) -> str:
    """argparse's "unrecognized arguments" with a did-you-mean: one of the command's options, or a spec key to
    give with --set (`--episodes 5`, LeRobot's `--eval.n_episodes=5`: `--set eval.n_episodes=5`)."""
    import difflib

    text = f"unrecognized arguments: {' '.join(extra)}"
    first = next((e for e in extra if e.startswith("-")), None)
    if first is None:
        return text
    word, _, value = first.lstrip("-").partition("=")
    following = extra[extra.index(first) + 1:extra.index(first) + 2]
    value = value or (following[0] if following and not following[0].startswith("-") else "VALUE")
    options = {o.lstrip("-"): o for action in command._actions for o in action.option_strings}
    if any(o == "--set" for o in options.values()):
        keys = spec_keys()
        if word in keys.values():  # LeRobot's --env.task=... spelling of a spec key
            return f"{text}; spec keys go with --set: --set {word}={value}"
        keys.update({"policy": "policy.type", "env": "env.type"})  # `--policy random`: the section's type
        for leaf, dotted in keys.items():  # the command's own options first (`--sett x`: --set, not ci.set)
            options.setdefault(leaf, f"--set {dotted}={value}")
    close = difflib.get_close_matches(word.replace("-", "_"), [k.replace("-", "_") for k in options], n=1, cutoff=0.6)
    if not close:
        return text
    suggestion = next(v for k, v in options.items() if k.replace("-", "_") == close[0])
    takes_value = any(suggestion in a.option_strings and a.nargs != 0 for a in command._actions)
    if takes_value and value != "VALUE":
        suggestion = f"{suggestion} {value}"
    return f"{text}; did you mean {suggestion}?"


def spec_keys() -> dict[str, str]:
    """Leaf name -> dotted key of every scalar setting of a spec section (eval.n_episodes, env.task, ...)."""
    from runner.spec.limits import schema

    found: dict[str, str] = {}
    defs = schema()["$defs"]
    for section in ("eval", "env", "policy", "install", "ci"):
        for key in (defs.get(section) or {}).get("properties") or {}:
            found.setdefault(key, f"{section}.{key}")
    return found

