"""The trio-native Kafka producer: ``Producer``, ``DeliveryFuture``, ``RecordMetadata``.

::

    async with Producer("localhost:9092", {"linger.ms": 5, "compression.type": "lz4"}) as p:
        fut = await p.send("events", b"value", key=b"k", headers=[("h", b"v")])
        meta = await fut.wait()          # RecordMetadata(topic, partition, offset, timestamp)

``send`` chooses the partition (explicit partition > partitioner), waits for
``buffer.memory`` space for at most ``max.block.ms`` (then BufferExhaustedError: nothing was
queued), encodes the record into its partition's open batch (accumulator.py) and returns a
DeliveryFuture at once.  The sender (sender.py) delivers in the background.  Every future
ends with RecordMetadata or an exception — delivery timeout, a non-retriable broker error,
or ProducerClosedError if the producer is torn down first.  ``__aexit__`` flushes (unless
the block was cancelled), then closes.  Settings: config.ProducerConfig (Kafka's names).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from time import time as _wall_clock  # a record's CreateTime
from typing import Any, NamedTuple

import trio

from ..protocol.codecs import CODEC_BY_NAME
from ..protocol.records import as_bytes, record_size_upper_bound
from ..protocol.speedups import load_native
from ..service import latency_trace
from . import errors
from .accumulator import BatchResult, DeliverySink, ProducerBatch, RecordAccumulator
from .cluster import Cluster
from .config import ProducerConfig
from .connection import OpenStream
from .partitioners import PARTITIONERS, DefaultPartitioner, Partitioner
from .sender import Sender
from .transactions import PreparedTransaction, TransactionError, TransactionManager

log = logging.getLogger(__name__)


class RecordMetadata(NamedTuple):
    """Where a record landed.  ``offset`` is -1 with acks=0; ``timestamp`` is the broker's
    LogAppendTime when the topic uses it, else the record's CreateTime."""

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True)
class ProducerStatistics:
    """``Producer.statistics()``: a snapshot, figures since the producer started
    (docs/operations.md describes each; the sidecar exports them as gauges)."""

    batches_delivered: int
    batch_size_avg: float  # bytes per batch as sent (header + compressed records)
    batch_size_max: int
    records_per_batch_avg: float
    compression_rate_avg: float  # compressed / uncompressed bytes, Kafka's compression-rate-avg
    buffered_bytes: int
    buffer_memory: int
    queued_batches: int
    in_flight_requests: int
    in_flight_batches: int
    incomplete_records: int
    delivered_records: int
    failed_records: int
    producer_id: int  # -1 without idempotence
    retries: int
    brokers: int
    connections: int
    connections_opened: int


class _RecordHandle:
    """DeliveryFuture's fields; the C extension's RecordHandle is its faster twin (a C
    constructor: send() makes one per record)."""

    __slots__ = ("_batch", "_index", "timestamp")

    def __init__(self, batch: BatchResult, index: int, timestamp: int = -1) -> None:
        self._batch = batch
        self._index = index
        self.timestamp = timestamp


# the C twin, _producer_speedups.c beside this module
_handle_native = load_native(name="_producer_speedups", package=__package__)
_HandleBase: type = _RecordHandle if _handle_native is None else _handle_native.RecordHandle


