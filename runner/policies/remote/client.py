"""One connection to a policy server (websockets' synchronous client): connect with retries and backoff, the
protocol's handshake (the server's metadata), then requests and episode messages as the protocol words them.

What differs between protocols is a `Protocol` (openpi's: `protocol.OpenPI`; vla-eval's: `vlaeval.Client`); the
connection, its retries, limits and errors are this module's, written once.

Failures become runner errors: a server that cannot be reached, or a connection that drops, is
`PolicyUnavailable` (transient: the engine retries the episode from its start on a fresh worker); a refused API
key is a `ConfigError`; an error from the server (the policy raised there) is an `EvaluationError`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from runner.errors import ConfigError, EvaluationError, PolicyUnavailable
from runner.policies.remote import wire
from runner.text import one_line

MAX_BACKOFF_S = 10.0
AUTH_HEADER = "Authorization"
MAX_ERROR_CHARS = 4000


@dataclass(frozen=True)
class Endpoint:
    url: str
    api_key_env: str | None = None
    connect_timeout_s: float = 10.0
    connect_retries: int = 3
    backoff_s: float = 0.5
    request_timeout_s: float = 300.0
    max_message_bytes: int = wire.DEFAULT_MAX_BYTES

    def api_key(self) -> str | None:
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(f"policy.kwargs.api_key_env names ${self.api_key_env}, which is not set: export the "
                              f"policy server's API key in it")
        return key


class Inputs(NamedTuple):
    """What a server's metadata says its policy reads, as runner's observation keys."""

    keys: frozenset[str] | None  # the env observation keys to send (None: every key the env gives)
    declared: bool  # False: the metadata declares no inputs (`keys` is then runner's guess: no images)


class Protocol:
    """One protocol's side of a connection: how it words each exchange and reads the server's metadata. One
    instance per connection (it may keep per-connection state, e.g. vla-eval's message numbers)."""

    name = ""
    nested_keys = False  # a dot in a request key nests (vla-eval), or is part of the key (openpi)

    def handshake(self, link: Connection) -> Any:
        """Right after connecting: the server's metadata."""
        raise NotImplementedError

    def request(self, link: Connection, message: Mapping[str, Any]) -> Any:
        """One observation's request -> the server's reply (a map holding the actions)."""
        raise NotImplementedError

    def episode_start(self, link: Connection, start: Any) -> None:
        """Tell the server an episode starts (`start`: runner.policies.base.EpisodeStart)."""
        raise NotImplementedError

    def episode_end(self, link: Connection, start: Any, success: bool, steps: int) -> None:
        """Tell the server the episode ended."""
        raise NotImplementedError

    def speaks_control(self, metadata: Any) -> bool:
        """Whether episode messages are sent when policy.kwargs.control_messages is auto."""
        raise NotImplementedError

    def inputs(self, metadata: Any) -> Inputs:
        """What the metadata declares the policy reads (when the spec has no request mapping)."""
        raise NotImplementedError

    def layout(self, observation: Mapping[str, Any], task_text: str) -> dict[str, Any]:
        """The request for one observation without a request mapping (the protocol's own layout)."""
        raise NotImplementedError

    def contract(self, metadata: Any, items: tuple[Any, ...] | None, who: str) -> Any:
        """What the metadata declares as runner.contract.PolicyContract (None: nothing); ValueError when malformed.
        `items`: the spec's request mapping (runner.policies.remote.request.Item), or None."""
        raise NotImplementedError

    def identity(self, metadata: Any) -> dict[str, Any]:
        """What the metadata says of the server and its policy, for the run's provenance (scalars only)."""
        raise NotImplementedError


class Connection:
    def __init__(self, endpoint: Endpoint, protocol: Protocol | None = None) -> None:
        if protocol is None:
            from runner.policies.remote.protocol import OpenPI

            protocol = OpenPI()
        self.endpoint = endpoint
        self.protocol = protocol
        self.metadata: Any = None
        self._ws: Any = None

    @property
    def url(self) -> str:
        return self.endpoint.url

    @property
    def is_open(self) -> bool:
        if self._ws is None:
            return False
        from websockets.protocol import State

        return self._ws.protocol.state is State.OPEN

    def open(self) -> Any:
        """Connect (closing any earlier connection) and return the server's metadata."""
        from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
        from websockets.sync.client import connect

        self.close()
        endpoint = self.endpoint
        key = endpoint.api_key()
        headers = {AUTH_HEADER: f"Api-Key {key}"} if key else None
        attempts = endpoint.connect_retries + 1
        t0 = time.monotonic()
        delay = endpoint.backoff_s
        reason = ""
        for attempt in range(attempts):
            if attempt:
                time.sleep(delay)
                delay = min(MAX_BACKOFF_S, delay * 2)
            try:
                ws = connect(endpoint.url, open_timeout=endpoint.connect_timeout_s, additional_headers=headers,
                             max_size=endpoint.max_message_bytes, compression=None, user_agent_header="runner",
                             legacy=True)  # a connection kept across calls, not a context manager
            except InvalidURI as exc:
                raise ConfigError(f"policy.url {endpoint.url!r} is not a WebSocket URL: {exc}") from None
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403):
                    raise ConfigError(self._refused(status)) from None
                reason = f"HTTP {status} {_body(exc.response)}".strip()
                continue
            except (OSError, TimeoutError, InvalidHandshake, EOFError, ConnectionClosed) as exc:
                # ConnectionClosed: the server went away while the handshake was being sent (e.g. it is being killed)
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                continue
            try:
                self._ws = ws
                self.metadata = self.protocol.handshake(self)
                return self.metadata
            except PolicyUnavailable as exc:
                self.close()
                reason = str(exc)
            except BaseException:
                self.close()
                raise
        raise PolicyUnavailable(
            f"cannot reach the policy server at {endpoint.url}: {reason} ({attempts} attempt"
            f"{'s' if attempts > 1 else ''} over {time.monotonic() - t0:.1f} s); is it running (runner serve SPEC)? "
            f"check policy.url")

    def _refused(self, status: int) -> str:
        env = self.endpoint.api_key_env
        if env:
            return (f"the policy server at {self.endpoint.url} refused the API key in ${env} (HTTP {status}): "
                    f"set the server's key there")
        return (f"the policy server at {self.endpoint.url} wants an API key (HTTP {status}): put it in an "
                f"environment variable and name it in policy.kwargs.api_key_env")

    # -- what the protocol does with it ----------------------------------------------------------------------

    def request(self, message: Mapping[str, Any]) -> Any:
        """Send one observation's request and return the reply (a decoded map)."""
        self._ensure_open()
        return self.protocol.request(self, message)

    def episode_start(self, start: Any) -> None:
        self._ensure_open()
        self.protocol.episode_start(self, start)

    def episode_end(self, start: Any, success: bool, steps: int) -> None:
        self._ensure_open()
        self.protocol.episode_end(self, start, success, steps)

    def _ensure_open(self) -> None:
        if self._ws is None:
            self.open()

    # -- the primitives the protocols use --------------------------------------------------------------------

    def send(self, encode: Callable[[], bytes]) -> None:
        """Send the bytes `encode()` makes (a message runner cannot encode is a ConfigError: what the spec sends)."""
        from websockets.exceptions import ConnectionClosed

        try:
            data = encode()
        except wire.WireError as exc:
            raise ConfigError(f"cannot send the policy server at {self.url} this request: {exc}") from None
        if self._ws is None:
            raise PolicyUnavailable(f"the connection to the policy server at {self.url} is closed")
        try:
            self._ws.send(data)
        except ConnectionClosed as exc:
            raise PolicyUnavailable(self._closed(exc)) from None

    def receive(self, what: str, timeout: float, decode: Callable[[bytes, int], Any] = wire.unpack, *,
                deadline: float | None = None, silence: str = "") -> Any:
        """The next message within `timeout` seconds (or until `deadline`, of time.monotonic(), the end of that
        timeout over several messages), decoded by `decode(data, max_bytes)` (wire.WireError: not a valid message);
        `what` names it in errors ("the metadata", "a reply"); `silence`: what the error adds when nothing came."""
        from websockets.exceptions import ConnectionClosed

        if self._ws is None:
            raise PolicyUnavailable(f"the connection to the policy server at {self.url} is closed")
        wait = timeout if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            data = self._ws.recv(timeout=wait)
        except TimeoutError:
            self.close()
            raise PolicyUnavailable(f"the policy server at {self.url} sent no {what.split()[-1]} within "
                                    f"{timeout:g} s{silence}") from None
        except ConnectionClosed as exc:
            raise PolicyUnavailable(self._closed(exc)) from None
        if isinstance(data, str):  # the server's error message (openpi sends its traceback so), then it closes
            self.close()
            raise self.reported(data[-MAX_ERROR_CHARS:])
        try:
            return decode(data, self.endpoint.max_message_bytes)
        except wire.WireError as exc:
            raise self.invalid(what, exc) from None

    def reported(self, text: str) -> EvaluationError:
        """The server reported an error (the policy raised there)."""
        return EvaluationError(f"the policy server at {self.url} reported an error: {text.strip()}")

    def invalid(self, what: str, problem: Any) -> EvaluationError:
        """The server sent something the protocol does not allow: the connection is closed (nothing after it can be
        trusted) and the error names what was wrong."""
        self.close()
        return EvaluationError(f"the policy server at {self.url} sent {what} that is not a valid message: "
                               f"{one_line(problem, 1000)}")

    def _closed(self, exc: Any) -> str:
        self.close()
        frame = getattr(exc, "rcvd", None)
        why = f" (code {frame.code}{': ' + frame.reason[:200] if frame.reason else ''})" if frame is not None else ""
        return f"the connection to the policy server at {self.url} closed{why}"

    def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001 - a connection that is already gone
                pass


def _body(response: Any) -> str:
    body = getattr(response, "body", b"") or b""
    return body[:200].decode("utf-8", errors="replace").strip()


__all__ = ["Connection", "Endpoint", "Inputs", "Protocol"]
