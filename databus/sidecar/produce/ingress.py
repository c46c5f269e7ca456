"""One app connection's I/O: a reader and a writer task over a ``trio.abc.Stream``.

The protocol is the Session's (session.py, no I/O) and a produce frame's way upstream the
Dispatcher's (dispatch.py); this module only moves bytes and events between them.  The
reader hands what it receives to the session and acts on its events in order (a produce
frame is dispatched before the next frame is looked at); the writer sends whatever the
session has queued, all of it in one write, whenever the session says output is waiting.
A protocol violation ends reading; the writer still sends what is queued, the error frame
last, then the connection is closed.  Nothing that goes wrong here reaches other
connections.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import trio

from databus.service.limits import RequestMemory

from .budget import ByteBudget
from .dispatch import Dispatcher
from .gate import ReloadGate
from .session import (
    Ack,
    Checks,
    ConnectionClosed,
    Fetch,
    Flush,
    Nack,
    Ping,
    Produce,
    ProtocolError,
    Session,
    Subscribe,
    Unsubscribe,
)

log = logging.getLogger("databus.sidecar.produce.ingress")

RECEIVE_BYTES = 256 * 1024


class Connection:
    def __init__(
        self,
        stream: trio.abc.Stream,
        name: str,
        *,
        max_frame_bytes: int,
        hello_reply: Callable[[int], dict],
        budget: ByteBudget,
        gate: ReloadGate,
        metrics: Any,
        kick: Callable[[], None] = lambda: None,
        consume: Any = None,
        checkers: Any = None,
        authorize: Callable[[Any], Any] | None = None,
        memory: RequestMemory | None = None,
        idle_ms: int = 0,
    ) -> None:
        self.stream = stream
        self.memory = memory  # shared by all connections: sidecar.queued_max_frame_bytes
        self.reserved = 0  # bytes of it held by the frame being received
        self.idle_s = idle_ms / 1000
        self.name = name
        self.metrics = metrics
        self._kick = kick  # a flush waits: ask the producers to send now
        self.consume = consume  # consume.ConsumeService: subscriptions (version 3)
        self._checkers = checkers  # who answers check-backs of which groups (half/service.py)
        self._wake = trio.Event()
        self._reading_done = False
        self.session = Session(max_frame_bytes, hello_reply, self._wake_writer, authorize)
        self.dispatcher = Dispatcher(self.session, budget, gate, metrics, name)

    def _wake_writer(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        metrics = self.metrics
        metrics.connections += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer)
                try:
                    await self._reader()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    nursery.cancel_scope.cancel()
                    return
                # The writer sends what is queued, then stops; reports that arrive later for
                # a connection the app closed have nobody to go to.
                self._reading_done = True
                self._wake.set()
        except Exception:
            # Whatever breaks one connection must never reach the listener (and with it
            # every other connection).
            log.exception("%s: connection failed", self.name)
        finally:
            if self.consume is not None:
                self.consume.connection_closed(self)  # its unacked messages go to others
            if self._checkers is not None:
                self._checkers.forget(self)
            if self.memory is not None:
                self.memory.release(self.reserved)
                self.reserved = 0
            self.session.discard_output()
            metrics.connections -= 1
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _reader(self) -> None:
        session = self.session
        next_event = session.next_event
        produce = self.dispatcher.produce
        receive = self.stream.receive_some
        memory, idle_s = self.memory, self.idle_s
        while True:
            if idle_s:
                with trio.move_on_after(idle_s) as idle:
                    data = await receive(RECEIVE_BYTES)
                if idle.cancelled_caught:
                    log.info("%s: closing connection: nothing received for %d ms "
                             "(sidecar.connections_max_idle_ms)", self.name, idle_s * 1000)
                    return
                session.feed(data)
            else:
                session.feed(await receive(RECEIVE_BYTES))
            arrival = time.monotonic()
            while (event := next_event()) is not None:
                kind = type(event)
                if kind is Produce:
                    await produce(event.messages, event.sizes, arrival)
                elif kind is Flush:
                    if not session.flush(event.id):
                        self._kick()
                elif kind is Ping:
                    session.pong(event.id)
                elif kind is Ack:
                    self.consume.ack(self, event.id, event.ids, event.ranges)
                elif kind is Fetch:
                    self.consume.fetch(self, event.id, event.max_messages, event.max_wait_ms,
                                       event.min_bytes)
                elif kind is Nack:
                    self.consume.nack(self, event.id, event.nacks)
                elif kind is Subscribe:
                    await self.consume.subscribe(self, event.id, event.stream, event.group,
                                                 event.tags, event.max_in_flight)
                elif kind is Unsubscribe:
                    self.consume.unsubscribe(self, event.id)
                elif kind is Checks:
                    if self._checkers is not None:
                        self._checkers.register(self, event.groups)
                elif kind is ConnectionClosed:
                    return
                elif kind is ProtocolError:
                    log.warning("%s: closing connection: %s", self.name, event.message)
                    self.metrics.error(event.code)
                    return
                # Hello: the session has answered it.
            if memory is not None:
                # sidecar.queued_max_frame_bytes: a frame's rest is read once its size fits
                pending = session.pending_frame_size
                if self.reserved and pending != self.reserved:
                    memory.release(self.reserved)  # the frame it was reserved for is whole
                    self.reserved = 0
                if pending and not self.reserved:
                    await memory.reserve(pending)
                    self.reserved = pending

    async def _writer(self) -> None:
        session = self.session
        send_all = self.stream.send_all
        while True:
            data = session.data_to_send()
            if data:
                try:
                    await send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    session.discard_output()  # the app is gone; its reader sees EOF next
                    return
                continue
            if self._reading_done:
                return
            await self._wake.wait()
            self._wake = trio.Event()