class DeliveryFuture(_HandleBase):
    """The outcome of one send: ``await fut.wait()``, or ``done()`` / ``result()`` /
    ``exception()`` / ``add_done_callback(cb)`` (cb(fut) runs once, when it completes, in the
    producer's task; it must not block).

    A light handle, as Kafka's FutureRecordMetadata: its batch's shared outcome
    (accumulator.BatchResult) and the record's index in the batch.  The RecordMetadata is
    made when asked (offset = the batch's base offset + index), and nothing is done for the
    record when its batch completes unless someone waits or asked for a callback."""

    __slots__ = ()  # the fields are the base's: (batch, index, timestamp)

    @property
    def topic(self) -> str:
        return self._batch.topic

    @property
    def partition(self) -> int:
        return self._batch.partition

    def done(self) -> bool:
        return self._batch.done

    def result(self) -> RecordMetadata:
        """The RecordMetadata; raises the delivery error, or RuntimeError if not done yet."""
        batch = self._batch
        if not batch.done:
            raise RuntimeError("delivery not complete yet; await wait() first")
        if batch.error is not None:
            raise batch.error
        base = batch.base_offset
        return RecordMetadata(
            batch.topic, batch.partition, base + self._index if base >= 0 else -1,
            self.timestamp if batch.append_ms < 0 else batch.append_ms,
        )

    def exception(self) -> BaseException | None:
        if not self._batch.done:
            raise RuntimeError("delivery not complete yet; await wait() first")
        return self._batch.error

    async def wait(self) -> RecordMetadata:
        batch = self._batch
        if not batch.done:
            if batch.event is None:
                batch.event = trio.Event()
            await batch.event.wait()
        return self.result()

    def add_done_callback(self, callback: Callable[[DeliveryFuture], Any]) -> None:
        batch = self._batch
        if batch.done:
            _run_callback(callback, self)
        elif batch.callbacks is None:
            batch.callbacks = [(self._index, self, callback)]
        else:
            batch.callbacks.append((self._index, self, callback))

    def __repr__(self) -> str:
        state = "pending" if not self._batch.done else (self._batch.error or self.result())
        return f"<DeliveryFuture {self.topic}-{self.partition} {state!r}>"


def _complete_batch(result: BatchResult, base_offset: int, append_ms: int,
                    error: BaseException | None) -> None:
    """Its records' futures are done: wake the waiters, run the callbacks in record order."""
    if result.done:
        return
    result.base_offset, result.append_ms, result.error = base_offset, append_ms, error
    result.done = True
    if result.event is not None:
        result.event.set()
    callbacks, result.callbacks = result.callbacks, None
    if callbacks:
        callbacks.sort(key=_by_index)  # stable: a record's own callbacks keep their order
        for _, future, callback in callbacks:
            _run_callback(callback, future)


def _by_index(entry: tuple) -> int:
    return entry[0]


_EMPTY_RECORD_BOUND = record_size_upper_bound(b"", b"")


_trace = latency_trace.recorder("producer")


def _stamp_appends(queued, now_ms: float) -> None:
    """Latency trace: the batches a bulk append filled (the last two of the partition's
    queue at most) note their record count at ``now_ms``."""
    for batch in list(queued or ())[-2:]:
        stamps = batch.trace_appends
        if stamps is None:
            stamps = batch.trace_appends = []
        if not stamps or stamps[-1][0] != batch.record_count:
            stamps.append((batch.record_count, now_ms))


# How late trio's timers may fire: epoll waits in whole milliseconds, rounded up.
TIMER_GRANULARITY_MS = 1.0


def _now_ms() -> float:
    """trio's clock in ms: the accumulator's clock, read when it starts a batch."""
    return trio.current_time() * 1000.0


def _run_callback(callback: Callable, future: DeliveryFuture) -> None:
    # A failing application callback must not take the sender (and every other delivery)
    # down with it: log it, as Kafka's producer does.
    try:
        callback(future)
    except Exception:
        log.exception("delivery callback %r raised", callback)


def _normalize_headers(headers) -> tuple[tuple[str, bytes | None], ...]:
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for item in items:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise TypeError(f"headers must be (str, bytes | None) pairs, got {item!r}") from None
        if not isinstance(name, str):
            raise TypeError(f"header key must be str, got {type(name).__name__}")
        if isinstance(value, str):
            value = value.encode()
        elif value is not None and not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"header {name!r} value must be bytes or None, got {type(value).__name__}")
        out.append((name, None if value is None else bytes(value)))
    return tuple(out)


