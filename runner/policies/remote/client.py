"""One connection to a policy server (websockets' synchronous client): connect with retries and backoff, read the
metadata, then one request -> one reply.

Failures become runner errors: a server that cannot be reached, or a connection that drops, is
`PolicyUnavailable` (transient: the engine retries the episode from its start on a fresh worker); a refused API
key is a `ConfigError`; an error text frame from the server (the policy raised there) is an `EvaluationError`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from runner.errors import ConfigError, EvaluationError, PolicyUnavailable
from runner.policies.remote import wire

MAX_BACKOFF_S = 10.0
AUTH_HEADER = "Authorization"


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


class Connection:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.metadata: Any = None
        self._ws: Any = None

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
                self.metadata = self._receive("the metadata", endpoint.connect_timeout_s)
                return self.metadata
            except PolicyUnavailable as exc:
                self.close()
                reason = str(exc)
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

    def request(self, message: Any) -> Any:
        """Send one message and return the reply (a decoded map)."""
        from websockets.exceptions import ConnectionClosed

        if self._ws is None:
            self.open()
        try:
            self._ws.send(wire.pack(message))
        except ConnectionClosed as exc:
            raise PolicyUnavailable(self._closed(exc)) from None
        return self._receive("a reply", self.endpoint.request_timeout_s)

    def _receive(self, what: str, timeout: float) -> Any:
        from websockets.exceptions import ConnectionClosed

        try:
            data = self._ws.recv(timeout=timeout)
        except TimeoutError:
            self.close()
            raise PolicyUnavailable(f"the policy server at {self.endpoint.url} sent no {what.split()[-1]} within "
                                    f"{timeout:g} s") from None
        except ConnectionClosed as exc:
            raise PolicyUnavailable(self._closed(exc)) from None
        if isinstance(data, str):  # the server's error message (openpi sends its traceback so), then it closes
            self.close()
            raise EvaluationError(f"the policy server at {self.endpoint.url} reported an error: {data.strip()[-4000:]}")
        try:
            return wire.unpack(data, self.endpoint.max_message_bytes)
        except wire.WireError as exc:
            self.close()
            raise EvaluationError(f"the policy server at {self.endpoint.url} sent {what} that is not a valid "
                                  f"message: {exc}") from None

    def _closed(self, exc: Any) -> str:
        self.close()
        frame = getattr(exc, "rcvd", None)
        why = f" (code {frame.code}{': ' + frame.reason if frame.reason else ''})" if frame is not None else ""
        return f"the connection to the policy server at {self.endpoint.url} closed{why}"

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


__all__ = ["Connection", "Endpoint"]
