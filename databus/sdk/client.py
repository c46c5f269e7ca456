"""``databus.Client``: the app's synchronous, thread-safe handle on the local sidecar.

One background I/O thread owns the socket.  ``send`` (any thread) assigns the message an id,
appends it to a queue and returns a DeliveryFuture at once; the I/O thread packs everything
queued into produce frames, writes them, and resolves futures from the sidecar's reports.
Many sends are thus pipelined on one connection without waiting for reports.

Backpressure: bytes queued here but not yet written to the socket are bounded by
``max_buffer_bytes``; when the sidecar stops reading (its own buffer.memory is full), that
bound fills and ``send`` waits at most ``max_block_ms`` (by default the sidecar's, sent in
its hello) before raising BufferExhaustedError.  A message the sidecar accepted but could
not buffer in time is answered with BUFFER_EXHAUSTED through its future instead.

Losing the sidecar (a restart, a crash) fails every message without a report with
SidecarUnavailableError (its outcome is unknown: it may have been delivered), and sends fail
at once while it is away; the I/O thread reconnects with backoff, and the same Client works
again once the sidecar is back (``reconnects`` counts how often).

Consuming: ``subscribe(stream, group)`` returns a Subscription (databus/sdk/consume.py); the
same I/O thread keeps its long poll open and sends its acks and nacks (protocol version 3).
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import select
import selectors
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack

from databus.protocol import sidecar_wire as wire
from databus.protocol.defaults import MAX_BLOCK_MS
from databus.version import __version__

from .consume import (
    DEFAULT_FETCH_MAX_WAIT_MS,
    DEFAULT_FETCH_MIN_BYTES,
    DEFAULT_MAX_IN_FLIGHT,
    Subscription,
)
from .errors import (
    BufferExhaustedError,
    DatabusError,
    MessageTooLargeError,
    ProtocolError,
    SidecarUnavailableError,
    SubscriptionError,
    error_for,
)
from .outbox import WAKE, YIELD, Outbox
from .outbox import callback_list as _callback_list
from .outbox import track as _track

log = logging.getLogger("databus.sdk")
TOKEN_ENV = wire.TOKEN_ENV

# The header carrying a message's swimlane (the sidecar's lanes.header must match).
LANE_HEADER = "databus-lane"
# Messages per produce frame: big enough to amortise framing, small enough to keep the
# sidecar's frames and the first report's latency short.
MAX_MESSAGES_PER_FRAME = 2048
# msgpack's framing around one message (see sidecar_wire.message_estimate)
FRAME_OVERHEAD = wire.MESSAGE_OVERHEAD
# Buffers handed to the kernel in one write at most (Linux takes up to 1024).
WRITE_BUFFERS = 64
_HAS_SENDMSG = hasattr(socket.socket, "sendmsg")  # not on Windows: a buffer per write there
# A send() waiting for room in max_buffer_bytes resumes once the buffered bytes are down to
# this fraction of it (_release_written).
RESUME_SENDERS_AT = 0.75
# After losing the sidecar, reconnect attempts back off from 50 ms to 1 s.
RECONNECT_BACKOFF_MIN = 0.05
RECONNECT_BACKOFF_MAX = 1.0
# A subscription the sidecar ended (its group member failed) subscribes again after this.
RESUBSCRIBE_S = 1.0


class Delivery(NamedTuple):
    """Where a message landed.  ``offset`` is -1 for acks=0; a message dropped by a route
    plugin has ``partition`` and ``offset`` -1 (see ``dropped``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int

    @property
    def dropped(self) -> bool:
        return self.partition == -1 and self.offset == -1


@dataclass(frozen=True)
class ClientStatistics:
    """``Client.statistics()``: a snapshot of this client's messages."""

    pending_reports: int  # sent and not answered yet
    # answered so far, by outcome: for apps that send without keeping the futures, as Kafka
    # apps send with a counting delivery callback
    delivered: int
    failed: int
    buffered_bytes: int  # not yet written to the sidecar


class DeliveryFuture:
    """The outcome of one ``send``: ``result(timeout)`` returns the Delivery or raises."""

    # A resolved future keeps the raw report and its index in it (-1: a single report)
    # and builds the Delivery on first use: resolving costs two stores per message.  The
    # C outbox makes futures as __init__ does, storing the slots it stores (outbox.py).
    __slots__ = ("_client", "_done", "_report", "_index", "_exc", "_callbacks", "delay_id")

    def __init__(self, client: Client) -> None:
        self._client = client
        self.delay_id: str | None = None  # a delayed message's id (``Client.cancel_delayed``)
        self._done = False
        self._report: Delivery | list | None = None
        self._exc: BaseException | None = None
        self._callbacks: list[Callable[[DeliveryFuture], Any]] | None = None

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> Delivery:
        if not self._done:
            self._client._wait_for(self, timeout)
        if self._exc is not None:
            raise self._exc
        report = self._report
        if type(report) is list:
            report = self._report = _delivery(report, self._index)
        return report  # type: ignore[return-value]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._done:
            self._client._wait_for(self, timeout)
        return self._exc

    def add_done_callback(self, fn: Callable[[DeliveryFuture], Any]) -> None:
        """Call ``fn(future)`` when done (at once if already done; otherwise on the client's
        I/O thread, so keep it short)."""
        if self._done:
            fn(self)
            return
        if self._callbacks is None:
            with self._client._lock:  # registrars only: who creates the list
                if self._callbacks is None:
                    self._callbacks = _callback_list(self)  # untracked like self (see _set)
        self._callbacks.append(fn)
        if self._done:  # resolved meanwhile: run what the resolver did not take
            self._run_callbacks()

    def _set(self, result: Delivery | None, exc: BaseException | None) -> None:
        self._report = result
        if exc is not None:
            # the C outbox makes futures the collector does not track (new_future in
            # _outbox_speedups.c); an exception's traceback may lead back here
            _track(self)
        self._exc = exc
        self._done = True
        self._run_callbacks()

    def _run_callbacks(self) -> None:
        """Run the registered callbacks once each.  The resolver (after setting _done) and a
        late registrar (after appending, seeing _done) may both get here: each callback is
        taken off the list by exactly one of them (list.pop is atomic), so none runs twice
        and none is lost, without a lock on the resolving path."""
        callbacks = self._callbacks
        while callbacks:
            try:
                fn = callbacks.pop(0)
            except IndexError:
                return
            try:
                fn(self)
            except Exception:
                log.exception("delivery callback failed")


def _delivery(report: list, index: int) -> Delivery:
    """The Delivery of message ``index`` of a group report (-1: ``report`` is a single one)."""
    return Delivery._make(wire.report_delivery(report, index))


def _as_bytes(data: Any, what: str) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"{what} must be bytes, str or None, not {type(data).__name__}")


