"""Echoing untrusted text (spec values, paths, file contents) in messages: nothing invisible, nothing endless.

A spec, a results file or a path may hold characters a terminal does not show as they are: control
characters (ESC starts terminal escape sequences), line breaks (a newline would split a one-line
`file:line:col: ...` message), bidi overrides and zero-width characters (text that reads differently
from what it is). `visible()` writes each of them as an escape and cuts long values.
"""

from __future__ import annotations

import unicodedata

MAX_ECHO = 80  # characters of an echoed value
_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))  # control, format, surrogate, private, unassigned,
# line and paragraph separators
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def with_article(word: str) -> str:
    """`word` with its indefinite article: "a string", "an integer", "an object"."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def is_hidden(char: str) -> bool:
    """Whether a terminal would not show `char` as itself (see the module docstring)."""
    return unicodedata.category(char) in _HIDDEN


def escape(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every hidden character written as `\\n`, `\\x1b`, `\\u202e`, ... (a backslash stays as it is)."""
    out = []
    for char in text:
        if (char == "\n" and keep_newlines) or not is_hidden(char):
            out.append(char)
        elif char in _NAMED:
            out.append(_NAMED[char])
        else:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def cut(text: str, limit: int = MAX_ECHO) -> str:
    """`text`, or its first characters and `...` when it is longer than `limit`."""
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def visible(value: object, limit: int = MAX_ECHO) -> str:
    """`value` as one line a person can read and trust: hidden characters escaped, cut to `limit` characters."""
    return cut(escape(str(value)), limit)


def one_line(value: object, limit: int = MAX_ECHO) -> str:
    """`value` as one line for a message: each run of whitespace (line breaks too) one space, then `visible`."""
    return visible(" ".join(str(value).split()), limit)


def has_hidden(text: str) -> str | None:
    """The first hidden character of `text`, or None."""
    return next((c for c in text if is_hidden(c)), None)


__all__ = ["MAX_ECHO", "cut", "escape", "has_hidden", "is_hidden", "one_line", "visible", "with_article"]
