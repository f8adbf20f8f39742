"""runner.text: untrusted text echoed in messages is one readable line, with nothing hidden."""

from __future__ import annotations

import pytest

from runner.spec.textrules import hidden_char_problem, workflow_text_problem
from runner.text import cut, escape, has_hidden, visible


@pytest.mark.parametrize("raw, shown", [
    ("plain", "plain"),
    ("ünïcödé and 中文", "ünïcödé and 中文"),  # visible letters stay as they are
    ("a\nb", "a\\nb"),
    ("tab\there", "tab\\there"),
    ("\x1b[31mred", "\\x1b[31mred"),
    ("line\u2028sep", "line\\u2028sep"),
    ("bidi\u202eoverride\u2066", "bidi\\u202eoverride\\u2066"),
    ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
    ("nul\x00", "nul\\x00"),
    ("c1\x85", "c1\\x85"),
])
def test_escape_writes_every_hidden_character_as_an_escape(raw: str, shown: str) -> None:
    assert escape(raw) == shown
    assert has_hidden(shown) is None
    assert (has_hidden(raw) is None) == (raw == shown)


def test_escape_can_keep_line_breaks() -> None:
    assert escape("a\nb\u202e", keep_newlines=True) == "a\nb\\u202e"


def test_visible_cuts_long_values() -> None:
    assert visible("x" * 1000) == "x" * 77 + "..."
    assert visible("x" * 80) == "x" * 80
    assert len(visible("\n" * 1000, 50)) == 50
    assert cut("abcdef", 5) == "ab..."


def test_spec_text_rules() -> None:
    assert hidden_char_problem("ok\ttab") is None
    assert "U+202E (RIGHT-TO-LEFT OVERRIDE)" in hidden_char_problem("a\u202eb")
    assert "U+001B" in hidden_char_problem("\x1b")
    assert workflow_text_problem("${{ github.token }}") and workflow_text_problem("$ {{ x }}") is None


@pytest.mark.parametrize("text, refused", [
    ("::set-env name=X::1", "'::set-env'"), ("echo ::add-mask::secret", "'::add-mask'"), ("\n::error::x", "'::error'"),
    ("ends\\", "ends with a backslash"), ("\\", "ends with a backslash"),
    ("std::vector", None), ("image:tag", None), ("a\\b", None), ("C:\\dir\\file", None),
])
def test_what_may_reach_a_workflow(text, refused):
    problem = workflow_text_problem(text)
    assert (problem is None) if refused is None else (refused in problem)
