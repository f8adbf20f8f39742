"""`runner serve --protocol vla-eval`: vla-eval's protocol (runner.policies.remote.vlaeval) from the server's side.

The client speaks first: HELLO, answered by HELLO (same seq) with the policy's action_spec / observation_spec (from
its contract) and runner's metadata under "runner". EPISODE_START starts an episode (runner's own fields under
"runner" when runner's client sends it: the exact episode; else an implicit one, runner.serve.episodes, for the
payload's task name or description) and EPISODE_END ends it; neither is answered (an episode that cannot start
is reported to each of its observations, one ERROR each). An OBSERVATION (vla-eval's layout,
or `--request`; runner.serve.layout) is answered by an ACTION with the same seq: {"actions": (*A)}, or a chunk
(horizon, *A) with --action-horizon. A request or policy error is an ERROR {"error": one line} with the request's
seq and the connection stays open (vla-eval's convention); a frame that is not a message at all closes it (1007).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from runner.policies.remote import protocol, vlaeval, wire
from runner.serve import session
from runner.serve.layout import BadRequest


class Session(session.Session):
    """One vla-eval connection."""

    async def run(self) -> None:
        from websockets.exceptions import ConnectionClosed

        server, client, ws = self.server, self.client, self.client.ws
        async for data in self.frames():
            try:
                message = self.decode(data, _message)
            except BadRequest as exc:
                text = server.failed(client, exc)
                with contextlib.suppress(ConnectionClosed):
                    await ws.send(vlaeval.pack(vlaeval.ERROR, {"error": text}, 0))
                    await ws.close(session.CLOSE_BAD_DATA, "bad request")
                return
            client.busy = True
            t0 = time.monotonic()
            try:
                reply = await self._answer(message)
            except Exception as exc:  # noqa: BLE001 - an ERROR to that client; its connection stays open
                reply = vlaeval.pack(vlaeval.ERROR, {"error": server.failed(client, exc)}, message.seq)
            else:
                if message.type == vlaeval.OBSERVATION:
                    server.stats.request_done(time.monotonic() - t0)
            try:
                if reply is not None:
                    await ws.send(reply)
            except ConnectionClosed:
                return
            finally:
                client.busy = False

    async def _answer(self, message: vlaeval.Envelope) -> bytes | None:
        """The reply's bytes (None: the message gets none)."""
        server, kind, payload = self.server, message.type, message.payload
        if kind == vlaeval.HELLO:
            version = payload.get("protocol_version")
            if version is not None and version != vlaeval.PROTOCOL_VERSION:
                server.log(f"connection {self.client.number}: vla-eval protocol version {str(version)[:20]}, this "
                           f"server speaks {vlaeval.PROTOCOL_VERSION}")
            return vlaeval.pack(vlaeval.HELLO, server.hello, message.seq)
        if kind == vlaeval.EPISODE_START:
            server.stats.controls += 1
            self.client.failed_start = None
            try:
                await self._episode_start(payload)
            except Exception as exc:  # noqa: BLE001 - unanswered, as EPISODE_START is: each observation is told
                self.client.failed_start = server.failed(self.client, exc)
            return None
        if kind == vlaeval.EPISODE_END:
            server.stats.controls += 1
            self.client.failed_start = None
            server.end_episode(self.client)
            return None
        if kind == vlaeval.OBSERVATION:
            if self.client.failed_start is not None:
                return vlaeval.pack(vlaeval.ERROR, {"error": self.client.failed_start}, message.seq)
            observation, text = server.layout.read(payload)
            actions, _, _ = await server.act(self.client, observation, text)
            return vlaeval.pack(vlaeval.ACTION, {"actions": actions}, message.seq)
        if kind == vlaeval.ERROR:
            server.log(f"connection {self.client.number}: the client reports an error: {vlaeval.error_text(payload)}")
            return None
        raise BadRequest(f"a client does not send {kind} messages")

    async def _episode_start(self, payload: Mapping[str, Any]) -> None:
        exact = payload.get("runner")
        if isinstance(exact, Mapping) and exact.get(protocol.CTRL) == protocol.EPISODE_START:
            await self.server.start_episode(self.client, exact)
            return
        task = payload.get("task")
        said = []
        if isinstance(task, Mapping):
            said = [str(task[key])[:protocol.MAX_TEXT] for key in ("name", "task_name", "description", "instruction")
                    if isinstance(task.get(key), str) and task[key]]
        await self.server.start_implicit(self.client, *said)


def _message(data: Any, max_bytes: int) -> vlaeval.Envelope:
    """A client's message; a map that is no envelope says which protocol it looks like."""
    try:
        return vlaeval.unpack(data, max_bytes)
    except wire.WireError as exc:
        raise wire.WireError(f"{exc} (an openpi client? this server speaks vla-eval's protocol; runner serve "
                             "--protocol openpi speaks openpi's)") from None


__all__ = ["Session"]
