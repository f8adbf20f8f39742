"""What text a spec may hold, shared by `runner validate` (runner.spec.semantic) and the generators
(runner.generate.quoting), so that validate refuses everything gen-ci would refuse.

- No hidden characters anywhere, keys included (control characters such as ESC, line and paragraph
  separators, bidi controls, zero-width characters; a tab is allowed): a spec is code (it names Python code
  to import and shell commands for CI), and text that reads differently from what it is has no place in it.
- No `${{` in what reaches a workflow (`install`, `ci`, `description`): GitHub Actions would evaluate it.
"""

from __future__ import annotations

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


def expression_problem(text: str) -> str | None:
    """Why `text` may not reach a workflow because of `${{`, or None."""
    if EXPRESSION in text:
        return f"contains {EXPRESSION!r}, which GitHub Actions would evaluate as an expression; remove it"
    return None


__all__ = ["EXPRESSION", "WORKFLOW_SECTIONS", "expression_problem", "hidden_char_problem"]
