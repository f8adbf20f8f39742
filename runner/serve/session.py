"""What a protocol's side of one `runner serve` connection is (runner.serve.openpi, runner.serve.vlaeval)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from runner.policies.remote import wire
from runner.serve.layout import BadRequest

if TYPE_CHECKING:
    from runner.serve.server import Client, PolicyServer

CLOSE_BAD_DATA, CLOSE_POLICY_ERROR, CLOSE_GOING_AWAY = 1007, 1011, 1001


class Session:
    """One connection's conversation in one protocol; `run` returns when the client or the server is done."""

    def __init__(self, server: PolicyServer, client: Client) -> None:
        self.server = server
        self.client = client

    async def frames(self) -> AsyncIterator[Any]:
        """The client's frames, until it closes the connection or the server drains."""
        from websockets.exceptions import ConnectionClosed

        while not self.server.draining:
            try:
                yield await self.client.ws.recv()
            except ConnectionClosed:
                return

    def decode(self, data: Any, unpack: Callable[[Any, int], Any]) -> Any:
        """A binary frame as the protocol's `unpack` reads it (bounded by --max-message-mb); BadRequest otherwise."""
        if isinstance(data, str):
            raise BadRequest("a text frame; requests are binary msgpack maps")
        try:
            return unpack(data, self.server.limit)
        except wire.WireError as exc:
            raise BadRequest(str(exc)) from None

    async def run(self) -> None:
        raise NotImplementedError


__all__ = ["CLOSE_BAD_DATA", "CLOSE_GOING_AWAY", "CLOSE_POLICY_ERROR", "Session"]
