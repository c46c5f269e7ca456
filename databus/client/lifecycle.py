"""The life of a consumer used as ``async with`` (Consumer, ShareConsumer): entering starts
the cluster's connections and the client's background tasks in the cluster's nursery;
leaving (or ``close()``) first settles what the client owes the brokers (commits, leaving
the group, closing share sessions), then always stops the tasks and the connections."""

from __future__ import annotations

import contextlib
from typing import Self

import trio

from . import errors


class ClientLifecycle:
    """Base of the consumers: ``__aenter__``/``__aexit__``/``close``/``_check_open``.

    A subclass sets ``_cluster`` and ``config`` and gives ``_start(nursery)`` (its background
    tasks) and ``_settle()`` (the graceful part of close, bounded by ``request.timeout.ms``);
    ``_what`` names it in the errors of ``_check_open``."""

    _what = "consumer"
    _stack: contextlib.AsyncExitStack | None = None
    _nursery: trio.Nursery | None = None
    _closed = False

    async def __aenter__(self) -> Self:
        self._stack = contextlib.AsyncExitStack()
        await self._stack.enter_async_context(self._running())
        return self

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        await self.close(graceful=exc_type is None or not issubclass(exc_type, trio.Cancelled))
        return False

    @contextlib.asynccontextmanager
    async def _running(self):
        async with self._cluster.running() as nursery:
            self._nursery = nursery
            await self._start(nursery)
            yield

    async def _start(self, nursery: trio.Nursery) -> None:
        raise NotImplementedError

    async def _settle(self) -> None:
        """What a graceful close does before the connections close."""

    async def close(self, graceful: bool = True) -> None:
        """Settle what the client owes the brokers (``graceful``: within request.timeout.ms),
        then close its connections and background tasks.  A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            if graceful and self._stack is not None:
                with trio.move_on_after(self.config.request_timeout_ms / 1000):
                    await self._settle()
        finally:
            # Always, even when the graceful part was cancelled (a nursery's exception
            # group is not "Cancelled" to __aexit__): an unclosed stack leaves the
            # connections' nursery open and corrupts the caller's nursery nesting.
            if self._stack is not None:
                stack, self._stack = self._stack, None
                await stack.aclose()

    def _check_open(self) -> None:
        if self._closed or self._stack is None:
            raise errors.ConsumerClosedError(
                f"{self._what} is closed" if self._closed
                else f"use the {self._what} inside `async with`")
