"""Error classes, each with its own exit code; the CLI maps them to exits."""

from __future__ import annotations

import copy
import signal


class RunnerError(Exception):
    """A user-facing failure: one readable message, no traceback."""

    exit_code = 1
    formatted = False  # True: the message is shown as it is (spec problems), not as `runner: error: ...`


class ConfigError(RunnerError):
    """Bad input on the command line or in a spec (exit 2)."""

    exit_code = 2


class MissingDependencyError(RunnerError):
    """A simulator or policy package (or its data) is not installed (exit 3)."""

    exit_code = 3


class OutputError(RunnerError):
    """An output file cannot be written (exit 1)."""


class HubUnreachable(MissingDependencyError):
    """Something the spec names on the Hugging Face hub (a checkpoint) cannot be fetched from here now (exit 3):
    installing packages does not help; a local copy does."""


class EvaluationError(RunnerError):
    """The evaluation itself failed: a policy or env raised, a worker died (exit 4)."""

    exit_code = 4


class PolicyUnavailable(EvaluationError):
    """A remote policy server could not be reached, or its connection dropped (exit 4). Transient: the engine runs
    the episode again from its start on a fresh worker, up to its retries."""

    transient = True


class BehaviourDiverged(RunnerError):
    """`runner check`: the canaries no longer behave as their reference recorded (exit 5)."""

    exit_code = 5


class DriftError(RunnerError):
    """Generated files differ from what the specs produce (exit 1)."""

    exit_code = 1


def with_hint(exc: RunnerError, hint: str) -> RunnerError:
    """The same error (class, exit code, signal) with `hint` after its message."""
    out = copy.copy(exc)
    out.args = (f"{exc}; {hint}",)
    return out


class Interrupted(RunnerError):
    """Stopped by a signal; outputs so far are consistent (exit 128 + the signal: 130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, message: str = "interrupted", signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)
        self.exit_code = 128 + self.signum
