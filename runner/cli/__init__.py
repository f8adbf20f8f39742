"""Command-line interface: argument parsing only; each subcommand in its own module.

Launched as a command (the `runner` script, or `python -m runner.cli.main`, which imports this package first), a
Ctrl-C from here until main() takes over ends the process with one line and exit 130, wherever it lands (an import
half done, a module being compiled): nothing has been written yet. Only the interpreter's own first milliseconds
(before this line) remain, where CPython itself reports or dies of the signal.
"""

import sys

import _signal as signal  # the C module: `signal` imports enum, and a Ctrl-C there would come before our handler


def _early(signum, frame):  # noqa: ANN001 - a signal handler
    import os

    try:
        sys.stderr.write("runner: interrupted\n")
        sys.stderr.flush()
    finally:
        os._exit(130)


def release_early() -> None:
    """main() takes over: SIGINT raises KeyboardInterrupt again (handled there, or by a run's own stop)."""
    if signal.getsignal(signal.SIGINT) is _early:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# "-m": sys.argv[0] while `python -m runner.cli.main` imports its packages; "runner": the console script. A process
# started with SIGINT ignored (a background job) keeps ignoring it.
if sys.argv and (sys.argv[0] == "-m" or sys.argv[0].rsplit("/", 1)[-1] == "runner") and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _early)