def _value_bytes(value: Any) -> bytes | None:
    """A message's value: bytes and str as for keys; a dict or list (a typed stream's
    record, docs/schemas.md) as msgpack, which the sidecar checks against the schema."""
    if isinstance(value, (Mapping, list, tuple)):
        return msgpack.packb(value, use_bin_type=True)
    return _as_bytes(value, "value")


def _headers(headers: Any) -> list[list] | None:
    if headers is None:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for pair in items:
        name, value = pair
        if not isinstance(name, str):
            raise TypeError(f"header names must be str, not {type(name).__name__}")
        out.append([name, _as_bytes(value, "header value")])
    return out


def with_lane(headers: Any, lane: str, header: str) -> list:
    """``headers`` with ``header`` set to ``lane`` (an incoming message's lane header, when
    an app forwards its headers, is replaced rather than repeated)."""
    if not isinstance(lane, str) or not lane:
        raise ValueError("lane must be a non-empty str")
    items = [] if headers is None else (
        headers.items() if isinstance(headers, Mapping) else headers)
    return [*(pair for pair in items if pair[0] != header), (header, lane.encode())]
def _delay_headers(headers: list[list] | None, deliver_at: Any,
                   delay: float | None) -> tuple[list[list], str]:
    """A delayed message's headers (docs/delayed.md): the due time first (how the sidecar
    tells it apart), then its id (the app's own ``databus-delay-id`` header, or a new one)."""
    if deliver_at is not None and delay is not None:
        raise ValueError("give deliver_at or delay, not both")
    if delay is not None:
        if not isinstance(delay, (int, float)) or delay < 0:
            raise ValueError(f"delay must be a non-negative number of seconds, not {delay!r}")
        due_ms = int((time.time() + delay) * 1000)
    elif hasattr(deliver_at, "timestamp"):
        if getattr(deliver_at, "tzinfo", None) is None:
            raise ValueError("deliver_at must be a timezone-aware datetime")
        due_ms = int(deliver_at.timestamp() * 1000)
    else:
        raise TypeError(f"deliver_at must be a datetime, not {type(deliver_at).__name__}")
    rest = [h for h in headers or () if h[0] != wire.DELAY_ID_HEADER]
    given = [h[1] for h in headers or () if h[0] == wire.DELAY_ID_HEADER]
    delay_id = given[0].decode() if given and given[0] else uuid.uuid4().hex
    return ([[wire.DELAY_DUE_HEADER, str(due_ms).encode()],
             [wire.DELAY_ID_HEADER, delay_id.encode()]] + rest), delay_id


class Transaction:
    """Half messages of one transaction (``Client.transaction``); a context manager."""

    def __init__(self, client: Client, stream: str, group: str, txn_id: str | None = None):
        self.client = client
        self.stream = stream
        self.group = group
        self.id = txn_id or uuid.uuid4().hex
        self._futures: list[DeliveryFuture] = []
        self.outcome: bool | None = None  # True committed, False rolled back

    def send(self, value, key=None, headers=None, partition: int | None = None
             ) -> DeliveryFuture:
        """Queue a half message; its future resolves when it is stored (not yet visible)."""
        if self.outcome is not None:
            raise DatabusError(-1, f"transaction {self.id} is already over")
        ours = [[wire.TXN_HEADER, self.id.encode()], [wire.TXN_GROUP_HEADER, self.group.encode()]]
        future = self.client.send(self.stream, value, key, ours + (_headers(headers) or []),
                                  partition)
        self._futures.append(future)
        return future

    def commit(self, timeout: float | None = 30.0) -> None:
        """Make the messages visible: once every one is stored (else roll back and raise)."""
        try:
            for future in self._futures:
                future.result(timeout)
        except BaseException:
            self.rollback(timeout)
            raise
        self._end(True, timeout)

    def rollback(self, timeout: float | None = 30.0) -> None:
        self._end(False, timeout)

    def _end(self, commit: bool, timeout: float | None) -> None:
        headers = [[wire.TXN_END_HEADER, self.id.encode()],
                   [wire.TXN_GROUP_HEADER, self.group.encode()]]
        value = b"commit" if commit else b"rollback"
        self.client.send(self.stream, value, headers=headers).result(timeout)
        self.outcome = commit

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.outcome is not None:
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()


