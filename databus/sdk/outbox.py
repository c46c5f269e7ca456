"""The Client's outbox: message ids, the queue the I/O thread encodes, the futures waiting
for reports, and the byte counts of backpressure, shared by the sending threads and the I/O
thread.

Each method is one atomic step.  ``PyOutbox`` (below) makes them so with a lock; the C
extension's ``Outbox`` (_outbox_speedups.c beside this module) has the same methods and needs
no lock: a C call that runs no Python code holds the interpreter throughout.  The lock was a
third of ``send()``'s own cost.  ``DATABUS_PURE_PYTHON=1`` selects PyOutbox (speedups.py);
tests/sidecar/test_outbox_speedups.py runs both through the same operations.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

from databus.protocol.speedups import load_native

# What add() says to do next.  "Armed" means the I/O thread is awake or a wake-up is on its
# way: it stays armed from its wake-up until it finds nothing to do (idle()), so messages
# queued while it works wake nobody.  (A wake-up is a write to a socket, which hands the
# app's interpreter to the I/O thread at once: one per take cut the frames to ~100-450
# messages at full speed, each with its syscalls, interpreter handoffs and sidecar cost.)
QUEUED = 0  # nothing: the I/O thread knows there is work
WAKE = 1  # wake the I/O thread
YIELD = 2  # a frame's worth is queued: let the I/O thread have the interpreter now
REFUSED = 3  # the client is closed or failed: nothing was queued


class PyOutbox:
    """See the module docstring; ``max_messages``: the queue length at which add() says
    YIELD (a produce frame's worth); add() makes each message's future as
    ``future_type(client)``."""

    # slots: add() reads or writes seven of them per message, cheaper than a __dict__
    __slots__ = ("_lock", "_future_type", "_client", "max_messages", "queue", "futures",
                 "last_id", "buffered", "unencoded", "armed", "poked", "refusing")

    def __init__(self, max_messages: int, future_type: type, client: Any) -> None:
        if max_messages < 1:
            raise ValueError("max_messages must be positive")
        self._lock = threading.Lock()
        self._future_type = future_type
        self._client = client
        self.max_messages = max_messages
        self.queue: list = []  # message tuples and markers, in order
        self.futures: dict[int, Any] = {}  # message id -> its future
        self.last_id = 0  # ids of messages, flushes and subscriptions, from 1
        self.buffered = 0  # payload bytes queued or not yet on the socket
        self.unencoded = 0  # payload bytes of the messages in the queue
        self.armed = False  # the I/O thread is awake or a wake-up is in flight to it
        self.poked = False  # arm() was called since the last take()
        self.refusing = False  # the client is closed or failed

    def add(self, size: int, fields: tuple) -> tuple[int, Any]:
        """Queue message ``(id, *fields)`` with a new id, ``size`` payload bytes; returns
        (what to do next, its future), (REFUSED, None) when nothing was queued."""
        future = self._future_type(self._client)
        self._lock.acquire()  # not ``with``: cheaper, on every send
        try:
            if self.refusing:
                return REFUSED, None
            self.last_id = id_ = self.last_id + 1
            self.futures[id_] = future
            queue = self.queue
            queue.append((id_,) + fields)
            self.buffered += size
            self.unencoded += size
            if self.armed:
                return (QUEUED if len(queue) % self.max_messages else YIELD), future
            self.armed = True
            return WAKE, future
        finally:
            self._lock.release()

    def next_id(self) -> int:
        with self._lock:
            self.last_id += 1
            return self.last_id

    def add_marker(self, marker: Any) -> bool:
        """Queue a marker (a flush, a frame); True if the I/O thread must be woken."""
        with self._lock:
            self.queue.append(marker)
            wake = not self.armed
            self.armed = True
            return wake

    def arm(self) -> bool:
        """Ask the I/O thread to look (at the subscriptions); True if it must be woken."""
        with self._lock:
            wake = not self.armed
            self.armed = self.poked = True
            return wake

    def take(self) -> tuple[list, int]:
        """(the queue, its payload bytes), leaving both empty; the I/O thread is awake (and
        stays armed until idle())."""
        with self._lock:
            queue, self.queue = self.queue, []
            unencoded, self.unencoded = self.unencoded, 0
            self.poked = False
            return queue, unencoded

    def idle(self) -> bool:
        """The I/O thread is about to sleep: True, disarmed (the next add() or arm() wakes
        it), if nothing was queued or asked for since its take(); else False (take again)."""
        with self._lock:
            if self.queue or self.poked:
                return False
            self.armed = False
            return True

    def release(self, n: int) -> None:
        """``n`` payload bytes are on the socket."""
        with self._lock:
            self.buffered -= n

    def fail(self) -> dict[int, Any]:
        """Refuse from now on and drop what is queued (it is answered as failed, so it must
        never go out later); returns the futures not answered yet."""
        with self._lock:
            futures, self.futures = self.futures, {}
            self.queue = []
            self.refusing = True
            self.unencoded = self.buffered = 0
            self.armed = self.poked = False
            return futures


# the C twin, _outbox_speedups.c beside this module
_native = load_native(name="_outbox_speedups", package=__package__)
Outbox = _native.Outbox if _native is not None else PyOutbox


def _tracked_already(obj: Any) -> None:
    """PyOutbox's futures are made in Python: the collector tracks them from the start."""


# track(future): the collector tracks it again (the C outbox makes untracked futures)
track = _native.track if _native is not None else _tracked_already
_untrack = _native.untrack if _native is not None else _tracked_already


def callback_list(future: Any) -> list:
    """A new list for ``future``'s callbacks: untracked like the future when the C outbox
    made it (it would be the one object per message left for the app's collector; emptied
    when the future is done, it holds no cycle beyond that either)."""
    callbacks: list = []
    if not gc.is_tracked(future):
        _untrack(callbacks)
    return callbacks
