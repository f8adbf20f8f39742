"""`runner serve`'s openpi protocol (openpi's WebsocketPolicyServer, and runner's control messages).

On connect the server sends its metadata map; then each binary message is a request map answered by one map:
- a control message ("__ctrl__": episode_start / episode_end, runner.policies.remote.protocol) -> {"__ack__": ...};
  episode_start resets the connection's policy slot with the episode's seed, task and action space, so a served
  episode equals a local one;
- an observation (runner.serve.layout) -> {"actions": (horizon, *action_shape), "server_timing": {...}}; with no
  episode_start before it (openpi's clients never send one) it starts an implicit episode (runner.serve.episodes).
A request that cannot be taken, or a policy that fails on it, gets a text frame with runner's one-line message and
the connection closes (openpi's convention: 1007 for a bad request, 1011 for a policy error); the server serves on.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from runner.policies.remote import protocol, wire
from runner.serve import session
from runner.serve.layout import BadRequest
from runner.text import with_article


class Session(session.Session):
    """One openpi connection."""

    async def run(self) -> None:
        from websockets.exceptions import ConnectionClosed

        server, client, ws = self.server, self.client, self.client.ws
        await ws.send(wire.pack(server.metadata))
        async for data in self.frames():
            client.busy = True
            t0 = time.monotonic()
            try:
                reply, acted = await self._answer(data)
            except Exception as exc:  # noqa: BLE001 - that client's error frame; the server serves on
                text = server.failed(client, exc)
                bad = isinstance(exc, BadRequest)
                with contextlib.suppress(ConnectionClosed):
                    await ws.send(text)
                    await ws.close(session.CLOSE_BAD_DATA if bad else session.CLOSE_POLICY_ERROR,
                                   "bad request" if bad else "policy error")
                client.busy = False
                return
            try:
                await ws.send(wire.pack(reply))
            except ConnectionClosed:
                return
            finally:
                client.busy = False
            if acted:
                server.stats.request_done(time.monotonic() - t0)

    async def _answer(self, data: Any) -> tuple[dict[str, Any], bool]:
        """The reply to one message, and whether it was an observation (not a control message)."""
        server = self.server
        message = self.decode(data, wire.unpack)
        if not isinstance(message, dict):
            raise BadRequest(f"a request must be a map, not {with_article(type(message).__name__)}")
        if {"type", "payload", "seq"} <= set(message):
            raise BadRequest("a vla-eval message: this server speaks openpi's protocol (runner serve --protocol "
                             "vla-eval speaks vla-eval's)")
        if protocol.is_control(message):
            server.stats.controls += 1
            return await self._control(message), False
        observation, text = server.layout.read(message)
        client = self.client
        if client.implicit and client.in_episode and " ".join(text.split()) != " ".join(client.said.split()):
            server.end_episode(client)  # another prompt, another task: the next implicit episode
        actions, batch_size, ms = await server.act(client, observation, text)
        if server.horizon == 1:
            actions = actions[None]
        return {"actions": actions, "server_timing": {"infer_ms": round(ms, 3), "batch_size": batch_size}}, True

    async def _control(self, message: dict[str, Any]) -> dict[str, Any]:
        kind = message[protocol.CTRL]
        if kind == protocol.EPISODE_START:
            await self.server.start_episode(self.client, message)
        elif kind == protocol.EPISODE_END:
            self.server.end_episode(self.client)
        else:
            raise BadRequest(f"unknown control message {str(kind)[:40]!r} (episode_start, episode_end)")
        return protocol.ack(kind)


__all__ = ["Session"]
