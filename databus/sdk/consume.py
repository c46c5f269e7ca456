"""Consuming through the sidecar: ``Client.subscribe(stream, group)`` and its messages.

::

    with Client() as client:
        for message in client.subscribe("orders", "billing", tags=["paid"]):
            handle(message.value)
            message.ack()            # or message.nack(delay=5, reason="db down")

A ``Subscription`` is fed by the client's I/O thread: it keeps one long poll (``fetch``) open
at the sidecar whenever its window has room, puts the messages that arrive in a local buffer,
and sends acks and nacks in batches (one frame per wake-up, whatever the number).  The window,
``max_in_flight``, counts messages received and not yet acked or nacked, including those
still in the buffer, so a slow app holds at most that many at the sidecar's expense.

After a reconnect the subscription subscribes again by itself; messages received on the lost
connection are the sidecar's to redeliver (to this app or another), and their ack() does
nothing (the message may come again: delivery is at least once).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import msgpack

from databus.protocol import sidecar_wire as wire
from databus.protocol.speedups import load_native

from .errors import DatabusError, SidecarUnavailableError, error_for

if TYPE_CHECKING:
    from .client import Client

DEFAULT_MAX_IN_FLIGHT = 1000
DEFAULT_FETCH_MAX_WAIT_MS = 500  # Kafka's fetch.max.wait.ms
DEFAULT_FETCH_MIN_BYTES = 1  # Kafka's fetch.min.bytes


class Message:
    """A consumed message: ``value``, ``key``, ``headers`` (a list of (str, bytes) pairs),
    ``tag``, ``topic``, ``partition``, ``offset``, ``timestamp`` (ms), ``attempt`` (1 on the
    first delivery).  Call ``ack()`` once handled, or ``nack(delay, reason)`` to have it
    delivered again later."""

    # It wraps the message's array as it came off the wire (read lazily): making one costs
    # three stores, which matters at a few hundred thousand messages a second.
    __slots__ = ("_sub", "_epoch", "_item")

    def __init__(self, sub: Subscription, epoch: int, item: list) -> None:
        self._sub = sub
        self._epoch = epoch  # None once acked or nacked
        self._item = item

    delivery_id = property(lambda self: self._item[0])
    partition = property(lambda self: self._item[1])
    offset = property(lambda self: self._item[2])
    timestamp = property(lambda self: self._item[3])
    attempt = property(lambda self: self._item[4])
    value = property(lambda self: self._item[5])

    @property
    def data(self) -> Any:
        """A typed stream's value as its record (the sidecar decodes it and sends it as
        msgpack, docs/schemas.md): a dict for a record."""
        value = self._item[5]
        return None if value is None else msgpack.unpackb(value, raw=False,
                                                           strict_map_key=False)

    @property
    def key(self) -> bytes | None:
        item = self._item
        return item[6] if len(item) > 6 else None

    @property
    def headers(self) -> list[tuple[str, bytes | None]]:
        item = self._item
        return [tuple(h) for h in item[7]] if len(item) > 7 and item[7] else []

    @property
    def topic(self) -> str:
        return self._sub.topic

    @property
    def tag(self) -> str | None:
        item = self._item
        if len(item) > 7 and item[7]:
            for name, value in item[7]:
                if name == wire.TAG_HEADER:
                    return value.decode(errors="replace") if value is not None else None
        return None

    def ack(self) -> None:
        """Done with it: the sidecar may commit past it.  Once per message (more is a no-op)."""
        epoch = self._epoch
        if epoch is not None:
            self._epoch = None
            self._sub._settle(epoch, self._item[0], None)

    def nack(self, delay: float | None = None, reason: str | None = None) -> None:
        """Failed: deliver it again after ``delay`` seconds (None: the stream's next retry
        level), as attempt ``attempt + 1``; after ``max.attempts`` it goes to the group's
        dead-letter topic with ``reason``."""
        epoch = self._epoch
        if epoch is not None:
            self._epoch = None
            delay_ms = None if delay is None else max(int(delay * 1000), 0)
            self._sub._settle(epoch, None, [self._item[0], delay_ms, reason])

    def __repr__(self) -> str:
        return (f"Message(topic={self.topic!r}, partition={self.partition}, "
                f"offset={self.offset}, attempt={self.attempt}, key={self.key!r}, "
                f"value={self.value!r})")


def wrap_messages_py(cls: type[Message], sub: Subscription, epoch: int,
                     items: list) -> list[Message]:
    """A messages frame's arrays as the app's messages (the twin of _outbox_speedups.c's
    wrap_messages, which skips the per-message __init__ call)."""
    return [cls(sub, epoch, item) for item in items]


_native = load_native(name="_outbox_speedups", package=__package__)
wrap_messages = getattr(_native, "wrap_messages", None) or wrap_messages_py


class Subscription:
    """Messages of one stream for one group; iterate it, or ``poll(timeout)``.  Made by
    ``Client.subscribe``; ``close()`` (or leaving a ``with`` block) unsubscribes, and the
    sidecar redelivers what was not acked."""

    def __init__(self, client: Client, sub_id: int, stream: str, group: str,
                 tags: list[str] | None, max_in_flight: int, fetch_max_wait_ms: int,
                 fetch_min_bytes: int) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._client = client
        self.id = sub_id
        self.stream = stream
        self.group = group
        self.tags = list(tags) if tags else None
        self.max_in_flight = max_in_flight
        self._max_wait_ms = fetch_max_wait_ms
        self._min_bytes = fetch_min_bytes
        self.topic: str | None = None
        self.ordering: str | None = None
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._buffer: collections.deque[Message] = collections.deque()
        # Received on this connection and not yet settled as far as the I/O thread knows
        # (it counts the settlements it sends): only the I/O thread writes it.
        self._held = 0
        # Settlements to send.  The app's threads append, the I/O thread pops: both atomic
        # on a deque, so acking takes no lock (it is done once per message).
        self._acks: collections.deque[int] = collections.deque()
        self._nacks: collections.deque[list] = collections.deque()
        self._poked = False  # the I/O thread was asked to look since it last drained
        self._fetching = 0  # max_messages of the long poll open at the sidecar (0: none)
        self._epoch = -1  # the connection this subscription is subscribed on
        self._answered = threading.Event()
        self._error: DatabusError | None = None
        self._closed = False
        self._retry_at = 0.0
        self.on_arrival: Callable[[], Any] | None = None  # AsyncClient's wake-up
        self.received = 0  # messages received, ever
        self.fetches = 0  # long polls sent, ever

    # --- the app's side ----------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (None: for ever); None if
        none came.  Raises the subscription's error if the sidecar ended it."""
        try:
            message = self._buffer.popleft()  # the common case: no lock, no waiting
        except IndexError:
            pass
        else:
            if not self._buffer and not self._fetching:
                # An app that holds messages without acking them yet: its next poll
                # needs a fetch now that the buffer is empty.
                self._client._poke()
            return message
        with self._cond:
            if not self._buffer:
                deadline = None if timeout is None else time.monotonic() + timeout
                while not self._buffer:
                    if self._error is not None and not self._retrying():
                        raise self._error
                    if self._closed:
                        return None
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return None
                    self._cond.wait(remaining)
            return self._buffer.popleft()

    def __iter__(self) -> Iterator[Message]:
        while not self._closed:
            message = self.poll(1.0)
            if message is not None:
                yield message

    def close(self) -> None:
        """Unsubscribe (after sending the acks and nacks given so far): messages held and not
        acked are redelivered by the sidecar."""
        if self._closed:
            return
        with self._cond:
            self._closed = True
            self._buffer.clear()
            self._cond.notify_all()
        self._client._subscription_closed(self)

    def _settlement_frames(self) -> list[dict]:
        """The acks and nacks not sent yet, as frames (the client holds its lock)."""
        out = []
        acks = self._acks
        if acks:
            popleft = acks.popleft
            ids = [popleft() for _ in range(len(acks))]
            self._held -= len(ids)
            if getattr(self._client, "ack_ranges", False):
                out.append(wire.ack(self.id, *wire.ack_runs(ids)))
            else:
                out.append(wire.ack(self.id, ids))
        nacks = self._nacks
        if nacks:
            taken = [nacks.popleft() for _ in range(len(nacks))]
            self._held -= len(taken)
            out.append(wire.nack(self.id, taken))
        return out

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def in_flight(self) -> int:
        """Messages received and not yet acked or nacked (buffered ones included)."""
        return self._held

    def _settle(self, epoch: int, ack: int | None, nack: list | None) -> None:
        if epoch != self._epoch:
            return  # from a lost connection: the sidecar redelivers it anyway
        if nack is None:
            self._acks.append(ack)
        else:
            self._nacks.append(nack)
        # The I/O thread clears _poked before it drains: an ack it missed sees False here.
        if not self._poked:
            self._poked = True
            self._client._poke()

    def _retrying(self) -> bool:
        return self._retry_at > 0 and not self._closed

    # --- the I/O thread's side ---------------------------------------------------------------

    def _frames(self, epoch: int, now: float) -> list[dict]:
        """Frames to send now: (re)subscribe on a new connection, acks, nacks, a long poll."""
        out: list[dict] = []
        with self._lock:
            if self._closed:
                return out
            if self._epoch != epoch:
                if self._retry_at and now < self._retry_at:
                    return out
                # A new connection: what the old one delivered is the sidecar's to redeliver.
                self._epoch = epoch
                self._buffer.clear()
                self._held = 0
                self._acks.clear()
                self._nacks.clear()
                self._fetching = 0
                return [wire.subscribe(self.id, self.stream, self.group, self.tags,
                                       self.max_in_flight)]
            if self.topic is None and not self._answered.is_set():
                return out  # subscribed not answered yet
            self._poked = False
            out += self._settlement_frames()
            if not self._fetching and self._error is None:
                room = self.max_in_flight - self._held
                if room > 0 and (room * 4 >= self.max_in_flight or not self._buffer):
                    self._fetching = room
                    self.fetches += 1
                    out.append(wire.fetch(self.id, room, self._max_wait_ms, self._min_bytes))
        return out

    def _on_subscribed(self, frame: dict) -> None:
        code = frame.get("code", 0)
        with self._cond:
            if code:
                self._error = error_for(code, str(frame.get("message")))
            else:
                self._error = None
                self._retry_at = 0.0
                self.topic = frame.get("topic")
                self.ordering = frame.get("ordering")
            self._cond.notify_all()
        self._answered.set()

    def _on_messages(self, items: list, epoch: int) -> None:
        messages = wrap_messages(Message, self, epoch, items)
        with self._cond:
            self._fetching = 0
            if self._closed or epoch != self._epoch:
                return
            self._held += len(messages)
            self._buffer.extend(messages)
            self.received += len(messages)
            if messages:
                self._cond.notify_all()
        if messages and self.on_arrival is not None:
            self.on_arrival()

    def _on_unsubscribed(self, frame: dict, retry_in: float) -> None:
        """The sidecar ended the subscription (code != 0): subscribe again after
        ``retry_in`` seconds; meanwhile poll() raises the error."""
        code = frame.get("code", 0)
        with self._cond:
            if code and not self._closed:
                self._error = error_for(code, str(frame.get("message")))
                self._epoch = -1
                self._retry_at = time.monotonic() + retry_in
            self._cond.notify_all()

    def _lost(self, error: DatabusError) -> None:
        """The connection is gone; the client reconnects and this subscribes again."""
        with self._cond:
            self._fetching = 0
            self._cond.notify_all()

    def _wait_subscribed(self, timeout: float) -> None:
        if not self._answered.wait(timeout):
            raise SidecarUnavailableError(f"no answer to subscribe within {timeout}s")
        if self._error is not None:
            self._client._subscription_closed(self, tell_sidecar=False)
            self._closed = True
            raise self._error
