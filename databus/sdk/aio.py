"""``databus.AsyncClient``: the SDK for asyncio apps, over the same I/O thread as Client.

::

    async with AsyncClient() as client:
        delivery = await client.send_and_wait("orders", b'{"id": 1}', key=b"customer-7")
        future = await client.send("clicks", b"...")     # queued; await future for the report
        await client.flush()
        async for message in await client.subscribe("orders", "billing"):
            message.ack()

The shape is aiokafka's: ``send`` returns once the message is queued (an asyncio future for
its Delivery), ``send_and_wait`` returns the Delivery.  Nothing blocks the event loop: when
the client's buffer is full, ``send`` waits with ``asyncio.sleep`` (up to ``max_block_ms``)
instead of blocking; connecting, flushing and closing run in the loop's default executor.
Reports arrive on the client's I/O thread and are handed to the loop in batches, one
``call_soon_threadsafe`` per batch rather than per message.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import threading
import time
from typing import Any

from .client import Client, Delivery, DeliveryFuture
from .consume import Message, Subscription
from .errors import BufferExhaustedError

# How often a send waiting for buffer room looks again.
ROOM_POLL_S = 0.005


class AsyncClient:
    """asyncio surface of ``Client``; the arguments are Client's."""

    def __init__(self, socket_path=None, **client_args: Any) -> None:
        self._args = (socket_path, client_args)
        self._client: Client | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: collections.deque = collections.deque()  # (asyncio future, DeliveryFuture)
        self._ready_lock = threading.Lock()
        self._scheduled = False

    async def start(self) -> None:
        """Connect (in the executor: connecting and the hello are blocking calls)."""
        socket_path, client_args = self._args
        self._loop = asyncio.get_running_loop()
        self._client = await self._loop.run_in_executor(
            None, functools.partial(Client, socket_path, **client_args)
        )

    async def __aenter__(self) -> AsyncClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    @property
    def client(self) -> Client:
        """The synchronous Client underneath (statistics(), reconnects, server...)."""
        if self._client is None:
            raise RuntimeError("use `async with AsyncClient(...)` or `await client.start()`")
        return self._client

    async def send(self, stream: str, value, key=None, headers=None, partition=None,
                   timestamp: int | None = None, *, lane: str | None = None,
                   tag: str | None = None) -> asyncio.Future:
        """Queue a message; returns an asyncio future for its Delivery.  Waits (without
        blocking the loop) while the client's buffer is full, up to ``max_block_ms``."""
        client = self.client
        deadline = None
        while True:
            try:
                queued = client.send(stream, value, key, headers, partition, timestamp,
                                     block=False, lane=lane, tag=tag)
                break
            except BufferExhaustedError:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + client.max_block_ms / 1000
                elif now >= deadline:
                    raise
                await asyncio.sleep(ROOM_POLL_S)
        future = self._loop.create_future()
        queued.add_done_callback(functools.partial(self._report_arrived, future))
        return future

    async def send_and_wait(self, stream: str, value, key=None, headers=None, partition=None,
                            timestamp: int | None = None, *, lane: str | None = None,
                            tag: str | None = None) -> Delivery:
        return await (await self.send(stream, value, key, headers, partition, timestamp,
                                      lane=lane, tag=tag))

    async def subscribe(self, stream: str, group: str, **options: Any) -> AsyncSubscription:
        """``Client.subscribe`` for asyncio: an AsyncSubscription (``async for``,
        ``await poll(timeout)``); messages' ``ack()`` and ``nack()`` never block."""
        sub = await self._loop.run_in_executor(
            None, functools.partial(self.client.subscribe, stream, group, **options)
        )
        return AsyncSubscription(sub, self._loop)

    async def flush(self, timeout: float | None = None) -> None:
        await self._loop.run_in_executor(None, self.client.flush, timeout)

    async def close(self, timeout: float | None = 30.0) -> None:
        if self._client is not None:
            await self._loop.run_in_executor(None, self._client.close, timeout)

    # --- reports, from the I/O thread to the loop ------------------------------------------

    def _report_arrived(self, future: asyncio.Future, queued: DeliveryFuture) -> None:
        with self._ready_lock:
            self._ready.append((future, queued))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._hand_over)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _hand_over(self) -> None:
        with self._ready_lock:
            ready, self._ready = self._ready, collections.deque()
            self._scheduled = False
        for future, queued in ready:
            if future.done():  # cancelled by the app
                continue
            exc = queued.exception(0)
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(queued.result(0))


class AsyncSubscription:
    """asyncio surface of a Subscription: the I/O thread wakes the loop once per batch of
    messages that arrives, never per message."""

    def __init__(self, subscription: Subscription, loop: asyncio.AbstractEventLoop) -> None:
        self.subscription = subscription
        self._loop = loop
        self._arrived = asyncio.Event()
        subscription.on_arrival = self._on_arrival

    def _on_arrival(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._arrived.set)
        except RuntimeError:  # the loop is closed
            pass

    async def poll(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (None: for ever)."""
        sub = self.subscription
        deadline = None if timeout is None else self._loop.time() + timeout
        while True:
            message = sub.poll(0)
            if message is not None or sub._closed:
                return message
            self._arrived.clear()
            message = sub.poll(0)  # one may have arrived before the clear
            if message is not None:
                return message
            remaining = None if deadline is None else deadline - self._loop.time()
            if remaining is not None and remaining <= 0:
                return None
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                return None

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> Message:
        while True:
            if self.subscription._closed:
                raise StopAsyncIteration
            message = await self.poll(1.0)
            if message is not None:
                return message

    def close(self) -> None:
        self.subscription.close()

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.close()
