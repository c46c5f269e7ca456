"""``buffer.memory`` for the whole sidecar: a byte budget that messages wait on.

A message takes its bytes when the sidecar accepts it and gives them back when upstream has
answered for it, so the bytes held by the sidecar never exceed the limit however slow the
cluster is.  A waiter gives up at a deadline (the arrival time plus its stream's
``max.block.ms``): the deadline is per message, so a frame of many messages waits at most
``max.block.ms`` in total, not once per message.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio


@dataclass(frozen=True)
class ByteBudgetStatistics:
    used: int  # bytes taken
    limit: int
    waiting: int  # messages waiting for bytes


class ByteBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lot = trio.lowlevel.ParkingLot()

    def try_acquire(self, n: int) -> bool:
        if self.used + n <= self.limit:
            self.used += n
            return True
        return False

    async def acquire(self, n: int, deadline: float) -> bool:
        """Wait until ``n`` bytes fit or ``deadline`` (trio clock) passes; True if taken.

        Waiters are served in arrival order (parked FIFO, the head re-checks first), so a
        big message is not starved by a stream of small ones."""
        if n > self.limit:
            return False
        if not self._lot and self.try_acquire(n):
            return True
        with trio.move_on_at(deadline):
            while True:
                await self._lot.park()
                if self.try_acquire(n):
                    # Let the next waiter check too: there may be room for it as well.
                    self._lot.unpark()
                    return True
        # We may have been woken just as the deadline passed: hand the wake-up on.
        if self._lot and self.used < self.limit:
            self._lot.unpark()
        return False

    def release(self, n: int) -> None:
        self.used -= n
        if self._lot:
            self._lot.unpark()

    def statistics(self) -> ByteBudgetStatistics:
        return ByteBudgetStatistics(used=self.used, limit=self.limit, waiting=len(self._lot))