class Client:
    """Send messages to streams through the local databus sidecar.

    ``Client(socket_path=None)`` connects to ``socket_path`` (default: $DATABUS_SOCKET, else
    the default in databus.config), or to ``address=("127.0.0.1", port)`` for the sidecar's
    loopback TCP ingress.  Use it as a context manager, or call ``close()``.  ``token``
    (default: $DATABUS_TOKEN) is this app's token for a sidecar with ``sidecar.tokens``.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike | None = None,
        *,
        address: tuple[str, int] | None = None,
        connect_timeout: float = 10.0,
        max_buffer_bytes: int = 32 * 1024 * 1024,
        max_block_ms: int | None = None,
        client_name: str | None = None,
        lane_header: str = LANE_HEADER,
        token: str | None = None,
    ) -> None:
        self.socket_path = None if address else str(socket_path or wire.default_socket_path())
        self._lock = threading.Lock()
        self._done_cond = threading.Condition(self._lock)
        self._space = threading.Condition(threading.Lock())
        self._waiters = 0
        # ids, the queue of message tuples and markers (("flush", id), ("frame", frame),
        # ("checks", groups)), the futures waiting for reports and the bytes buffered: one
        # atomic step per call, without _lock (outbox.py)
        self._outbox = Outbox(MAX_MESSAGES_PER_FRAME, DeliveryFuture, self)
        self._delivered = self._failed = 0  # messages answered, by outcome (I/O thread)
        self._flush_waits: dict[int, threading.Event] = {}
        self._max_buffer = max_buffer_bytes
        self._closed = False  # (under _lock, as _failure; the outbox refuses while either)
        self._failure: DatabusError | None = None
        self._flushed_ok: set[int] = set()
        self._address = address
        self._connect_timeout = connect_timeout
        self._client_name = client_name or f"databus-python/{__version__}"
        # sidecar.tokens: this app's token (default $DATABUS_TOKEN); never logged or shown
        self._token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self._max_block_override = max_block_ms
        self.lane_header = lane_header
        self.reconnects = 0
        self._epoch = 0  # counts connections: a subscription subscribes again on a new one
        self._subs: dict[int, Subscription] = {}
        # producer group -> (check callback, stream): transactions' check-backs
        self._checks: dict[str, tuple[Callable[[str], Any], str]] = {}
        self._open()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        bind_send = getattr(self._outbox, "bind_send", None)
        if bind_send is not None and type(self).send is Client.send:
            # The C outbox takes send()'s common case (a str stream, bytes value and key,
            # nothing else) in one call, without this method's Python frame, and hands
            # anything else to it (Outbox.send in _outbox_speedups.c).  Not for a subclass
            # that overrides send().
            self.send = bind_send(Client.send, max_buffer_bytes, FRAME_OVERHEAD, time.sleep)
        self._thread = threading.Thread(
            target=self._io_loop, name="databus-client-io", daemon=True
        )
        self._thread.start()

    # --- connection -------------------------------------------------------------------------

    def _open(self, timeout: float | None = None) -> None:
        """Connect and say hello (at start, and again after the sidecar went away)."""
        timeout = self._connect_timeout if timeout is None else timeout
        version = wire.PROTOCOL_VERSION
        while True:
            sock = self._connect(self._address, timeout)
            try:
                hello = self._handshake(sock, self._client_name, timeout, version)
                break
            except DatabusError as exc:
                sock.close()
                # A sidecar older than this SDK refuses its newest version: speak the
                # previous one (sending works; subscribe() says what is missing).
                if exc.code != wire.ErrorCode.UNSUPPORTED_VERSION or version <= 2:
                    raise
                version -= 1
            except BaseException:
                sock.close()
                raise
        self.protocol_version = version
        sock.setblocking(False)
        self._sock = sock
        self._epoch += 1
        self.server = hello.get("server")
        # acks in order go as [first, last] ranges to a sidecar that reads them
        self.ack_ranges = wire.FEATURE_ACK_RANGES in (hello.get("features") or ())
        self.max_frame_bytes = int(hello.get("max_frame_bytes", wire.DEFAULT_MAX_FRAME_BYTES))
        if hasattr(self._outbox, "bind_send"):  # the C send() looks at it (see __init__)
            self._outbox.max_frame_bytes = self.max_frame_bytes
        self.max_block_ms = (
            self._max_block_override if self._max_block_override is not None
            else int(hello.get("max_block_ms", MAX_BLOCK_MS))
        )

    def _connect(self, address, timeout: float) -> socket.socket:
        if address:
            target, family, where = address, socket.AF_INET, f"{address[0]}:{address[1]}"
        else:
            target, family, where = self.socket_path, socket.AF_UNIX, self.socket_path
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(target)
        except OSError as exc:
            sock.close()
            raise SidecarUnavailableError(
                f"cannot connect to the sidecar at {where}: {exc.strerror or exc} "
                "(is `databus up` running?)"
            ) from None
        if family == socket.AF_INET:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _handshake(self, sock: socket.socket, name: str, timeout: float,
                   version: int = wire.PROTOCOL_VERSION) -> dict:
        sock.sendall(wire.encode_frame(wire.hello(name, version, token=self._token)))
        decoder = wire.FrameDecoder(wire.DEFAULT_MAX_FRAME_BYTES)
        deadline = time.monotonic() + timeout
        while True:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                data = sock.recv(65536)
            except OSError as exc:
                raise SidecarUnavailableError(f"no hello from the sidecar: {exc}") from None
            if not data:
                raise SidecarUnavailableError("the sidecar closed the connection during hello")
            frames = decoder.feed(data)
            if frames:
                frame = frames[0]
                if frame["type"] == "error":
                    raise error_for(frame.get("code", -1), str(frame.get("message")))
                if frame["type"] != "hello":
                    raise ProtocolError(
                        wire.ErrorCode.HELLO_REQUIRED, f"expected hello, got {frame}"
                    )
                self._decoder = decoder
                self._early_frames = frames[1:]
                if self._checks:  # again after a reconnect: the new connection answers
                    sock.sendall(wire.encode_frame(wire.checks(list(self._checks))))
                return frame

    # --- public API -------------------------------------------------------------------------

    def send(
        self,
        stream: str,
        value: bytes | str | Mapping | list | None,
        key: bytes | str | None = None,
        headers: Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        *,
        block: bool = True,
        lane: str | None = None,
        tag: str | None = None,
        deliver_at: Any = None,
        delay: float | None = None,
    ) -> DeliveryFuture:
        """Queue a message for ``stream``; returns at once with a DeliveryFuture, unless this
        client's buffer is full (then waits up to ``max_block_ms``, then raises
        BufferExhaustedError; with ``block=False`` it raises at once instead, as
        librdkafka's produce raises BufferError).  ``value``: bytes, str (UTF-8), or a
        dict or list, sent as msgpack, for a typed stream (docs/schemas.md), whose sidecar
        checks it against the stream's schema.  ``headers``: (str, bytes) pairs.
        ``timestamp``: ms since the epoch (default: the sidecar's clock when it accepts
        the message).  ``lane``: the swimlane (docs/lanes.md), sent as the header
        ``lane_header`` (default ``databus-lane``).  ``tag``: a label subscribers filter on
        (``subscribe(tags=...)``), sent as the header ``databus-tag``.  ``deliver_at`` (an
        aware datetime) or ``delay`` (seconds) make it a delayed message (docs/delayed.md):
        it reaches its topic at that time, the Delivery names where it waits, and
        ``future.delay_id`` cancels it (``cancel_delayed``)."""
        if type(value) is dict:
            # a typed stream's record (as _value_bytes packs it), then the common case
            value = msgpack.packb(value, use_bin_type=True)
        if (type(value) is bytes and headers is None and partition is None
                and timestamp is None and lane is None and tag is None and deliver_at is None
                and delay is None and type(stream) is str):
            # The common case in one test: only a key left to look at.
            if key is None:
                item: tuple = (stream, value)
                size = 24 + len(value)
            elif type(key) is bytes:
                item = (stream, value, key)
                size = 24 + len(value) + len(key)
            else:
                key = _as_bytes(key, "key")
                item = (stream, value, key)
                size = 24 + len(value) + (len(key) if key else 0)
            delay_id = None
        else:
            item, size, delay_id = self._prepare(stream, value, key, headers, partition,
                                                 timestamp, lane, tag, deliver_at, delay)
        if size + len(stream) + FRAME_OVERHEAD > self.max_frame_bytes:
            # Sent, it would make the sidecar refuse the whole frame (FRAME_TOO_LARGE) and
            # close the connection, failing every message around it: refuse this one here.
            future = DeliveryFuture(self)
            future._set(None, MessageTooLargeError(
                wire.ErrorCode.MESSAGE_TOO_LARGE,
                f"message of {size} bytes for stream {stream!r} is over the sidecar's "
                f"max_frame_bytes={self.max_frame_bytes}; not sent",
            ))
            return future
        outbox = self._outbox
        if outbox.buffered + size > self._max_buffer:
            if block:
                self._wait_for_space(size)
            elif outbox.buffered > 0:
                raise BufferExhaustedError(
                    wire.ErrorCode.BUFFER_EXHAUSTED,
                    f"{outbox.buffered} bytes wait for the sidecar to read them "
                    f"(max_buffer_bytes={self._max_buffer})",
                )
        then, future = outbox.add(size, item)
        if delay_id is not None and future is not None:
            future.delay_id = delay_id
        if then:
            if then == YIELD:
                # A frame's worth waits: let the I/O thread have the interpreter now rather
                # than after the 5 ms switch interval, so frames leave as they fill.
                time.sleep(0)
            elif then == WAKE:
                self._wake()
            else:  # REFUSED
                raise self._failure or SidecarUnavailableError("the client is closed")
        return future

    def _prepare(self, stream, value, key, headers, partition, timestamp, lane, tag,
                 deliver_at, delay) -> tuple[tuple, int, str | None]:
        """send()'s arguments beyond the common case, checked and converted: (the message
        array without its id, its payload size, a delayed message's id or None)."""
        if lane is not None:
            headers = with_lane(headers, lane, self.lane_header)
        if tag is not None:
            if not isinstance(tag, str) or not tag:
                raise TypeError("tag must be a non-empty str")
            headers = [*(_headers(headers) or ()), [wire.TAG_HEADER, tag.encode()]]
        delay_id = None
        if deliver_at is not None or delay is not None:
            # after the lane and tag: the due-time header must come first
            headers, delay_id = _delay_headers(_headers(headers), deliver_at, delay)
        if type(value) is not bytes:
            value = _value_bytes(value)
        if key is not None and type(key) is not bytes:
            key = _as_bytes(key, "key")
        if type(stream) is not str:
            raise TypeError("stream must be a str")
        size = 24 + (len(value) if value else 0) + (len(key) if key else 0)
        if headers is None and partition is None and timestamp is None:
            return ((stream, value) if key is None else (stream, value, key)), size, delay_id
        hdrs = _headers(headers) if headers is not None else None
        if partition is not None and (type(partition) is not int or partition < 0):
            raise ValueError("partition must be a non-negative int or None")
        if hdrs:
            size += sum(len(k) + (len(v) if v else 0) for k, v in hdrs)
        return (stream, value, key, hdrs, partition, timestamp), size, delay_id

    def subscribe(
        self,
        stream: str,
        group: str,
        *,
        tags: Iterable[str] | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        fetch_max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS,
        fetch_min_bytes: int = DEFAULT_FETCH_MIN_BYTES,
        timeout: float | None = None,
    ) -> Subscription:
        """Consume ``stream`` as a member of ``group`` (see databus/sdk/consume.py and
        docs/consuming.md): returns a Subscription, an iterator of Messages with ``ack()`` /
        ``nack()``; ``poll(timeout)`` takes one.  ``tags``: only messages sent with one of
        these tags.  ``max_in_flight``: messages held unacked at most.  Raises the
        sidecar's refusal (an unknown stream, a group already consuming another stream)."""
        if type(stream) is not str or type(group) is not str or not stream or not group:
            raise TypeError("stream and group must be non-empty str")
        if isinstance(tags, str):
            tags = [tags]
        if self.protocol_version < wire.CONSUME_VERSION:
            raise SubscriptionError(
                wire.ErrorCode.UNSUPPORTED_VERSION,
                f"the sidecar speaks protocol version {self.protocol_version}; consuming needs "
                f"{wire.CONSUME_VERSION} (upgrade the sidecar)")
        with self._lock:
            if self._closed or self._failure is not None:
                raise self._failure or SidecarUnavailableError("the client is closed")
            sub_id = self._outbox.next_id()
            sub = Subscription(self, sub_id, stream, group, list(tags) if tags else None,
                               max_in_flight, fetch_max_wait_ms, fetch_min_bytes)
            self._subs[sub_id] = sub
        self._poke()
        sub._wait_subscribed(self._connect_timeout if timeout is None else timeout)
        return sub

    def _poke(self) -> None:
        """Have the I/O thread look at the subscriptions (acks, nacks, polls to send)."""
        if self._outbox.arm():
            self._wake()

    def _subscription_closed(self, sub: Subscription, tell_sidecar: bool = True) -> None:
        """Its last acks and nacks, then unsubscribe, go out in order with what is queued
        (so a flush after close() is answered after the sidecar has them)."""
        with self._lock:
            self._subs.pop(sub.id, None)
            if tell_sidecar and sub._epoch == self._epoch:
                frames = [*sub._settlement_frames(), wire.unsubscribe(sub.id)]
                for frame in frames:
                    self._outbox.add_marker(("frame", frame))
        self._poke()
    def cancel_delayed(self, stream: str, delay_id: str) -> DeliveryFuture:
        """Cancel the delayed message ``delay_id`` sent to ``stream`` (its ``delay_id``):
        it is not delivered if the cancel reaches the sidecars before its time."""
        if not delay_id or not isinstance(delay_id, str):
            raise ValueError("delay_id must be a non-empty str")
        return self.send(stream, None, headers=[(wire.DELAY_CANCEL_HEADER, delay_id.encode())])

    def transaction(self, stream: str, check: Callable[[str], Any] | None = None,
                    group: str | None = None) -> Transaction:
        """A transaction of half messages to ``stream`` (docs/transactions.md): what
        ``tx.send`` sends reaches consumers only when the ``with`` block ends without an
        exception (commit; an exception rolls back).  ``check(txn_id)`` answers a sidecar
        asking about a transaction of producer ``group`` (default: the stream) left open
        too long — by any app of the group, on any host — with True (commit), False
        (roll back) or None (ask again later)."""
        group = group or stream
        if check is not None:
            new = group not in self._checks
            self._checks[group] = (check, stream)
            if new and self._outbox.add_marker(("checks", [group])):
                self._wake()
        return Transaction(self, stream, group)

    def _answer_check(self, group: Any, txn: Any) -> None:
        entry = self._checks.get(group) if isinstance(group, str) else None
        if entry is None or not isinstance(txn, str):
            return
        check, stream = entry
        try:
            outcome = check(txn)
        except Exception:
            log.exception("check callback for transaction %s failed; it is asked again", txn)
            return
        if outcome is None:
            return
        try:
            Transaction(self, stream, group, txn)._end(bool(outcome), None)
        except DatabusError as exc:
            log.warning("answering the check of transaction %s failed: %s", txn, exc)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every message sent before this call has its delivery report (success
        or error).  Raises TimeoutError if that takes longer than ``timeout`` seconds."""
        event = threading.Event()
        with self._lock:
            if self._failure is not None:
                raise self._failure
            if self._closed:
                return
            id_ = self._outbox.next_id()
            self._flush_waits[id_] = event
            wake = self._outbox.add_marker(("flush", id_))
        if wake:
            self._wake()
        if not event.wait(timeout):
            with self._lock:
                self._flush_waits.pop(id_, None)
            raise TimeoutError(f"flush did not complete within {timeout}s")
        with self._lock:
            ok = id_ in self._flushed_ok
            self._flushed_ok.discard(id_)
        if not ok and self._failure is not None:
            raise self._failure

    def close(self, timeout: float | None = 30.0) -> None:
        """Flush (up to ``timeout`` seconds), then close the connection.  Messages still
        without a report fail with SidecarUnavailableError."""
        if self._closed:
            return
        for sub in list(self._subs.values()):
            sub.close()  # its acks reach the sidecar before the flush below is answered
        try:
            if self._failure is None:
                self.flush(timeout)
        except (TimeoutError, DatabusError):
            pass
        finally:
            with self._lock:
                self._closed = True
                self._outbox.refusing = True
            self._wake()
            self._thread.join(5)
            self._fail_all(SidecarUnavailableError("the client was closed"))
            for s in (self._sock, self._wake_r, self._wake_w):
                s.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def statistics(self) -> ClientStatistics:
        """A snapshot: ``pending_reports``, ``delivered``, ``failed``, ``buffered_bytes``
        (see ClientStatistics)."""
        return ClientStatistics(
            pending_reports=len(self._outbox.futures),
            delivered=self._delivered,
            failed=self._failed,
            buffered_bytes=self._outbox.buffered,
        )

    # --- waiting ----------------------------------------------------------------------------

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already has wake-ups pending, or closed

    def _wait_for(self, future: DeliveryFuture, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._done_cond:
            self._waiters += 1
            try:
                while not future._done:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"no delivery report within {timeout}s")
                    self._done_cond.wait(remaining)
            finally:
                self._waiters -= 1

    def _wait_for_space(self, size: int) -> None:
        deadline = time.monotonic() + self.max_block_ms / 1000
        outbox = self._outbox
        with self._space:
            while outbox.buffered + size > self._max_buffer and outbox.buffered > 0:
                if self._failure is not None:
                    raise self._failure
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BufferExhaustedError(
                        wire.ErrorCode.BUFFER_EXHAUSTED,
                        f"{outbox.buffered} bytes waiting for the sidecar to read them stayed "
                        f"above max_buffer_bytes={self._max_buffer} for "
                        f"max_block_ms={self.max_block_ms}",
                    )
                self._space.wait(remaining)

    # --- the I/O thread ---------------------------------------------------------------------

    def _io_loop(self) -> None:
        """Serve the connection; when it is lost, fail what was pending (its outcome is
        unknown) and reconnect with backoff until it works or the client is closed."""
        while True:
            error = self._serve_connection()
            if error is None:
                return
            self._fail_all(error)
            if not self._reconnect():
                return

    def _reconnect(self) -> bool:
        delay = RECONNECT_BACKOFF_MIN
        while True:
            # Sleep on the wake-up socket, so close() cuts the wait short.
            readable, _, _ = select.select([self._wake_r], [], [], delay)
            if readable:
                try:
                    self._wake_r.recv(4096)
                except BlockingIOError:
                    pass
            if self._closed:
                return False
            try:
                self._sock.close()
                # A short timeout: close() waits for this thread.
                self._open(min(self._connect_timeout, RECONNECT_BACKOFF_MAX))
            except DatabusError as exc:
                log.debug("reconnecting to the sidecar: %s", exc)
                delay = min(delay * 2, RECONNECT_BACKOFF_MAX)
                continue
            with self._lock:
                self._failure = None
                self._outbox.refusing = self._closed
                self.reconnects += 1
            log.info("reconnected to the sidecar (%s)", self.server)
            return True

    def _serve_connection(self) -> DatabusError | None:
        """Run one connection until the client closes (None) or it fails (the error)."""
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ)
        sel.register(self._sock, selectors.EVENT_READ)
        # Each round's frames go into a bytearray of their own, kept until written: with one
        # buffer, a partial write (the sidecar reading slower than the app sends) left a
        # tail that the next round's append moved into a fresh allocation, megabytes at a
        # time, every round (most of the app's page faults while the sidecar lagged).
        pending: collections.deque[bytearray] = collections.deque()
        head = 0  # bytes of pending[0] already written
        written_marks: collections.deque = collections.deque()  # [end position, payload]
        position = 0  # bytes ever appended to the pending buffers
        sent = 0  # bytes ever written to the socket
        want_write = False
        try:
            for frame in self._early_frames:
                self._on_frame(frame)
            while True:
                # Sleep only when nothing was queued since the last take: senders wake this
                # thread only once it has said so (outbox.py), so what they queue while it
                # works goes out in the next round, in bigger frames.  With subscriptions,
                # look again now and then: one ended by the sidecar subscribes again after
                # a backoff.
                timeout = (RESUBSCRIBE_S if self._subs else None) if self._outbox.idle() else 0
                for key, _ in sel.select(timeout):
                    if key.fileobj is self._wake_r:
                        try:
                            self._wake_r.recv(4096)
                        except BlockingIOError:
                            pass
                        # A sender woke this thread: let it have the interpreter back once
                        # before taking.  Else, with the app's thread sending flat out, each
                        # wake-up took the one message queued (the sender, preempted on its
                        # core, sent again only once this thread slept), ~16 us a message in
                        # wake-ups and switches; now the round takes what the sender queues
                        # until it yields (a frame's worth) or blocks.  A lone message waits
                        # for no one (nobody else wants the interpreter).
                        time.sleep(0)
                    elif not self._read():
                        return None
                queue, payload = self._outbox.take()
                closed = self._closed
                out = bytearray()
                if queue:
                    position = self._encode(queue, out, position, payload)
                    # The queue's bytes count against max_buffer_bytes until its last
                    # frame is on the socket.
                    written_marks.append((position, payload))
                if self._subs:
                    position = self._consume_frames(out, position)
                if out:
                    pending.append(out)
                if pending:
                    n = self._write(pending, head)
                    if n:
                        sent += n
                        head += n
                        while pending and head >= len(pending[0]):
                            head -= len(pending.popleft())
                        self._release_written(written_marks, sent)
                if bool(pending) != want_write:
                    want_write = bool(pending)
                    sel.modify(
                        self._sock,
                        selectors.EVENT_READ | (selectors.EVENT_WRITE if want_write else 0),
                    )
                if closed:
                    return None
        except OSError as exc:
            return SidecarUnavailableError(f"connection to the sidecar lost: {exc}")
        except DatabusError as exc:
            return exc
        except Exception as exc:  # a bug here must not leave every future hanging
            log.exception("the SDK's I/O thread failed")
            return SidecarUnavailableError(f"the client's I/O thread failed: {exc!r}")
        finally:
            sel.close()

    def _write(self, pending: collections.deque, head: int) -> int:
        """Write what the socket takes of ``pending`` (its first buffer from ``head`` on) in
        one call; returns the bytes written."""
        first = memoryview(pending[0])[head:]
        try:
            if len(pending) == 1 or not _HAS_SENDMSG:
                return self._sock.send(first)
            return self._sock.sendmsg([first, *itertools.islice(pending, 1, WRITE_BUFFERS)])
        except BlockingIOError:
            return 0
        finally:
            first.release()

    def _consume_frames(self, out: bytearray, position: int) -> int:
        with self._lock:
            subs = list(self._subs.values())
        epoch, now = self._epoch, time.monotonic()
        for sub in subs:
            for frame in sub._frames(epoch, now):
                position += wire.append_frame(out, frame)
        return position

    def _encode(self, queue: list, out: bytearray, position: int, payload: int = 0) -> int:
        """Append ``queue`` to ``out`` as frames: runs of messages as produce frames (up to
        MAX_MESSAGES_PER_FRAME each, and under max_frame_bytes), flush markers as flush
        frames, ("frame", frame) markers as that frame.  ``payload``: the queued messages'
        bytes (as send() counted them)."""
        # Cutting frames by size costs a look at every message: only when they could
        # overflow one frame at all.
        by_size = payload + len(queue) * FRAME_OVERHEAD > self.max_frame_bytes
        run_start = 0
        for i, item in enumerate(queue):
            if type(item[0]) is not int:  # a ("flush", id), ("frame", frame) or ("checks", groups)
                position = self._append_produce(out, queue, run_start, i, position, by_size)
                marker = item[0]
                frame = (wire.flush(item[1]) if marker == "flush"
                         else wire.checks(item[1]) if marker == "checks" else item[1])
                position += wire.append_frame(out, frame)
                run_start = i + 1
        return self._append_produce(out, queue, run_start, len(queue), position, by_size)

    def _append_produce(self, out: bytearray, queue: list, start: int, end: int,
                        position: int, by_size: bool = False) -> int:
        # The queued tuples are already message arrays (send() builds them in that shape).
        limit = self.max_frame_bytes - FRAME_OVERHEAD if by_size else -1
        return position + wire.append_produce(out, queue, start, end, MAX_MESSAGES_PER_FRAME,
                                              limit)

    def _release_written(self, marks: collections.deque, sent: int) -> None:
        released = 0
        while marks and marks[0][0] <= sent:
            released += marks.popleft()[1]
        if released:
            self._outbox.release(released)
            # Senders waiting for room are woken once a quarter of the buffer is free, not
            # as soon as one message fits: woken per message, the app and this thread traded
            # the interpreter per message (a frame of one, ~2x the app's CPU per message)
            # for as long as the sidecar was the slower side.  Below the mark every release
            # wakes them, so a message too big for that room still goes once it fits.
            if self._outbox.buffered <= self._max_buffer * RESUME_SENDERS_AT:
                with self._space:
                    self._space.notify_all()

    def _read(self) -> bool:
        try:
            data = self._sock.recv(262144)
        except BlockingIOError:
            return True
        if not data:
            if self._closed:
                return False
            raise SidecarUnavailableError("the sidecar closed the connection")
        try:
            frames = self._decoder.feed(data)
        except wire.WireError as exc:
            raise ProtocolError(exc.code, f"bad frame from the sidecar: {exc}") from None
        for frame in frames:
            self._on_frame(frame)
        return True

    def _on_frame(self, frame: dict) -> None:
        kind = frame["type"]
        if kind == "reports":
            try:
                with_callbacks = self._resolve(frame["reports"])
            except (TypeError, IndexError, KeyError, ValueError) as exc:
                raise ProtocolError(
                    wire.ErrorCode.MALFORMED_FRAME, f"bad reports frame from the sidecar: {exc!r}"
                ) from None
            for future in with_callbacks:
                future._run_callbacks()
            if self._waiters:
                with self._done_cond:
                    self._done_cond.notify_all()
        elif kind == "flushed":
            event = self._flush_waits.pop(frame.get("id"), None)
            if event is not None:
                with self._lock:
                    self._flushed_ok.add(frame.get("id"))
                event.set()
        elif kind == "messages":
            sub = self._subs.get(frame.get("id"))
            if sub is not None:
                sub._on_messages(frame["messages"], self._epoch)
        elif kind == "subscribed":
            sub = self._subs.get(frame.get("id"))
            if sub is not None:
                sub._on_subscribed(frame)
        elif kind == "unsubscribed":
            sub = self._subs.get(frame.get("id"))
            if sub is not None:
                sub._on_unsubscribed(frame, RESUBSCRIBE_S)
        elif kind == "check":
            # the app's callback may take its time: never on this thread
            threading.Thread(target=self._answer_check, args=(frame.get("group"),
                             frame.get("txn")), name="databus-check", daemon=True).start()
        elif kind == "error":
            raise error_for(int(frame.get("code", -1)), str(frame.get("message")))
        # pong and future frame types need nothing

    def _resolve(self, items: list) -> list[DeliveryFuture]:
        """Resolve the futures that ``items`` (single or group reports) answer; returns
        those with callbacks to run.  No lock: sends go on meanwhile (see
        DeliveryFuture._run_callbacks for why callbacks are neither lost nor run twice).
        The C outbox resolves the runs of delivered items (``Outbox.resolve``); the items
        it leaves (errors, anything malformed) are answered here, one at a time, as the
        Python outbox's all are, so both give the same futures and the same errors."""
        with_callbacks: list[DeliveryFuture] = []
        pop = self._outbox.futures.pop
        resolve_c = getattr(self._outbox, "resolve", None)
        if resolve_c is None or type(items) is not list:
            for item in items:
                self._resolve_item(item, pop, with_callbacks)
            return with_callbacks
        i, n = 0, len(items)
        while i < n:
            i, delivered = resolve_c(items, i, with_callbacks)
            self._delivered += delivered
            if i < n:
                self._resolve_item(items[i], pop, with_callbacks)
                i += 1
        return with_callbacks

    def _resolve_item(self, item: list, pop: Callable, with_callbacks: list) -> None:
        """Resolve the futures one report item answers (``_resolve``)."""
        ids = item[0]
        if type(ids) is not list:  # one message
            ids, index = (ids,), -1
        else:
            index = 0
        if item[1] == 0:
            self._delivered += len(ids)
            for id_ in ids:
                future = pop(id_, None)
                if future is not None:
                    future._report = item
                    future._index = index
                    future._done = True
                    if future._callbacks is not None:
                        with_callbacks.append(future)
                index += 1
        else:
            self._failed += len(ids)
            for id_ in ids:
                future = pop(id_, None)
                if future is not None:
                    future._exc = error_for(item[1], str(item[2]))
                    future._done = True
                    if future._callbacks is not None:
                        with_callbacks.append(future)

    def _fail_all(self, exc: DatabusError) -> None:
        with self._lock:
            if self._failure is None and not self._closed:
                self._failure = exc
            # What was queued is answered (failed) here, so it must never go out later on a
            # new connection; nothing is buffered for the old one any more.  A wake-up that
            # was in flight went to the lost connection's loop: the outbox is disarmed, so
            # the first send on a new one wakes the I/O thread again.
            futures = self._outbox.fail()
            flushes, self._flush_waits = self._flush_waits, {}
            self._failed += len(futures)
        for future in futures.values():
            if not future._done:
                future._set(None, exc)
        for event in flushes.values():
            event.set()
        for sub in list(self._subs.values()):
            sub._lost(exc)
        with self._done_cond:
            self._done_cond.notify_all()
        with self._space:
            self._space.notify_all()
