"""Wake at most one waiting request task per event-loop iteration (see `Pacer`)."""

from __future__ import annotations

import asyncio
from collections import deque


class Pacer:
    """Wakes at most one waiting request task per event-loop iteration.

    When many closed-loop streams finish together, each task would wake, close its response,
    build the next body and write its request in the same iteration, and the
    socket reads arriving meanwhile would be stamped only after all of that. Tasks whose
    stream ended (`enqueue`) and tasks about to send (`turn`) are woken one per iteration
    instead, so a `select()` and its arrival stamps come between consecutive ones.
    Ownership: one per runner, used only from its event loop; futures handed in are resolved
    by it unless already done (cancelled).
    """

    def __init__(self) -> None:
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._scheduled = False

    def enqueue(self, fut: asyncio.Future[None], first: bool = False) -> None:
        if first:
            self._waiters.appendleft(fut)
        else:
            self._waiters.append(fut)
        if not self._scheduled:
            self._scheduled = True
            fut.get_loop().call_soon(self._release, fut.get_loop())

    async def turn(self, first: bool = False) -> None:
        """Wait for a turn; `first` jumps the queue (work that must not fall behind)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.enqueue(fut, first)
        await fut

    def _release(self, loop: asyncio.AbstractEventLoop) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                break
        if self._waiters:
            loop.call_soon(self._release, loop)  # runs in the next iteration, after select()
        else:
            self._scheduled = False
