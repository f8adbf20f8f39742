"""Dynamic batching: observation requests from many connections, stacked into one batched policy call.

A batch goes to the policy as soon as it holds `max_batch` requests, or every connection that is in an episode
has a request waiting (no one else can add to it), or its oldest request has waited `max_wait_s`. Requests are
grouped by their observation's keys, shapes and dtypes (only equal ones stack). Policy calls run one at a time
on the policy's own thread (`executor`), so while one batch is computed the next one gathers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from runner.policies.base import signature


def dispatch_now(pending: int, expected: int, max_batch: int, waited_s: float, max_wait_s: float) -> bool:
    """Whether the pending requests should go to the policy now."""
    return pending >= max_batch or pending >= expected or waited_s >= max_wait_s


@dataclass
class Request:
    slot: int
    observation: Any  # unbatched, runner's layout
    text: str
    future: asyncio.Future
    received: float = field(default_factory=time.monotonic)


def groups(requests: list[Request]) -> list[list[Request]]:
    """Requests whose observations stack, in arrival order."""
    by_key: dict[Any, list[Request]] = {}
    for request in requests:
        by_key.setdefault(signature(request.observation), []).append(request)
    return list(by_key.values())


class Batcher:
    def __init__(self, call: Callable[[list[Request]], list[Any]], executor: Executor, *, max_batch: int,
                 max_wait_s: float, expected: Callable[[], int], on_batch: Callable[[int], None]) -> None:
        self.call = call  # runs on the executor: one action per request, in order
        self.executor = executor
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.expected = expected  # connections that may send a request now
        self.on_batch = on_batch
        self.pending: list[Request] = []
        self._wake = asyncio.Event()

    async def submit(self, slot: int, observation: Any, text: str) -> tuple[Any, int]:
        """The action for one observation, and the size of the batch it was computed in."""
        future = asyncio.get_running_loop().create_future()
        self.pending.append(Request(slot, observation, text, future))
        self._wake.set()
        return await future

    def wake(self) -> None:
        """Something `expected` counts changed (a connection closed or ended its episode)."""
        self._wake.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            while True:
                waited = time.monotonic() - self.pending[0].received
                if dispatch_now(len(self.pending), self.expected(), self.max_batch, waited, self.max_wait_s):
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), self.max_wait_s - waited)
                except TimeoutError:
                    pass
            batch, self.pending = self.pending[:self.max_batch], self.pending[self.max_batch:]
            for group in groups([r for r in batch if not r.future.done()]):
                try:
                    actions = await loop.run_in_executor(self.executor, self.call, group)
                except Exception as exc:  # noqa: BLE001 - reported to every request of the group
                    for request in group:
                        if not request.future.done():
                            request.future.set_exception(exc)
                    continue
                self.on_batch(len(group))
                for request, action in zip(group, actions, strict=True):
                    if not request.future.done():
                        request.future.set_result((action, len(group)))


__all__ = ["Batcher", "Request", "dispatch_now", "groups"]
