"""``buffer.memory`` for the whole sidecar: a byte budget that messages wait on.

A message takes its bytes when the sidecar accepts it and gives them back when upstream has
answered for it, so the bytes held by the sidecar never exceed the limit however slow the
cluster is.  A waiter gives up at a deadline (the arrival time plus its stream's
``max.block.ms``): the deadline is per message, so a frame of many messages waits at most
``max.block.ms`` in total, not once per message.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import trio


@dataclass(frozen=True)
class ByteBudgetStatistics:
    used: int  # bytes taken
    limit: int
    waiting: int  # messages waiting for bytes


class _Waiter:
    __slots__ = ("event", "granted", "n")

    def __init__(self, n: int) -> None:
        self.n = n
        self.granted = False
        self.event = trio.Event()


class ByteBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: collections.deque[_Waiter] = collections.deque()

    def try_acquire(self, n: int) -> bool:
        if self.used + n <= self.limit:
            self.used += n
            return True
        return False

    async def acquire(self, n: int, deadline: float) -> bool:
        """Wait until ``n`` bytes fit or ``deadline`` (trio clock) passes; True if taken.

        Waiters are served strictly in arrival order: bytes given back go to the first
        waiter, and to the next only once it fits, so a big message is not starved by a
        stream of small ones (they wait behind it)."""
        if n > self.limit:
            return False
        if not self._waiters and self.try_acquire(n):
            return True
        waiter = _Waiter(n)
        self._waiters.append(waiter)
        try:
            with trio.move_on_at(deadline):
                await waiter.event.wait()
        except BaseException:  # cancelled from outside: leave no bytes and no place behind
            self._forget(waiter)
            raise
        if waiter.granted:  # (granted just as the deadline passed: the bytes are ours)
            return True
        self._forget(waiter)
        return False

    def _forget(self, waiter: _Waiter) -> None:
        if waiter.granted:
            self.release(waiter.n)
        else:
            self._waiters.remove(waiter)
            self._grant()  # the head giving up may let the next one in

    def _grant(self) -> None:
        waiters = self._waiters
        while waiters and self.used + waiters[0].n <= self.limit:
            waiter = waiters.popleft()
            self.used += waiter.n
            waiter.granted = True
            waiter.event.set()

    def release(self, n: int) -> None:
        self.used -= n
        if self._waiters:
            self._grant()

    def statistics(self) -> ByteBudgetStatistics:
        return ByteBudgetStatistics(used=self.used, limit=self.limit, waiting=len(self._waiters))
