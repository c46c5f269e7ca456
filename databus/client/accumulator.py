"""The producer's record accumulator: a plain data structure, no I/O, clock passed in.

It owns the producer's queued data: per topic-partition deques of ProducerBatch, the memory
accounting against ``buffer.memory``, and the decisions "which partitions are ready to send"
(batch full, ``linger.ms`` elapsed, flush requested, retry backoff over) and "what goes in
the next request to broker N" (one batch per partition, up to ``max.request.size``).  The
sender (sender.py) asks, sends, and reports back; every method takes ``now_ms`` so the
logic is tested without sockets or sleeps (as aiokafka's message_accumulator is separate
from its sender).

Ordering: up to ``max_in_flight`` batches of one partition may be in flight (pipelined, each
in its own request).  When one fails and is put back for a retry, the partition enters
*recovery*: batches return to the queue in creation order, and the partition sends one batch
at a time, after everything in flight has come back, until the retried batches are through.
With the idempotent producer the broker rejects any batch after a missing one (sequence
numbers), so this keeps the order across retries; without idempotence and with
``max_in_flight > 1`` retries may reorder, as in Kafka.
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..protocol import records as _records  # append_record: C or Python, chosen at import
from ..protocol.records import BatchBuilder
from ..protocol.types import TopicPartition
from .backoff import ExponentialBackoff


class DeliverySink(Protocol):
    """Who learns the outcome of records appended together by ``append_many``: the sidecar's
    per-partition group of an app's frame, the mirror's chunk (Producer.send's records
    have no sink: their futures read the batch's BatchResult)."""

    def batch_done(
        self, start: int, count: int, first_offset: int, append_ms: int,
        error: BaseException | None,
    ) -> None:
        """Records ``start .. start+count-1`` of what was appended for this sink are done:
        delivered at ``first_offset`` onwards (-1 with acks=0; ``append_ms`` the broker's
        LogAppendTime or -1 for CreateTime), or failed with ``error``."""


class BatchResult:
    """The outcome of one batch, shared by the futures of its records (Kafka's
    ProduceRequestResult): ``send()`` makes no per-record entry in the batch, only a light
    handle (producer.DeliveryFuture) that holds this and its record's index, and reads its
    metadata from here when asked (offset = base_offset + index).  ``complete`` is called once;
    ``event`` (anything with ``set()``: the producer's trio.Event, made only when someone
    waits) and ``callbacks`` (``(index, future, callback)``, only when someone asked) are
    told then.  A separate object, not the batch, so that kept futures do not keep the
    batch's bytes alive."""

    __slots__ = ("append_ms", "base_offset", "callbacks", "done", "error", "event",
                 "partition", "topic")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.append_ms = -1
        self.error: BaseException | None = None
        self.done = False
        self.event: Any = None
        self.callbacks: list[tuple[int, Any, Callable]] | None = None


@dataclass(eq=False)
class ProducerBatch:
    """Records for one partition, encoded as they arrive (records.BatchBuilder), sent and
    retried as one RecordBatch.  ``segments`` say whom to tell: ``(sink, start, count,
    index)`` is ``count`` records of ``sink``'s, its ``start``-th onwards, at this batch's
    record ``index`` onwards — one entry per run of records, not per record.  Records
    appended by ``append_record`` (Producer.send) have no segment: their futures read
    ``result``."""

    topic: str
    partition: int
    created_ms: float
    deadline_ms: float
    builder: BatchBuilder
    segments: list[tuple[DeliverySink, int, int, int]] = field(default_factory=list)
    attempts: int = 0
    retry_at_ms: float = 0.0
    closed: bool = False  # no more appends (full, or drained once)
    # Idempotence: fixed at the first drain and kept across retries so the broker dedups.
    base_sequence: int = -1
    payload: bytes | None = None
    done: bool = False
    accounted: int = 0  # bytes charged to buffer.memory
    order: int = 0  # creation order within the accumulator
    in_flight: bool = False
    last_error: BaseException | None = None  # why the last attempt failed, for the report
    # The latency trace's (record count, trio ms) after each bulk append, when it is on
    # (databus/service/latency_trace.py): when the batch's records were queued.
    trace_appends: list[tuple[int, float]] | None = None
    result: BatchResult = field(init=False)

    def __post_init__(self) -> None:
        self.result = BatchResult(self.topic, self.partition)

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def record_count(self) -> int:
        return self.builder.record_count

    @property
    def size(self) -> int:
        return self.builder.uncompressed_size

    def build(self, producer_id: int, producer_epoch: int, base_sequence: int,
              transactional: bool = False) -> bytes:
        """The batch bytes with this producer state (compressed once, however often called)."""
        self.builder.set_producer_state(producer_id, producer_epoch, base_sequence,
                                        transactional)
        self.base_sequence = base_sequence
        self.payload = self.builder.build()
        return self.payload

    def reset_payload(self) -> None:
        """Forget the built bytes and sequence (producer id was reset): rebuilt on next drain."""
        self.payload = None
        self.base_sequence = -1


class RecordAccumulator:
    """Queued batches per partition plus memory accounting; see the module docstring."""

    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: float,
        buffer_memory: int,
        delivery_timeout_ms: float,
        retry_backoff_ms: float,
        retry_backoff_max_ms: float | None = None,
        codec: int = 0,
        max_in_flight: int = 1,
        on_batch_complete: Callable[[str, int], None] | None = None,
        timer_granularity_ms: float = 0.0,
    ) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        # A batch this close to its linger counts as lingered, and ready() asks to be woken
        # that much earlier: the caller's timers wake up to this late (trio's on epoll:
        # whole-ms timeouts rounded up), which made every batch wait linger.ms plus ~0.6 ms
        # on average.  So a batch waits linger.ms at most, as Kafka documents it ("the upper
        # bound on the delay for batching"; Java's whole-ms clock also sends within 1 ms
        # before it).
        self.linger_due_ms = linger_ms - timer_granularity_ms
        self.buffer_memory = buffer_memory
        self.delivery_timeout_ms = delivery_timeout_ms
        # The n-th retry of a batch waits retry.backoff.ms * 2**(n-1), jittered, up to
        # retry.backoff.max.ms (KIP-580); without a max the wait is constant.
        self.retry_backoff = ExponentialBackoff(
            retry_backoff_ms, retry_backoff_ms if retry_backoff_max_ms is None else retry_backoff_max_ms
        )
        self.on_batch_complete = on_batch_complete
        self.codec = codec
        self.batches: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        # The batch still open for appends of each partition (the last of its deque, not
        # closed), so that a record joining it costs one dict lookup.
        self._open: dict[TopicPartition, ProducerBatch] = {}
        self.max_in_flight = max_in_flight
        self.in_flight: dict[TopicPartition, int] = {}
        self.recovering: set[TopicPartition] = set()
        self._created = 0  # creation order of batches, for re-queueing retries in order
        self.buffered_bytes = 0
        self.flushing = 0  # flush() calls in progress: linger is ignored while > 0
        self._drain_start = 0  # rotates which partition goes first, for fairness

    # -- appending -------------------------------------------------------------------------

    def has_room(self, size: int) -> bool:
        return self.buffered_bytes + size <= self.buffer_memory

    def append(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[tuple[str, bytes | None], ...],
        sink: DeliverySink,
        now_ms: float,
    ) -> ProducerBatch:
        """Encode and queue one record; the caller has checked has_room().  Returns its batch."""
        self.append_many(topic, partition, ((timestamp, key, value, headers),), sink, now_ms)
        return self.batches[(topic, partition)][-1]

    def append_record(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[tuple[str, bytes | None], ...],
        now_ms: Callable[[], float],
    ) -> tuple[ProducerBatch, int]:
        """Producer.send's path, once per record: encode one record into its partition's open
        batch (a new batch when there is none or it is full) with no sink and no segment.
        Returns the batch and its record count: the caller makes the record's handle on
        ``batch.result`` at index ``count - 1``.
        The caller has checked has_room().  ``now_ms`` (the clock, in ms) is read only when a
        batch is created.  The sender should look when the batch holds one record (new) or
        is closed (full)."""
        tp = (topic, partition)
        batch = self._open.get(tp)
        count = 0
        if batch is not None:
            count = _records.append_record(batch.builder, timestamp, key, value, headers)
        if not count:
            dq = self.batches.get(tp)
            if dq is None:
                dq = self.batches[tp] = collections.deque()
            batch = self._new_batch(topic, partition, now_ms(), dq)
            # the first record of a batch always fits
            count = _records.append_record(batch.builder, timestamp, key, value, headers)
        size = batch.builder.uncompressed_size
        self.buffered_bytes += size - batch.accounted
        batch.accounted = size
        if size >= self.batch_size:
            self._close(batch)
        return batch, count

    def append_many(
        self,
        topic: str,
        partition: int,
        records: Iterable[tuple[int, bytes | None, bytes | None, Any]],
        sink: DeliverySink,
        now_ms: float | Callable[[], float],
    ) -> bool:
        """Encode and queue ``(timestamp, key, value, headers)`` records, in order, for one
        partition, filling its open batch and then new ones; ``sink`` hears about them one
        segment per batch.  True if a batch was started or filled (the sender should look).

        ``now_ms`` may be the clock itself (a function returning ms): it is then read only
        when a batch is created, not for every record that joins an open one."""
        if type(records) is not list and type(records) is not tuple:
            records = list(records)
        end = len(records)
        if not end:
            return False
        tp = (topic, partition)
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = collections.deque()
        batch = self._open.get(tp)
        if end == 1 and batch is not None:
            # Producer.send's case, once per record: one record joining the open batch
            builder = batch.builder
            index = builder.record_count
            if builder.append_many(records):
                batch.segments.append((sink, 0, 1, index))
                self._account(batch)
                if builder.uncompressed_size >= self.batch_size:
                    self._close(batch)
                    return True
                return False
        return self._fill(tp, dq, batch, now_ms, 0, end,
                          lambda builder, start: builder.append_many(records, start),
                          lambda start: start, sink)

    def append_columns(
        self,
        topic: str,
        partition: int,
        buffers: list,
        rows: tuple[int, int],
        rewrite: tuple[str, bytes, bytes],
        skipped: list[int],
        sink: DeliverySink,
        now_ms: float | Callable[[], float],
    ) -> bool:
        """append_many for the mirror: rows ``rows[0]..rows[1]`` of column buffers
        (``columns.ColumnBuffers.buffers``), each with one more header (``rewrite``:
        header name, value prefix, loop-check prefix; ``BatchBuilder.append_columns``),
        the ``skipped`` rows (sorted; what the loop check passes over, from
        ``records.scan_columns``) left out.  ``sink`` hears of the records taken in row
        order, numbered without the skipped rows.  True if a batch was started or filled."""
        row, stop = rows
        if row >= stop:
            return False
        header_key, prefix, skip_prefix = rewrite
        first = row
        tp = (topic, partition)
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = collections.deque()

        def taken(upto: int) -> int:  # records of rows first..upto-1 that are not skipped
            return upto - first - bisect.bisect_left(skipped, upto)

        return self._fill(
            tp, dq, self._open.get(tp), now_ms, row, stop,
            lambda builder, at: builder.append_columns(buffers, at, stop, header_key, prefix,
                                                       skip_prefix),
            taken, sink)

    def _fill(
        self,
        tp: tuple[str, int],
        dq: collections.deque,
        batch: ProducerBatch | None,
        now_ms: float | Callable[[], float],
        start: int,
        end: int,
        append: Callable[[Any, int], int],
        number: Callable[[int], int],
        sink: DeliverySink,
    ) -> bool:
        """Fill ``tp``'s open batch (or a new one), then new ones, from position ``start``
        until ``end``: ``append(builder, pos)`` appends what fits from ``pos`` and returns the
        next position; ``number(pos)`` is the sink's number of the record at ``pos``.  The
        segment of each batch tells ``sink`` of its records.  True if a batch was started or
        filled (the sender should look)."""
        changed = batch is None
        if batch is None:
            if callable(now_ms):
                now_ms = now_ms()
            batch = self._new_batch(tp[0], tp[1], now_ms, dq)
        while True:
            index = batch.builder.record_count
            stop = append(batch.builder, start)
            count = batch.builder.record_count - index
            if count:
                batch.segments.append((sink, number(start), count, index))
            if stop >= end:
                break
            # Full (the first record of a batch always fits): close it, go on in a new one.
            self._account(batch)
            self._close(batch)
            if callable(now_ms):
                now_ms = now_ms()
            batch = self._new_batch(tp[0], tp[1], now_ms, dq)
            start, changed = stop, True
        self._account(batch)
        if batch.builder.uncompressed_size >= self.batch_size:
            self._close(batch)
            changed = True
        return changed

    def _new_batch(
        self, topic: str, partition: int, now_ms: float, dq: collections.deque
    ) -> ProducerBatch:
        if dq:
            self._close(dq[-1])
        batch = ProducerBatch(
            topic,
            partition,
            now_ms,
            now_ms + self.delivery_timeout_ms,
            BatchBuilder(codec=self.codec, batch_size=self.batch_size),
        )
        self._created += 1
        batch.order = self._created
        dq.append(batch)
        self._open[(topic, partition)] = batch
        return batch

    def _account(self, batch: ProducerBatch) -> None:
        grown = batch.builder.uncompressed_size - batch.accounted
        batch.accounted += grown
        self.buffered_bytes += grown

    def _close(self, batch: ProducerBatch) -> None:
        if not batch.closed:
            batch.closed = True
            tp = (batch.topic, batch.partition)
            if self._open.get(tp) is batch:
                del self._open[tp]
            if self.on_batch_complete is not None:
                self.on_batch_complete(batch.topic, batch.partition)

    # -- deciding what to send --------------------------------------------------------------

    def _may_send(self, tp: TopicPartition) -> bool:
        """Room in the partition's in-flight window (one at a time while recovering)."""
        n = self.in_flight.get(tp, 0)
        if tp in self.recovering:
            return n == 0
        return n < self.max_in_flight

    def _sendable(self, batch: ProducerBatch, now_ms: float) -> bool:
        if batch.attempts and now_ms < batch.retry_at_ms:
            return False
        if batch.closed or self.flushing:
            return True
        return now_ms - batch.created_ms >= self.linger_due_ms

    def ready(
        self, now_ms: float, leader_of: Callable[[str, int], int]
    ) -> tuple[set[int], float | None, set[str]]:
        """(broker ids with something to send now, ms until the next batch may become ready
        or None when nothing waits, topics whose partitions have no known leader)."""
        nodes: set[int] = set()
        unknown: set[str] = set()
        next_ms: float | None = None
        for tp, dq in self.batches.items():
            if not dq or not self._may_send(tp):
                continue
            leader = leader_of(*tp)
            if leader < 0:
                unknown.add(tp[0])
                continue
            batch = dq[0]
            if self._sendable(batch, now_ms):
                nodes.add(leader)
            else:
                if batch.attempts and now_ms < batch.retry_at_ms:
                    wait = batch.retry_at_ms - now_ms
                else:
                    wait = batch.created_ms + self.linger_due_ms - now_ms
                wait = max(wait, 0.0)
                next_ms = wait if next_ms is None else min(next_ms, wait)
        return nodes, next_ms, unknown

    def drain(
        self,
        now_ms: float,
        node: int,
        leader_of: Callable[[str, int], int],
        max_request_size: int,
    ) -> list[ProducerBatch]:
        """Take the sendable head batch of each partition led by ``node`` with room in its
        in-flight window (at least one batch, then as many as fit in ``max_request_size``)."""
        out: list[ProducerBatch] = []
        total = 0
        tps = [tp for tp, dq in self.batches.items() if dq and self._may_send(tp)]
        if not tps:
            return out
        start = self._drain_start % len(tps)
        self._drain_start += 1
        for tp in tps[start:] + tps[:start]:
            if leader_of(*tp) != node:
                continue
            dq = self.batches[tp]
            batch = dq[0]
            if not self._sendable(batch, now_ms):
                continue
            if out and total + batch.size > max_request_size:
                break
            dq.popleft()
            if not dq:
                del self.batches[tp]
            self._close(batch)
            batch.attempts += 1
            batch.in_flight = True
            self.in_flight[tp] = self.in_flight.get(tp, 0) + 1
            total += batch.size
            out.append(batch)
        return out

    # -- completions -------------------------------------------------------------------------

    def complete(self, batch: ProducerBatch) -> None:
        """The batch is finished (delivered or failed): free its slot and its memory."""
        if batch.done:
            return
        batch.done = True
        if batch.in_flight:
            self._landed(batch)
        self.buffered_bytes -= batch.accounted
        batch.accounted = 0

    def behind_retry(self, batch: ProducerBatch) -> bool:
        """An earlier batch of ``batch``'s partition waits in the queue for a retry (it came
        back after ``batch`` was drained): sending ``batch`` now would overtake it."""
        dq = self.batches.get(batch.tp)
        return bool(dq) and dq[0].order < batch.order

    def reenqueue(self, batch: ProducerBatch, now_ms: float) -> None:
        """Put an in-flight batch back for a retry after backoff, before every batch of its
        partition created after it (retries of one partition come back in creation order)."""
        batch.retry_at_ms = now_ms + self.retry_backoff.backoff_ms(batch.attempts - 1)
        self._landed(batch)
        self.recovering.add(batch.tp)
        dq = self.batches.get(batch.tp)
        if dq is None:
            dq = self.batches[batch.tp] = collections.deque()
        i = 0
        while i < len(dq) and dq[i].order < batch.order:
            i += 1
        dq.insert(i, batch)

    def _landed(self, batch: ProducerBatch) -> None:
        batch.in_flight = False
        tp = batch.tp
        n = self.in_flight.get(tp, 0) - 1
        if n > 0:
            self.in_flight[tp] = n
            return
        self.in_flight.pop(tp, None)
        if tp in self.recovering:
            dq = self.batches.get(tp)
            if not dq or not dq[0].attempts:
                self.recovering.discard(tp)  # every retried batch is through

    def expire(self, now_ms: float) -> list[ProducerBatch]:
        """Remove and return queued (not in-flight) batches past ``delivery.timeout.ms``.

        The caller fails their records and then calls complete() on each.
        """
        out = []
        for tp in list(self.batches):
            if self.in_flight.get(tp):
                continue
            dq = self.batches[tp]
            while dq and dq[0].deadline_ms <= now_ms:
                batch = dq.popleft()
                if self._open.get(tp) is batch:
                    del self._open[tp]  # no record may join a batch that is failing
                batch.closed = True
                out.append(batch)
            if not dq:
                del self.batches[tp]
        return out

    def abort_all(self) -> list[ProducerBatch]:
        """Remove and return every queued batch (on close after a fatal error)."""
        out = [b for dq in self.batches.values() for b in dq]
        self.batches.clear()
        self._open.clear()
        return out

    def next_expiry_ms(self) -> float | None:
        deadlines = [
            dq[0].deadline_ms for tp, dq in self.batches.items() if dq and not self.in_flight.get(tp)
        ]
        return min(deadlines) if deadlines else None

    @property
    def queued_batches(self) -> int:
        return sum(len(dq) for dq in self.batches.values())

    def reset_sequences(self) -> None:
        """The producer id changed: every queued batch must be rebuilt with new sequences."""
        for dq in self.batches.values():
            for batch in dq:
                batch.reset_payload()
