"""Quoting for the three places spec strings land: a shell, a Dockerfile, a workflow YAML scalar.

Every function either returns text that the target parser reads back as exactly the given value, or
raises `UnsafeValue`. None of them trusts the schema alone (defence in depth).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from runner.spec.textrules import workflow_text_problem, hidden_char_problem
from runner.text import visible

_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_PLAIN_YAML_VALUE = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
_DOCKER_ENV_VALUE = re.compile(r"^[A-Za-z0-9_./:,=@+-]*$")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class UnsafeValue(ValueError):
    """A spec string that cannot be rendered inert in the target file."""


def check_workflow_text(value: str) -> str:
    """`value` if it can sit anywhere in a workflow file: no hidden characters (runner.spec.textrules; a tab is
    allowed), one line, no `${{`, no workflow command, no trailing backslash."""
    problem = hidden_char_problem(value) or workflow_text_problem(value)
    if problem:
        raise UnsafeValue(f"{visible(repr(value))} {problem}")
    return value


def env_name(value: str) -> str:
    """An environment variable or secret name, usable bare in YAML keys, `${{ secrets.X }}` and shell."""
    if not isinstance(value, str) or not _ENV_NAME.match(value):
        raise UnsafeValue(f"{value!r} is not an environment variable name (A-Z, 0-9, _)")
    return value


def name(value: str) -> str:
    """A benchmark name, usable bare as a job id, image tag part and path part."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise UnsafeValue(f"{value!r} is not a benchmark name (a-z, 0-9, _; a letter first)")
    return value


def comment(value: str) -> str:
    """Text for the rest of a `#` comment line: one line, no hidden characters."""
    problem = hidden_char_problem(value)
    if problem or "\t" in value:
        raise UnsafeValue(f"{visible(repr(value))} {problem or 'contains a tab'}")
    return value


def cron(value: str) -> str:
    """A five-field cron line (digits and * / , - only), safe inside a quoted expression string."""
    if not re.match(r"^[0-9*/,-]+( [0-9*/,-]+){4}$", value):
        raise UnsafeValue(f"{value!r} is not a five-field cron line")
    return value


def image_ref(value: str) -> str:
    """A Docker image reference with an explicit tag or digest (what FROM takes literally)."""
    if not re.match(r"^[a-z0-9][a-z0-9._/-]*:[A-Za-z0-9][A-Za-z0-9._-]*(@sha256:[a-f0-9]{64})?$", value):
        raise UnsafeValue(f"{value!r} is not an image reference with a tag (name:tag[@sha256:...])")
    return value


def path_word(value: str) -> str:
    """A relative path that Dockerfile COPY and YAML take literally (letters, digits, _ . / -)."""
    if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$", value) or ".." in value.split("/"):
        raise UnsafeValue(f"{value!r} is not a plain relative path")
    return value


def sh(value: Any) -> str:
    """One shell word for a workflow `run:` that bash (and shellcheck) read as exactly `value`."""
    return _shell_word(check_workflow_text(str(value)))


def sh_join(argv: Iterable[Any]) -> str:
    return " ".join(sh(a) for a in argv)


def _shell_word(text: str) -> str:
    if _SHELL_SAFE.match(text):
        return text
    if not re.search(r"[$`']", text):
        return f"'{text}'"
    # Double quotes with \, ", $ and ` escaped: inert, and shellcheck does not flag `$` in single quotes.
    return '"' + re.sub(r'([\\"$`])', r"\\\1", text) + '"'


def dockerfile_run(argv: Iterable[Any]) -> str:
    """What follows `RUN` for a command given as argv.

    Exec form (a JSON array, no shell) when every word is a plain word. hadolint lints exec form as
    unquoted shell text, so a word with shell metacharacters would be misread; such commands are
    written in shell form with every word quoted, which bash reads back as exactly the same argv.
    """
    words = [str(a) for a in argv]
    if not words:
        raise UnsafeValue("an empty command")
    for word in words:
        problem = hidden_char_problem(word)
        if problem:
            raise UnsafeValue(f"{visible(repr(word))} {problem}")
    if all(_SHELL_SAFE.match(word) for word in words):
        return exec_form(words)
    return " ".join(_shell_word(word) for word in words)


def yaml_str(value: Any) -> str:
    """A double-quoted YAML scalar (JSON string syntax is a subset of it)."""
    return json.dumps(check_workflow_text(str(value)), ensure_ascii=True)


def exec_form(argv: Iterable[Any]) -> str:
    """A Dockerfile exec-form array: run without a shell, no variable expansion."""
    words = [str(a) for a in argv]
    if not words:
        raise UnsafeValue("an empty command")
    for word in words:
        if "\n" in word or "\r" in word:
            raise UnsafeValue(f"{word!r} contains a line break")
    return json.dumps(words, ensure_ascii=True)


def docker_env(value: str) -> str:
    """A Dockerfile ENV value in double quotes; characters Docker would expand or escape are refused."""
    if not _DOCKER_ENV_VALUE.match(value):
        raise UnsafeValue(f"{value!r} is not a plain environment value (letters, digits and _./:,=@+- only)")
    return f'"{value}"'


def set_value(value: Any, parse: Any) -> str:
    """YAML text for a `--set key=VALUE` override that `parse` (the spec loader's YAML) reads back as `value`."""
    if isinstance(value, str):
        text = value if _PLAIN_YAML_VALUE.match(value) else json.dumps(value, ensure_ascii=True)
        if parse(text) != value:
            text = json.dumps(value, ensure_ascii=True)
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        text = _yaml_float(value)
    else:
        text = json.dumps(value, ensure_ascii=True, sort_keys=False, separators=(", ", ": "))
    back = parse(text)
    if back != value or type(back) is not type(value):
        raise UnsafeValue(f"cannot write {value!r} as a --set value that reads back the same")
    return text


def _yaml_float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    if "." not in text:  # YAML 1.1 floats need a dot: 1e-05 -> 1.0e-05
        mantissa, _, exponent = text.partition("e")
        text = f"{mantissa}.0" + (f"e{exponent}" if exponent else "")
    return text
