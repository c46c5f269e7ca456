"""One app connection: read frames, hand messages upstream, write reports back.

Each connection runs a reader and a writer task.  The reader decodes frames in order and,
for a produce frame, takes each message through the hot path: route lookup (a dict), the
route plugins' plain functions, the buffer.memory budget, the producer's ``send``.  Delivery
callbacks queue reports; the writer coalesces everything queued into as few frames as
possible.  Output order is the order things were queued, so a ``flushed`` follows the
reports of every message before its flush.

Protocol violations (sidecar_wire.WireError) put an error frame at the end of the output
and close this connection only.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from databus.plugins import PluginError
from databus.protocol import sidecar_wire as wire
from databus.protocol.sidecar_wire import ErrorCode, WireError

from .router import RoutedMessage

if TYPE_CHECKING:
    from .app import Sidecar

log = logging.getLogger("databus.sidecar.ingress")

RECEIVE_BYTES = 256 * 1024
MAX_REPORTS_PER_FRAME = 8192


def error_code_of(exc: BaseException) -> int:
    """The wire code for a producer exception: Kafka's code, or the sidecar's own."""
    name = getattr(exc, "name", None)
    if name == "BUFFER_EXHAUSTED":
        return ErrorCode.BUFFER_EXHAUSTED
    if name == "PRODUCER_CLOSED":  # shutdown gave up waiting for upstream
        return ErrorCode.SHUTTING_DOWN
    code = getattr(exc, "code", None)
    if isinstance(code, int) and code != 0:
        return code
    return ErrorCode.UNKNOWN_SERVER_ERROR


def _is_kafka_error(exc: BaseException) -> bool:
    from databus.client.errors import KafkaError

    return isinstance(exc, KafkaError)


class Connection:
    def __init__(self, sidecar: "Sidecar", stream: trio.abc.Stream, name: str) -> None:
        self.sidecar = sidecar
        self.stream = stream
        self.name = name
        self._out: list[Any] = []  # dict frames, or lists of reports (one reports frame)
        self._cur: list | None = None
        self._wake = trio.Event()
        self._woken = False
        self._fatal = False
        self._eof = False
        self.closed = False
        self.outstanding: set[int] = set()
        self._latency = sidecar.metrics.latency
        self._seq = 0
        self._flushes: list[tuple[set[int], int]] = []

    # --- output ---------------------------------------------------------------------------

    def _queue_report(self, item: list) -> None:
        if self.closed:
            return
        cur = self._cur
        if cur is None or len(cur) >= MAX_REPORTS_PER_FRAME:
            cur = self._cur = []
            self._out.append(cur)
        cur.append(item)
        if not self._woken:  # Event.set per report is measurable; once per wake-up is enough
            self._woken = True
            self._wake.set()

    def _queue_frame(self, frame: dict) -> None:
        self._cur = None
        self._out.append(frame)
        self._woken = True
        self._wake.set()

    def report_error(self, id_: int, code: int, message: str) -> None:
        self.sidecar.metrics.error(code)
        self._queue_report([id_, int(code), message])

    async def _writer(self) -> None:
        send_all = self.stream.send_all
        encode = wire.encode_frame
        while True:
            if not self._out:
                if self._fatal or self._eof:
                    return
                await self._wake.wait()
                self._wake = trio.Event()
                self._woken = False
                continue
            out, self._out, self._cur = self._out, [], None
            chunks = [
                encode({"type": "reports", "reports": item}) if type(item) is list
                else encode(item)
                for item in out
            ]
            try:
                await send_all(b"".join(chunks))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.closed = True  # the app is gone; its reader sees EOF next
                return

    # --- input ----------------------------------------------------------------------------

    async def run(self) -> None:
        sidecar = self.sidecar
        sidecar.metrics.connections += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer)
                try:
                    await self._reader()
                except WireError as exc:
                    log.warning("%s: closing connection: %s", self.name, exc)
                    sidecar.metrics.error(exc.code)
                    self._fatal = True
                    self._queue_frame(wire.error(exc.code, str(exc)))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    nursery.cancel_scope.cancel()
                    return
                # The writer sends what is queued, then stops; reports that arrive later for
                # a connection the app closed have nobody to go to.
                self._eof = True
                self._wake.set()
        except Exception:
            # Whatever breaks one connection must never reach the listener (and with it
            # every other connection).
            log.exception("%s: connection failed", self.name)
        finally:
            self.closed = True
            sidecar.metrics.connections -= 1
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _reader(self) -> None:
        sidecar = self.sidecar
        decoder = wire.FrameDecoder(sidecar.config.sidecar.max_frame_bytes)
        receive = self.stream.receive_some
        hello_done = False
        while True:
            data = await receive(RECEIVE_BYTES)
            if not data:
                if decoder.buffered:
                    raise WireError(
                        ErrorCode.MALFORMED_FRAME,
                        f"connection closed inside a frame ({decoder.buffered} bytes pending)",
                    )
                return
            arrival = time.monotonic()
            for frame in decoder.feed(data):
                kind = frame["type"]
                if not hello_done:
                    wire.check_hello(frame)
                    hello_done = True
                    self._queue_frame(sidecar.hello_reply())
                elif kind == "produce":
                    await self._produce(wire.parse_messages(frame), arrival)
                elif kind == "flush":
                    self._flush(wire.frame_int(frame, "id"))
                elif kind == "ping":
                    self._queue_frame(wire.pong(wire.frame_int(frame, "id")))
                elif kind == "hello":
                    raise WireError(ErrorCode.MALFORMED_FRAME, "hello sent twice")
                else:
                    raise WireError(ErrorCode.MALFORMED_FRAME, f"unknown frame type {kind!r}")

    def _flush(self, id_: int) -> None:
        if not self.outstanding:
            self._queue_frame(wire.flushed(id_))
            return
        self._flushes.append((set(self.outstanding), id_))
        self.sidecar.kick_producers()

    # --- the hot path ---------------------------------------------------------------------

    def _route(self, stream: str, id_: int):
        try:
            route = self.sidecar.table.lookup(stream)
        except PluginError as exc:
            log.error("%s", exc)
            self.report_error(id_, ErrorCode.PLUGIN_ERROR, str(exc))
            return None
        if route is None:
            self.report_error(
                id_, ErrorCode.UNKNOWN_STREAM,
                f"unknown stream {stream!r}: it is not in the sidecar's streams and there is "
                "no default_route",
            )
        return route

    async def _produce(self, messages: list[wire.Message], arrival: float) -> None:
        sidecar = self.sidecar
        budget = sidecar.budget
        delivered = self._delivered
        for id_, stream, value, key, headers, partition, timestamp in messages:
            # Re-read the table per message: a reload may swap it at any await below.
            route = sidecar.table.routes.get(stream) or self._route(stream, id_)
            if route is None:
                continue
            size = (len(value) if value else 0) + (len(key) if key else 0)
            if headers:
                for hk, hv in headers:
                    size += len(hk) + (len(hv) if hv else 0)
            if sidecar.paused or not budget.try_acquire(size):
                # The slow path: wait for room and/or a reload swap, then look the route
                # up again (a reload may have replaced it meanwhile).
                if not await self._wait_for_room(size, route, arrival, id_):
                    continue
                route = self._route(stream, id_)
                if route is None:
                    budget.release(size)
                    continue
            # From here to the end of send there is no checkpoint except send itself, which
            # the reload swap waits for (sidecar.sending).
            stats = route.stats
            stats.messages_in += 1
            stats.bytes_in += size
            topic = route.topic
            if route.route_fns:
                msg = RoutedMessage(stream, topic, key, value, headers, partition)
                for plugin, fn in route.route_fns:
                    try:
                        msg = fn(msg)
                    except Exception as exc:
                        msg = PluginError(plugin, "route", exc)
                        break
                    if msg is None:
                        break
                if msg is None or isinstance(msg, PluginError):
                    budget.release(size)
                    if msg is None:
                        stats.dropped += 1
                        self._queue_report([id_, 0, topic, -1, -1, -1])
                    else:
                        log.error("%s", msg)
                        self.report_error(id_, ErrorCode.PLUGIN_ERROR, str(msg))
                    continue
                topic, key, value = msg.topic, msg.key, msg.value
                headers, partition = msg.headers, msg.partition
            seq = self._seq = self._seq + 1
            self.outstanding.add(seq)
            sidecar.sending += 1
            try:
                future = await route.send(
                    topic, value, key=key, headers=headers, partition=partition,
                    timestamp_ms=timestamp,
                )
            except Exception as exc:
                budget.release(size)
                self._done(seq)
                if _is_kafka_error(exc):
                    self.report_error(id_, error_code_of(exc), str(exc))
                else:
                    # Inside send, only the partitioner is plugin code.
                    error = PluginError(route.handle.partitioner_plugin, "partitioner", exc)
                    log.error("%s", error)
                    self.report_error(id_, ErrorCode.PLUGIN_ERROR, str(error))
                continue
            finally:
                sidecar.sending -= 1
                if sidecar.sending == 0 and sidecar.paused:
                    sidecar.idle.set()
            future.add_done_callback(
                functools.partial(delivered, id_, seq, size, stats, arrival)
            )

    async def _wait_for_room(self, size: int, route, arrival: float, id_: int) -> bool:
        """Take ``size`` bytes of buffer.memory, waiting until ``arrival`` + max.block.ms at
        most, and wait out a reload swap; False (and the message answered) if not."""
        sidecar = self.sidecar
        budget = sidecar.budget
        if size > budget.limit:
            self.report_error(
                id_, ErrorCode.MESSAGE_TOO_LARGE,
                f"message of {size} bytes exceeds buffer.memory={budget.limit}",
            )
            return False
        left = arrival + route.max_block - time.monotonic()
        if not await budget.acquire(size, trio.current_time() + max(left, 0.0)):
            self.report_error(
                id_, ErrorCode.BUFFER_EXHAUSTED,
                f"buffer.memory={budget.limit} bytes stayed full for "
                f"max.block.ms={int(route.max_block * 1000)}",
            )
            return False
        if sidecar.paused and not await sidecar.wait_resumed():
            budget.release(size)
            self.report_error(id_, ErrorCode.SHUTTING_DOWN, "the sidecar is stopping")
            return False
        return True

    def _delivered(self, id_, seq, size, stats, arrival, future) -> None:
        self.sidecar.budget.release(size)
        try:
            md = future.result()
        except Exception as exc:
            self.report_error(id_, error_code_of(exc), str(exc) or type(exc).__name__)
        else:
            stats.messages_out += 1
            stats.bytes_out += size
            self._latency.observe(time.monotonic() - arrival)
            self._queue_report([id_, 0, md.topic, md.partition, md.offset, md.timestamp])
        self._done(seq)

    def _done(self, seq: int) -> None:
        """Message ``seq`` has its report queued: forget it, and answer the flushes that
        were waiting only for it."""
        self.outstanding.discard(seq)
        if self._flushes:
            still = []
            for pending, flush_id in self._flushes:
                pending.discard(seq)
                if pending:
                    still.append((pending, flush_id))
                else:
                    self._queue_frame(wire.flushed(flush_id))
            self._flushes = still
