"""A KeyboardInterrupt is never lost: CPython swallows an exception raised in a `__del__`, a weakref callback or
another finalizer (it prints "Exception ignored in" and a traceback, and the code goes on). Inside
`redelivered()`, such an interrupt is delivered again to the main thread instead.

Only the standard library is imported here: runner.cli.main uses it before anything else is loaded.
"""

from __future__ import annotations

import _thread
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_finished: list[str] = []  # what an interrupt says once the work is complete (note_finished)


def interrupt_again(unraisable: Any) -> None:
    """A `sys.unraisablehook`: a swallowed KeyboardInterrupt is delivered again to the main thread, from another
    thread so that it lands after this hook (the SIGINT handler runs: KeyboardInterrupt, or a run's stop); anything
    else is shown as CPython shows it."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _thread.start_new_thread(_thread.interrupt_main, ())
    else:
        sys.__unraisablehook__(unraisable)


@contextmanager
def redelivered() -> Iterator[None]:
    """`interrupt_again` as the unraisable hook for the block; the previous hook is put back after it."""
    previous, sys.unraisablehook = sys.unraisablehook, interrupt_again
    try:
        yield
    finally:
        sys.unraisablehook = previous


def note_finished(message: str) -> None:
    """The work is complete (every output written): an interrupt from here to the exit says `message`, not a bare
    "interrupted" that would read as lost work."""
    _finished[:] = [message]


def finished() -> bool:
    """Whether note_finished was called since the command started."""
    return bool(_finished)


def interrupted_message() -> str:
    """What an interrupt that reaches runner.cli.main says."""
    return _finished[0] if _finished else "interrupted"


def forget_finished() -> None:
    """A new command starts: nothing is finished yet."""
    _finished.clear()
