"""Wake-ups for Fetch long polls: a waiter sleeps until one of its partitions gets data.

Per partition, the set of events of the fetches waiting on it; an append sets and forgets
them.  No polling: a fetch that finds too little data registers, sleeps until an append to
one of its partitions (or its max_wait deadline), then re-reads.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import trio


@dataclass(frozen=True)
class AppendNotifierStatistics:
    partitions_waited_on: int


class AppendNotifier:
    def __init__(self) -> None:
        self._waiters: dict[Hashable, set[trio.Event]] = {}

    def notify(self, key: Hashable) -> None:
        """Data was appended to ``key`` (a (topic, partition)): wake its waiters."""
        waiters = self._waiters.pop(key, None)
        if waiters:
            for event in waiters:
                event.set()

    def notify_all(self) -> None:
        """Wake every waiter (topic deleted, shutdown)."""
        waiters, self._waiters = self._waiters, {}
        for events in waiters.values():
            for event in events:
                event.set()

    async def wait_any(self, keys: Iterable[Hashable], deadline: float) -> bool:
        """Sleep until one of ``keys`` is notified or trio's clock reaches ``deadline``.

        Returns True when woken by an append, False on the deadline.
        """
        event = trio.Event()
        keys = list(keys)
        for key in keys:
            self._waiters.setdefault(key, set()).add(event)
        try:
            with trio.move_on_at(deadline):
                await event.wait()
            return event.is_set()
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiters[key]

    def statistics(self) -> AppendNotifierStatistics:
        return AppendNotifierStatistics(partitions_waited_on=len(self._waiters))