class Producer:
    """Trio-native Kafka producer; use as ``async with Producer(bootstrap, config) as p``.

    ``open_stream(host, port)`` replaces the TCP connect (see connection.OpenStream)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        config: Mapping[str, Any] | ProducerConfig | None = None,
        *,
        partitioner: Partitioner | None = None,
        open_stream: OpenStream | None = None,
    ) -> None:
        self.config = (
            config if isinstance(config, ProducerConfig) else ProducerConfig.from_kafka(config or {})
        )
        self._partitioner = partitioner or PARTITIONERS[self.config.partitioner]()
        # The default partitioner's sticky partitions, read by send() for keyless records
        self._sticky = (self._partitioner.sticky
                        if type(self._partitioner) is DefaultPartitioner else None)
        self._cluster = Cluster(bootstrap_servers, self.config, open_stream=open_stream)
        self._accumulator = RecordAccumulator(
            batch_size=self.config.batch_size,
            linger_ms=self.config.linger_ms,
            buffer_memory=self.config.buffer_memory,
            delivery_timeout_ms=self.config.delivery_timeout_ms,
            retry_backoff_ms=self.config.retry_backoff_ms,
            retry_backoff_max_ms=self.config.retry_backoff_max_ms,
            codec=CODEC_BY_NAME[self.config.compression_type],
            max_in_flight=self.config.max_in_flight_requests_per_connection,
            on_batch_complete=getattr(self._partitioner, "batch_completed", None),
            timer_granularity_ms=TIMER_GRANULARITY_MS,
        )
        self._sender = Sender(self._cluster, self._accumulator, self.config, self._batch_done)
        self._max_record_size = min(self.config.max_request_size, self.config.buffer_memory)
        self._space_freed = trio.Event()
        self._all_delivered = trio.Event()
        self._incomplete = 0
        self._closed = False
        self._started = False
        self._open = False  # started and not closed: send()'s one check
        self._stack: contextlib.AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self.delivered = 0
        self.failed = 0
        self._last_failure: BaseException | None = None
        self._txn = (TransactionManager(self._cluster, self._sender, self.config)
                     if self.config.transactional_id is not None else None)
        self._failed_at_begin = 0

    # -- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> Producer:
        self._stack = contextlib.AsyncExitStack()
        await self._stack.enter_async_context(self._running())
        return self

    @contextlib.asynccontextmanager
    async def _running(self):
        async with self._cluster.running() as nursery:
            self._nursery = nursery
            await nursery.start(self._sender.run)
            nursery.start_soon(self._refresh_metadata_periodically)
            self._started = self._open = True
            try:
                yield
            finally:
                self._closed, self._open = True, False

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None or not issubclass(exc_type, trio.Cancelled):
                try:
                    await self.flush()
                except errors.KafkaError:
                    pass
        finally:
            await self.close()
        return False

    async def close(self) -> None:
        """Stop at once: queued and in-flight records fail with ProducerClosedError.
        (Leaving the ``async with`` block flushes first.)"""
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()
        self._closed, self._open = True, False

    async def _refresh_metadata_periodically(self) -> None:
        interval = self.config.metadata_max_age_ms / 1000
        while True:
            await trio.sleep(interval)
            if self._cluster.wanted_topics:
                self._sender.request_metadata_refresh()

    # -- sending -------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> DeliveryFuture:
        """Queue one record and return its DeliveryFuture (see the module docstring)."""
        if not self._open or self._sender.fatal is not None:
            self._check_open()
        if value is not None and type(value) is not bytes:
            value = as_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = as_bytes(key, "key")
        if headers:
            headers = _normalize_headers(headers)
            size = record_size_upper_bound(key, value, headers)
        else:
            # record_size_upper_bound without a call: the empty record's bound plus the
            # payloads (a null one counts 4 bytes too many; the exact figure is made below
            # before any record is refused)
            headers = ()
            size = _EMPTY_RECORD_BOUND
            if value is not None:
                size += len(value)
            if key is not None:
                size += len(key)
        cfg = self.config
        if size > self._max_record_size and (
                record_size_upper_bound(key, value, headers) > self._max_record_size):
            size = record_size_upper_bound(key, value, headers)
            raise errors.MessageTooLargeError(
                f"record of about {size} bytes exceeds max.request.size={cfg.max_request_size} "
                f"or buffer.memory={cfg.buffer_memory}"
            )
        # The clock is read only when waiting or starting a batch: not per record.
        now = None
        partitions = self._cluster.partition_ids.get(topic)  # partitions_for(), inline
        if partitions is None:
            now = trio.current_time()  # max.block.ms counts from here (metadata + room)
            partitions = await self._cluster.wait_for_topic(topic, cfg.max_block_ms / 1000)
        if partition is None:
            index = -1
            if key is None and self._sticky is not None:
                index = self._sticky.get(topic, -1)  # the default partitioner's, no call
            if not 0 <= index < len(partitions):
                index = self._partitioner(topic, key, value, len(partitions))
            partition = partitions[index]
        elif partition not in partitions:
            raise errors.UnknownTopicOrPartitionError(
                f"partition {partition} of topic {topic!r} does not exist "
                f"(it has {len(partitions)} partitions)"
            )
        if self._txn is not None:
            await self._txn.add_partition((topic, partition))
        acc = self._accumulator
        if acc.buffered_bytes + size > acc.buffer_memory:  # has_room(), inline: once per record
            now = await self._wait_for_room(
                size, trio.current_time() if now is None else now, topic
            )
        if timestamp_ms is None:
            timestamp_ms = int(_wall_clock() * 1000)
        elif type(timestamp_ms) is not int:
            raise TypeError(f"timestamp_ms must be an int (ms), not {type(timestamp_ms).__name__}")
        if self._incomplete == 0:
            self._all_delivered = trio.Event()
        self._incomplete += 1
        batch, count = acc.append_record(topic, partition, timestamp_ms, key, value, headers,
                                         _now_ms if now is None else (lambda: now * 1000.0))
        future = DeliveryFuture(batch.result, count - 1, timestamp_ms)
        if count == 1 or batch.closed:
            # A new batch (its linger timer starts) or a full one: let the sender run now, so
            # a caller sending in a tight loop still gets its batches on the wire as they fill.
            # Shielded: the record is queued, so the caller must not see a cancellation.
            self._sender.wakeup()
            await trio.lowlevel.cancel_shielded_checkpoint()
        return future

    async def send_batch(
        self,
        topic: str,
        partition: int,
        records: Sequence[tuple[int, bytes | None, bytes | None, Any]],
        sink: DeliverySink,
    ) -> None:
        """Queue many records for one partition at once: the bulk path of the sidecar.

        ``records`` are ``(timestamp_ms, key, value, headers)`` with bytes or None payloads
        and headers a tuple of (str, bytes | None) pairs, already checked by the caller
        (each no larger than ``max_record_size``), and ``partition`` one of
        ``partitions_for(topic)``.  ``sink.batch_done(start, count, first_offset, append_ms,
        error)`` is called once per batch the records land in, instead of a future per
        record.  Waits while buffer.memory is full, up to max.block.ms; the group is then
        queued whole, so it may pass buffer.memory by its own size.
        """
        self._check_open()
        if self._txn is not None:
            await self._txn.add_partition((topic, partition))
        now = trio.current_time()
        if not self._accumulator.has_room(1):
            now = await self._wait_for_room(1, now, topic)
        await self._queue(topic, partition, records, sink, now * 1000.0)

    async def send_columns(
        self,
        topic: str,
        partition: int,
        buffers: list,
        rows: tuple[int, int],
        rewrite: tuple[str, bytes, bytes],
        skipped: list[int],
        sink: DeliverySink,
    ) -> None:
        """send_batch for records already in column buffers (a consumer's RecordColumns,
        ``columns.ColumnBuffers.buffers``): rows ``rows[0]..rows[1]``, each re-encoded with
        one more header, ``rewrite[0]`` = ``rewrite[1]`` + its source offset, and the
        ``skipped`` rows left out (``records.scan_columns``, which also finds a row larger
        than ``max_record_size``: the caller stops before it).  No Python object per
        record: the mirror's copy path (databus/mirror/engine.py).  ``sink`` as send_batch's,
        its records numbered in row order without the skipped rows."""
        self._check_open()
        if self._txn is not None:
            await self._txn.add_partition((topic, partition))
        now = trio.current_time()
        if not self._accumulator.has_room(1):
            now = await self._wait_for_room(1, now, topic)
        count = rows[1] - rows[0] - len(skipped)
        if count <= 0:
            return
        if self._incomplete == 0:
            self._all_delivered = trio.Event()
        self._incomplete += count
        if self._accumulator.append_columns(topic, partition, buffers, rows, rewrite, skipped,
                                            sink, now * 1000.0):
            self._sender.wakeup()
            await trio.lowlevel.cancel_shielded_checkpoint()

    @property
    def max_record_size(self) -> int:
        """Largest record (by record_size_upper_bound) that send and send_batch take."""
        return self._max_record_size

    def cached_partitions(self, topic: str) -> list[int] | None:
        """Partition ids of ``topic`` if metadata is at hand, else None (no waiting)."""
        return self._cluster.partitions_for(topic)

    @property
    def partitioner(self) -> Partitioner:
        return self._partitioner

    @property
    def sticky_partitions(self) -> dict[str, int] | None:
        """The default partitioner's current sticky partition index per topic (None with
        another partitioner): where it puts a keyless record, when in range, without a
        call (send() and the sidecar's place_frame read it per record)."""
        return self._sticky

    def _check_open(self) -> None:
        if not self._open:
            raise errors.ProducerClosedError(
                "producer is closed" if self._closed else "use the producer inside `async with`"
            )
        if self._sender.fatal is not None:
            raise self._sender.fatal

    async def _queue(self, topic, partition, records, sink, now_ms) -> None:
        if not records:
            return
        if self._incomplete == 0:
            self._all_delivered = trio.Event()
        self._incomplete += len(records)
        appended = self._accumulator.append_many(topic, partition, records, sink, now_ms)
        if _trace is not None:
            _stamp_appends(self._accumulator.batches.get((topic, partition)), now_ms)
        if appended:
            # A new batch (its linger timer starts) or a full one: let the sender run now, so
            # a caller sending in a tight loop still gets its batches on the wire as they fill.
            # Shielded: the records are queued, so the caller must not see a cancellation.
            self._sender.wakeup()
            await trio.lowlevel.cancel_shielded_checkpoint()

    def _batch_done(
        self, batch: ProducerBatch, base_offset: int, append_ms: int, error: BaseException | None
    ) -> None:
        n = batch.record_count
        _complete_batch(batch.result, base_offset, append_ms, error)
        for sink, start, count, index in batch.segments:
            first = base_offset + index if base_offset >= 0 else -1
            try:
                sink.batch_done(start, count, first, append_ms, error)
            except Exception:
                log.exception("delivery sink %r raised", sink)
        if error is None:
            self.delivered += n
        else:
            self.failed += n
            self._last_failure = error
        self._incomplete -= n
        if self._incomplete <= 0:
            self._incomplete = 0
            self._all_delivered.set()
        self._space_freed.set()
        self._space_freed = trio.Event()

    async def _wait_for_room(self, size: int, now: float, topic: str) -> float:
        """Wait until ``size`` bytes fit in buffer.memory; max.block.ms counts from ``now``
        (it covers the metadata wait too, as in Kafka).  Returns the time it ended."""
        acc = self._accumulator
        cfg = self.config
        deadline = now + cfg.max_block_ms / 1000
        while not acc.has_room(size):
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                raise errors.BufferExhaustedError(
                    f"buffer.memory={cfg.buffer_memory} bytes stayed full for "
                    f"max.block.ms={cfg.max_block_ms}; record for {topic} not queued"
                )
            with trio.move_on_after(remaining):
                await self._space_freed.wait()
            if self._closed:
                raise errors.ProducerClosedError("producer closed while waiting for buffer space")
        return trio.current_time()

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now (ignoring linger.ms) and wait until every record sent so
        far is delivered or failed.  ``timeout`` in seconds; RequestTimedOutError on expiry."""
        if self._incomplete == 0:
            return
        self._accumulator.flushing += 1
        self._sender.wakeup()
        try:
            with trio.move_on_after(math.inf if timeout is None else timeout):
                while self._incomplete:
                    await self._all_delivered.wait()
                return
            raise errors.RequestTimedOutError(
                f"flush: {self._incomplete} record(s) still undelivered after {timeout}s"
            )
        finally:
            self._accumulator.flushing -= 1

    # -- transactions (transactional.id; transactions.py) --------------------------------

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise TransactionError("transactions need transactional.id")
        return self._txn

    async def init_transactions(self) -> None:
        """Get the transactional id's producer id and epoch (fencing older instances, and
        aborting what one of them left open)."""
        self._check_open()
        await self._transactions().init()

    def begin_transaction(self) -> None:
        self._transactions().begin()
        self._failed_at_begin = self.failed

    async def add_partitions_to_transaction(self, partitions) -> None:
        """Add ``partitions`` ((topic, partition) pairs) to the open transaction in one
        request, ahead of sending to them (a send to a partition not yet added adds it
        alone, one request each: Kafka's producer batches them likewise)."""
        await self._transactions().add_partitions(partitions)

    async def send_offsets_to_transaction(self, offsets, group_id: str) -> None:
        """Commit ``{(topic, partition): next offset}`` of consumer group ``group_id`` with
        this transaction (the consume-transform-produce loop)."""
        await self._transactions().send_offsets(dict(offsets), group_id)

    async def commit_transaction(self) -> None:
        """Deliver everything sent in the transaction, then commit it.  If a record failed,
        raises TransactionError: abort the transaction (``abort_transaction``)."""
        txn = self._transactions()
        await self.flush()
        if self.failed > self._failed_at_begin:
            if isinstance(self._last_failure, (errors.ProducerFencedError,
                                               errors.InvalidProducerEpochError)):
                # a newer instance took the transactional id while records were in flight:
                # fenced, as Kafka's producer reports it (not "abort and retry")
                raise errors.ProducerFencedError(
                    f"the producer was fenced by a newer instance: {self._last_failure}")
            raise TransactionError(
                f"{self.failed - self._failed_at_begin} record(s) of the transaction failed; "
                "abort it")
        await txn.end(True)

    async def prepare_transaction(self) -> PreparedTransaction | None:
        """Deliver everything sent in the transaction and leave it open, for another
        process to commit or abort (``databus.client.complete_transactions``): the first
        phase of a two-phase commit (KIP-939's ``prepareTransaction``).  None if the
        transaction holds nothing.  The producer can do nothing more but close; a failed
        record raises as ``commit_transaction`` does."""
        txn = self._transactions()
        await self.flush()
        if self.failed > self._failed_at_begin:
            if isinstance(self._last_failure, (errors.ProducerFencedError,
                                               errors.InvalidProducerEpochError)):
                raise errors.ProducerFencedError(
                    f"the producer was fenced by a newer instance: {self._last_failure}")
            raise TransactionError(
                f"{self.failed - self._failed_at_begin} record(s) of the transaction failed")
        return txn.prepare()

    async def abort_transaction(self) -> None:
        """Abort the transaction: its records are never visible to read_committed readers."""
        txn = self._transactions()
        try:
            await self.flush()
        except errors.KafkaError as exc:
            log.warning("flush before abort failed: %s", exc)
        await txn.end(False)

    async def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic`` (waits for metadata up to max.block.ms)."""
        parts = self._cluster.partitions_for(topic)
        if parts is None:
            parts = await self._cluster.wait_for_topic(topic, self.config.max_block_ms / 1000)
        return parts

    def statistics(self) -> ProducerStatistics:
        """A snapshot: delivered batches (count, average and largest size in bytes as sent,
        records per batch, compressed/uncompressed ratio), buffered bytes, queued batches,
        in-flight requests, pending records..."""
        acc = self._accumulator
        sender = self._sender
        state = sender.idempotence
        batches = sender.batches_delivered
        return ProducerStatistics(
            batches_delivered=batches,
            batch_size_avg=sender.batch_bytes / batches if batches else 0.0,
            batch_size_max=sender.batch_bytes_max,
            records_per_batch_avg=self.delivered / batches if batches else 0.0,
            compression_rate_avg=(
                sender.batch_bytes / sender.batch_bytes_uncompressed if batches else 1.0
            ),
            buffered_bytes=acc.buffered_bytes,
            buffer_memory=acc.buffer_memory,
            queued_batches=acc.queued_batches,
            in_flight_requests=sum(self._sender.in_flight.values()),
            in_flight_batches=len(self._sender.in_flight_batches),
            incomplete_records=self._incomplete,
            delivered_records=self.delivered,
            failed_records=self.failed,
            producer_id=state.producer_id if state else -1,
            retries=self._sender.retries,
            brokers=len(self._cluster.brokers),
            connections=len(self._cluster.connected_nodes()),
            connections_opened=self._cluster.connections_opened,
        )
