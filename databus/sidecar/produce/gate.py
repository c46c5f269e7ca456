"""The reload gate: which routing table a produce frame uses, and when a reload may swap it.

This module owns the reload barrier's state.  A frame *enters* the gate and gets the current
table (``try_enter`` on the hot path, which never waits; ``enter``, which waits), routes its
messages and hands them to their producers under that table, then *leaves*.  A reload runs
``async with gate.swapping():``: from then on no frame enters; the body starts once every
frame that entered under the old table has left (so everything routed under the old
config is in its producers, and the body can flush and retire them before any message
goes out under the new one: per-key order holds across a reload); the body sets
``gate.current``; on exit the gate opens and the frames that waited get the new table.
``stop()`` closes it for good: waiting frames get None (the sidecar is shutting down).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Generic, TypeVar

import trio

T = TypeVar("T")


class ReloadGate(Generic[T]):
    def __init__(self, current: T) -> None:
        self.current = current
        self.inside = 0  # frames between enter and leave
        self.closed = False  # a swap waits or runs, or the gate is stopped
        self.stopped = False
        self._left = trio.Event()  # set when the last frame inside leaves a closed gate
        self._opened = trio.Event()  # set when a swap ends (or the gate stops)

    def try_enter(self) -> T | None:
        """The current table, counted as in use until ``leave()``; None while closed."""
        if self.closed:
            return None
        self.inside += 1
        return self.current

    async def enter(self) -> T | None:
        """Like try_enter, but waits out a swap; None if the gate stops instead."""
        while self.closed:
            if self.stopped:
                return None
            await self._opened.wait()
        self.inside += 1
        return self.current

    def leave(self) -> None:
        self.inside -= 1
        if self.inside == 0 and self.closed:
            self._left.set()

    @contextlib.asynccontextmanager
    async def swapping(self) -> AsyncIterator[None]:
        """Close the gate, wait until every frame inside has left, run the body, open.
        Swaps must not overlap (the sidecar serialises reloads)."""
        self.closed = True
        self._opened = trio.Event()
        self._left = trio.Event()
        try:
            if self.inside:
                await self._left.wait()
            yield
        finally:
            if not self.stopped:
                self.closed = False
            self._opened.set()

    def stop(self) -> None:
        """Close for good: frames waiting in ``enter`` (and later ones) get None."""
        self.stopped = self.closed = True
        self._opened.set()
