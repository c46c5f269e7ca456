"""One app connection: read frames, hand messages upstream, write reports back.

Each connection runs a reader and a writer task.  The reader decodes frames in order.  A
produce frame goes through the hot path a frame at a time, not a message at a time: its
bytes are taken from the buffer.memory budget at once; each message is routed (a dict
lookup, the route plugins' plain functions) and partitioned (the partitioner's plain
function) into a *group* per (stream, topic, partition), keeping the frame's order inside
each group; each group is handed to its producer in one ``send_batch`` call, and comes back
as one group report per batch it landed in (protocol version 2; expanded to one report per
message for version 1 connections).  The writer coalesces everything queued into as few
frames as possible.  Output order is the order things were queued, so a ``flushed`` follows
the reports of every message before its flush.

Protocol violations (sidecar_wire.WireError) put an error frame at the end of the output
and close this connection only.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from databus.plugins import PluginError
from databus.protocol import sidecar_wire as wire
from databus.protocol.records import record_size_upper_bound
from databus.protocol.sidecar_wire import ErrorCode, WireError

from .router import RoutedMessage

if TYPE_CHECKING:
    from .app import Sidecar

log = logging.getLogger("databus.sidecar.ingress")

RECEIVE_BYTES = 256 * 1024
# Messages up to this size skip the per-message size check: far below any sane
# max.request.size (bigger ones are checked against the producer's own limit).
SMALL_MESSAGE = 64 * 1024
# Messages answered per reports frame (at most ~9 bytes of id each, plus a header per
# group): far below any max_frame_bytes.
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
    def __init__(self, sidecar: Sidecar, stream: trio.abc.Stream, name: str) -> None:
        self.sidecar = sidecar
        self.stream = stream
        self.name = name
        self._out: list[Any] = []  # dict frames, or lists of reports (one reports frame)
        self._cur: list | None = None
        self._cur_answered = 0  # messages the reports in _cur answer
        self._wake = trio.Event()
        self._woken = False
        self._fatal = False
        self._eof = False
        self.closed = False
        self.outstanding: set[int] = set()
        self._latency = sidecar.metrics.latency
        self._seq = 0
        self.version = wire.PROTOCOL_VERSION
        self._flushes: list[tuple[set[int], int]] = []

    # --- output ---------------------------------------------------------------------------

    def _queue_report(self, item: list) -> None:
        if self.closed:
            return
        if self.version < 2 and type(item[0]) is list:
            for one in wire.expand_report(item):
                self._queue_report(one)
            return
        cur = self._cur
        # Frames are bounded by the messages they answer (a group item answers many), so a
        # backlog never makes a frame bigger than an SDK's max_frame_bytes.
        answered = len(item[0]) if type(item[0]) is list else 1
        if cur is None or self._cur_answered + answered > MAX_REPORTS_PER_FRAME:
            cur = self._cur = []
            self._cur_answered = 0
            self._out.append(cur)
        self._cur_answered += answered
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
                    self.version = wire.check_hello(frame)
                    hello_done = True
                    self._queue_frame(sidecar.hello_reply(self.version))
                elif kind == "produce":
                    await self._produce(frame, arrival)
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

    async def _produce(self, frame: dict, arrival: float) -> None:
        sidecar = self.sidecar
        messages, sizes = wire.parse_produce(frame)
        if not sidecar.paused and sidecar.budget.try_acquire(sum(sizes)):
            await self._dispatch(messages, sizes, arrival)
            return
        # The slow path: buffer.memory is full (or a reload is swapping routes).  Take the
        # messages one at a time, each waiting for room until its arrival + max.block.ms, and
        # hand each upstream at once: what is held must drain for the rest to get room.
        for message, size in zip(messages, sizes):
            if await self._wait_for_room(message, size, arrival):
                await self._dispatch([message], [size], arrival)

    async def _dispatch(self, messages: list[tuple], sizes: list[int], arrival: float) -> None:
        """Route and partition ``messages`` (their bytes already taken from the budget) into
        groups, and queue each group on its producer."""
        sidecar = self.sidecar
        budget = sidecar.budget
        routes = sidecar.table.routes
        now_ms = int(time.time() * 1000)
        groups: dict[tuple, Group] = {}
        last_partition = last_topic = last_route = None
        # Holding `sending` keeps a reload from swapping routes (and retiring producers)
        # under this frame while it awaits metadata or a producer.
        sidecar.sending += 1
        try:
            current = route = None  # the stream of the previous message, and its route
            for (id_, stream, value, key, headers, partition, timestamp), size in zip(
                messages, sizes
            ):
                if stream != current:
                    route = routes.get(stream) or self._route(stream, id_)
                    if route is None:
                        current = None
                        budget.release(size)
                        continue
                    current = stream
                    topic, producer = route.topic, route.producer
                    partitions = producer.cached_partitions(topic)
                    partitioner = producer.partitioner
                    # The common case needs only the partitioner's plain function.
                    simple = partitions is not None and not route.route_fns
                    count = len(partitions) if partitions else 0
                if simple and partition is None and size <= SMALL_MESSAGE:
                    try:
                        p = partitions[partitioner(topic, key, value, count)]
                    except Exception as exc:
                        budget.release(size)
                        self._plugin_failed(route, exc, id_)
                        continue
                    t = topic
                else:
                    placed = await self._place(
                        route, stream, id_, key, value, headers, partition
                    )
                    if placed is None:
                        budget.release(size)
                        continue
                    t, key, value, headers, p = placed
                if p != last_partition or t is not last_topic or route is not last_route:
                    last_partition, last_topic, last_route = p, t, route
                    group = groups.get((route, t, p))
                    if group is None:
                        group = groups[(route, t, p)] = Group(self, route, t, p, arrival, now_ms)
                    ids, group_sizes, records = group.ids, group.sizes, group.records
                ids.append(id_)
                group_sizes.append(size)
                if timestamp is None:
                    timestamp = now_ms
                else:
                    group.own_timestamps = True
                records.append((timestamp, key, value, headers))
            for group in groups.values():
                await self._send_group(group)
        finally:
            sidecar.sending -= 1
            if sidecar.sending == 0 and sidecar.paused:
                sidecar.idle.set()

    async def _place(self, route, stream, id_, key, value, headers, partition):
        """The careful path for one message: route plugins, the topic's metadata (waited
        for), an explicit partition's existence, the size against the producer's limit.
        Returns (topic, key, value, headers, partition), or None with the message answered."""
        topic = route.topic
        if route.route_fns:
            msg = self._apply_route_plugins(
                route, RoutedMessage(stream, topic, key, value, headers, partition), id_
            )
            if msg is None:
                return None
            topic, key, value = msg.topic, msg.key, msg.value
            headers, partition = msg.headers, msg.partition
        producer = route.producer
        try:
            partitions = producer.cached_partitions(topic) or await producer.partitions_for(topic)
        except Exception as exc:
            if not _is_kafka_error(exc):
                raise
            self.report_error(id_, error_code_of(exc), str(exc))
            return None
        size = record_size_upper_bound(key, value, headers)
        if size > producer.max_record_size:
            self.report_error(
                id_, ErrorCode.MESSAGE_TOO_LARGE,
                f"message of about {size} bytes exceeds the producer's max.request.size or "
                f"buffer.memory ({producer.max_record_size} bytes)",
            )
            return None
        if partition is None:
            try:
                partition = partitions[producer.partitioner(topic, key, value, len(partitions))]
            except Exception as exc:
                self._plugin_failed(route, exc, id_)
                return None
        elif partition not in partitions:
            self.report_error(
                id_, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"partition {partition} of topic {topic!r} does not exist "
                f"(it has {len(partitions)} partitions)",
            )
            return None
        return topic, key, value, headers, partition

    def _plugin_failed(self, route, exc: Exception, id_: int) -> None:
        error = PluginError(route.handle.partitioner_plugin, "partitioner", exc)
        log.error("%s", error)
        self.report_error(id_, ErrorCode.PLUGIN_ERROR, str(error))

    def _apply_route_plugins(self, route, msg: RoutedMessage, id_: int) -> RoutedMessage | None:
        """Run the route plugins' functions; None (and the message answered) when one drops
        the message or raises."""
        for plugin, fn in route.route_fns:
            try:
                msg = fn(msg)
            except Exception as exc:
                error = PluginError(plugin, "route", exc)
                log.error("%s", error)
                self.report_error(id_, ErrorCode.PLUGIN_ERROR, str(error))
                return None
            if msg is None:
                route.stats.dropped += 1
                self._queue_report([id_, 0, route.topic, -1, -1, -1])
                return None
        return msg

    async def _send_group(self, group: Group) -> None:
        n = len(group.ids)
        group.remaining = n
        group.total = total = sum(group.sizes)
        stats = group.route.stats
        stats.messages_in += n
        stats.bytes_in += total
        seq = group.seq = self._seq = self._seq + 1
        self.outstanding.add(seq)
        records, group.records = group.records, []  # the producer holds them from here on
        if group.own_timestamps:
            group.timestamp = [record[0] for record in records]
        try:
            await group.route.producer.send_batch(group.topic, group.partition, records, group)
        except Exception as exc:
            if not _is_kafka_error(exc):
                log.exception("%s: queueing %d message(s) failed", self.name, n)
                exc = RuntimeError(f"{type(exc).__name__}: {exc}")  # UNKNOWN_SERVER_ERROR
            group.batch_done(0, n, -1, -1, exc)

    async def _wait_for_room(self, message: tuple, size: int, arrival: float) -> bool:
        """Take ``size`` bytes of buffer.memory for one message, waiting until ``arrival`` +
        its stream's max.block.ms at most, and wait out a reload swap; False (and the
        message answered) if not."""
        sidecar = self.sidecar
        budget = sidecar.budget
        id_ = message[0]
        route = sidecar.table.routes.get(message[1]) or self._route(message[1], id_)
        if route is None:
            return False
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

    def _group_done(
        self, group: Group, start: int, count: int, first_offset: int, append_ms: int,
        error: BaseException | None,
    ) -> None:
        """``count`` messages of ``group`` from its ``start``-th are done: answer them with
        one report, give their bytes back."""
        whole = count == len(group.ids)
        ids = group.ids if whole else group.ids[start : start + count]
        size = group.total if whole else sum(group.sizes[start : start + count])
        self.sidecar.budget.release(size)
        if error is None:
            stats = group.route.stats
            stats.messages_out += count
            stats.bytes_out += size
            self._latency.observe(time.monotonic() - group.arrival, count)
            if append_ms >= 0:
                timestamp = append_ms
            elif group.own_timestamps:
                timestamp = group.timestamp[start : start + count]
            else:
                timestamp = group.timestamp
            self._queue_report(
                [ids, 0, group.topic, group.partition, first_offset, timestamp]
            )
        else:
            code = error_code_of(error)
            self.sidecar.metrics.error(code, count)
            self._queue_report([ids, int(code), str(error) or type(error).__name__])
        group.remaining -= count
        if group.remaining <= 0:
            self._done(group.seq)

    def _done(self, seq: int) -> None:
        """Group ``seq`` has all its reports queued: forget it, and answer the flushes that
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


class Group:
    """The messages of one produce frame bound for one (stream, topic, partition), in frame
    order: queued on the producer together, answered a batch at a time (the producer's
    DeliverySink)."""

    __slots__ = (
        "arrival", "conn", "ids", "own_timestamps", "partition", "records", "remaining",
        "route", "seq", "sizes", "timestamp", "topic", "total",
    )

    def __init__(self, conn: Connection, route, topic: str, partition: int, arrival: float,
                 timestamp: int) -> None:
        self.conn = conn
        self.route = route
        self.topic = topic
        self.partition = partition
        self.arrival = arrival
        # The sidecar's clock (for messages without their own), or once queued, when some
        # had their own, every message's timestamp.
        self.timestamp: int | list[int] = timestamp
        self.own_timestamps = False
        self.ids: list[int] = []
        self.sizes: list[int] = []
        self.records: list[tuple] = []
        self.remaining = 0
        self.total = 0
        self.seq = 0

    def batch_done(self, start: int, count: int, first_offset: int, append_ms: int,
                   error: BaseException | None) -> None:
        self.conn._group_done(self, start, count, first_offset, append_ms, error)
