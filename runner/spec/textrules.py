"""What text a spec may hold, shared by `runner validate` (runner.spec.semantic) and the generators
(runner.generate.quoting), so that validate refuses everything gen-ci would refuse.

- No hidden characters anywhere, keys included (control characters such as ESC, line and paragraph
  separators, bidi controls, zero-width characters; a tab is allowed): a spec is code (it names Python code
  to import and shell commands for CI), and text that reads differently from what it is has no place in it.
- What reaches a workflow (`install`, `ci`, `description`) holds no `${{` (GitHub Actions would evaluate it), no
  workflow command such as `::set-env` or `::add-mask` (a runner acts on one when a step prints it), and does not
  end with a backslash (in the generated script it reads as an escaped quote: shellcheck SC1003).
"""

from __future__ import annotations

import re
import unicodedata

from runner.text import is_hidden

EXPRESSION = "${{"
WORKFLOW_SECTIONS = ("install", "ci", "description")  # top-level keys whose strings reach generated files


def hidden_char_problem(text: str) -> str | None:
    """Why `text` may not be in a spec because of a hidden character, or None."""
    char = next((c for c in text if c != "\t" and is_hidden(c)), None)
    if char is None:
        return None
    name = unicodedata.name(char, "a control character")
    return f"contains the hidden character U+{ord(char):04X} ({name}); remove it"


WORKFLOW_COMMAND = re.compile(r"(?:^|\s)::([A-Za-z][A-Za-z-]*)")


def workflow_text_problem(text: str) -> str | None:
    """Why `text` may not reach a workflow (`${{`, a workflow command, a trailing backslash), or None."""
    if EXPRESSION in text:
        return f"contains {EXPRESSION!r}, which GitHub Actions would evaluate as an expression; remove it"
    command = WORKFLOW_COMMAND.search(text)
    if command:
        return (f"contains the workflow command '::{command.group(1)}', which a GitHub runner acts on when a step "
                "prints it; remove it")
    if text.endswith("\\"):
        return "ends with a backslash, which the generated shell script would read as escaping its quote; remove it"
    return None


__all__ = ["EXPRESSION", "WORKFLOW_COMMAND", "WORKFLOW_SECTIONS", "hidden_char_problem", "workflow_text_problem"]
