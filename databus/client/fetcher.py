"""The consumer's fetcher: background Fetch requests (prefetch, long poll) and the record buffer.

The fetch loop keeps one Fetch in flight per partition leader, for every assigned, unpaused
partition that has a position, no fetch in flight and fewer than PREFETCHED completed
fetches buffered: each partition's next Fetch goes out as soon as the last one's records are
buffered, from where they end, so it is on the wire (and the broker reading) while the
application handles them — the prefetch; a partition's buffer is a queue of completed
fetches, at most PREFETCHED deep (2 x ``max.partition.fetch.bytes``, 2 x ``fetch.max.bytes``
in all).  The broker holds a Fetch up to ``fetch.max.wait.ms`` until ``fetch.min.bytes``
are there (long poll), and returns at most ``max.partition.fetch.bytes`` per partition /
``fetch.max.bytes`` in all.

A long poll is not sent while it would hold back records known to wait at the broker: when
every partition a Fetch would carry is caught up (its position at the end the last response
gave) while another partition of the same broker still has records there beyond its buffer,
the Fetch waits until that partition's buffer is handed out and both go together (the
broker answers at once, having records for it).  Sent alone, the caught-up partitions' Fetch
would park at the broker for ``fetch.max.wait.ms`` and, one Fetch in flight per broker, the
other partition's next Fetch behind it: reading a backlog, each partition reaching its end
before the others stalled poll() for 0.5 s (Kafka's default; aiokafka avoids it by fetching
a broker's partitions only together, librdkafka by prefetching far ahead).  The wait is bounded by ``fetch.max.wait.ms``
(an application that never drains the other partition, ``getmany(some)`` or a slow one,
still gets its long poll).
Responses are decoded right away, a batch at a time (records.decode_consumer_records, in C
when the extension is built: CRC checked when ``check.crcs``, all four codecs), into the
partition's queue, so the next poll() finds records ready.  A fetch that met a damaged
batch queues the error in the records' place: poll() hands out the records before it first,
then raises it, as Kafka's consumer does.

Decoding rules, as Kafka's consumers: records before the fetch offset inside the first batch
are skipped (the broker returns whole batches); control batches are skipped; with
``isolation.level=read_committed`` batches of aborted transactions are skipped; a batch cut
at the fetch size is ignored (it comes whole next time).  A buffered fetch whose partition
was seeked meanwhile is dropped (``PartitionState.epoch``).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import trio

from ..protocol.api_keys import ApiKey
from ..protocol.codecs import DecompressedTooLargeError
from ..protocol.columns import ColumnBuffers, RecordColumns
from ..protocol.errors import ErrorCode
from ..protocol.records import (
    CONTROL_ABORT,
    CorruptRecordError,
    control_record_type,
    decode_consumer_records,
    decode_records,
    decode_records_at,
    iter_headers,
)
from ..protocol.types import TopicPartition
from . import errors
from .cluster import BackgroundRefresh, Cluster
from .config import ConsumerConfig
from .subscription import SubscriptionState

log = logging.getLogger(__name__)
_tuple_new = tuple.__new__

# Completed fetches a partition may have buffered before its next Fetch waits for poll():
# one being handed out and the next one (see the module's docstring).
PREFETCHED = 2

# Errors after which the partition's leader may have moved.
_LEADER_ERRORS = {
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available,
    ErrorCode.not_leader_or_follower,
    ErrorCode.replica_not_available,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
}


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]

    # Share consumers (KIP-932): how many times the record has been delivered, this time
    # included (Kafka's ``deliveryCount()``).  Not a field, so a record stays the 8-tuple
    # that code unpacking or zipping records expects: a share consumer's records are of a
    # subclass per count (share_record_class), a classic consumer's say None.
    delivery_count = None


_SHARE_RECORD_CLASSES: dict[int, type[ConsumerRecord]] = {}


def _share_record(fields: tuple, delivery_count: int) -> ConsumerRecord:
    return tuple.__new__(share_record_class(delivery_count), fields)


def share_record_class(delivery_count: int) -> type[ConsumerRecord]:
    """The ConsumerRecord subclass whose records were delivered ``delivery_count`` times
    (one class per count, no field and no per-record storage added)."""
    cls = _SHARE_RECORD_CLASSES.get(delivery_count)
    if cls is None:
        def __repr__(self) -> str:
            return f"{ConsumerRecord.__repr__(self)[:-1]}, delivery_count={delivery_count})"

        def __reduce__(self):
            return _share_record, (tuple(self), delivery_count)

        cls = _SHARE_RECORD_CLASSES[delivery_count] = type("ConsumerRecord", (ConsumerRecord,), {
            "__slots__": (), "__module__": __name__, "__qualname__": "ConsumerRecord",
            "delivery_count": delivery_count, "__repr__": __repr__, "__reduce__": __reduce__,
        })
    return cls


@dataclass
class CompletedFetch:
    tp: TopicPartition
    epoch: int
    fetch_offset: int
    records: list[ConsumerRecord] | RecordColumns  # RecordColumns when fetched for columns
    next_offset: int  # where the next fetch starts once these are consumed
    index: int = 0
    error: BaseException | None = None  # raised by poll() in place of records (a bad batch)

    @property
    def remaining(self) -> int:
        return len(self.records) - self.index


def decode_fetched(
    topic: str,
    partition: int,
    data: bytes,
    fetch_offset: int,
    *,
    check_crcs: bool = True,
    aborted: list[tuple[int, int]] | None = None,
    delivery_count: int | None = None,
    only: set[int] | None = None,
    max_decompressed: int | None = None,
) -> tuple[list[ConsumerRecord], int]:
    """Records at or after ``fetch_offset`` in a Fetch response's records (with ``only``:
    just those at these offsets, the others not decoded), and the offset after the last
    complete batch (== fetch_offset when no complete batch was there).
    ``delivery_count``: every record's (a share fetch's; share_record_class).
    ``max_decompressed``: what one batch may decompress to (``max.decompressed.batch.bytes``)."""
    out: list[ConsumerRecord] = []
    cls = ConsumerRecord if delivery_count is None else share_record_class(delivery_count)

    def decode(pos: int, h) -> int:
        before = len(out)
        if only is None:
            # A batch at a time, straight to ConsumerRecords (one object per record; the
            # records before the fetch offset in the first batch are skipped by the decoder)
            out.extend(decode_consumer_records(
                data, pos, cls, topic, partition, fetch_offset, verify_crc=check_crcs,
                max_decompressed=max_decompressed,
            )[1])
        elif any(h.base_offset <= o <= h.last_offset for o in only):
            # a lookup by offset (RecordReader): only the wanted records are decoded
            _, records = decode_records_at(data, pos, only, verify_crc=check_crcs,
                                           max_decompressed=max_decompressed)
            ts_type = h.timestamp_type
            out.extend(
                _tuple_new(cls, (topic, partition, r[0], r[1], ts_type, r[2], r[3], r[4]))
                for r in records if r[0] >= fetch_offset
            )
        return len(out) - before

    next_offset = read_fetched(data, fetch_offset, decode, check_crcs=check_crcs,
                               aborted=aborted, max_decompressed=max_decompressed)
    return out, next_offset


def decode_fetched_columns(
    topic: str,
    partition: int,
    data: bytes,
    fetch_offset: int,
    *,
    check_crcs: bool = True,
    aborted: list[tuple[int, int]] | None = None,
    max_decompressed: int | None = None,
) -> tuple[RecordColumns, int]:
    """decode_fetched's records as columns (protocol/columns.py): no object per record."""
    columns = ColumnBuffers()

    def decode(pos: int, h) -> int:
        return columns.append_batch(data, pos, fetch_offset, _NO_END, verify_crc=check_crcs,
                                    max_decompressed=max_decompressed)[1]

    next_offset = read_fetched(data, fetch_offset, decode, check_crcs=check_crcs,
                               aborted=aborted, max_decompressed=max_decompressed)
    return RecordColumns(topic, partition, columns), next_offset


_NO_END = 2**63


def read_fetched(data: bytes, fetch_offset: int, decode, *, check_crcs: bool,
                 aborted: list[tuple[int, int]] | None, max_decompressed: int | None) -> int:
    """Walk a Fetch response's batches as Kafka's consumers do, calling ``decode(pos,
    header)`` (how many records it took) for each batch whose records the application gets:
    batches wholly before ``fetch_offset``, control batches and (``aborted``, under
    read_committed) aborted transactions' batches are stepped over; a trailing partial batch
    is left for the next fetch.  Returns the offset the next fetch starts at.  A corrupt
    batch raises CorruptRecordError, unless records were taken before it: then they are
    handed out and the next fetch starts at it (and reports it), as Kafka's consumer does."""
    next_offset = fetch_offset
    taken = 0
    aborted_sorted = sorted(aborted or [], key=lambda a: a[1])
    active_aborted: set[int] = set()
    for pos, h in iter_headers(data):
        if h.next_offset <= fetch_offset:
            continue
        done = next_offset  # where this batch starts being ours, if it fails to decode
        next_offset = max(next_offset, h.next_offset)
        while aborted_sorted and aborted_sorted[0][1] <= h.last_offset:
            active_aborted.add(aborted_sorted.pop(0)[0])
        if h.is_control:
            if h.producer_id in active_aborted:
                _, control = decode_records(data, pos, verify_crc=check_crcs,
                                            max_decompressed=max_decompressed)
                if control and control_record_type(control[0].key) == CONTROL_ABORT:
                    active_aborted.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in active_aborted:
            continue
        try:
            taken += decode(pos, h)
        except CorruptRecordError:
            if not taken:
                raise
            return done
    return next_offset


class Fetcher:
    """Runs as ``await nursery.start(fetcher.run)``; poll() drains it with ``drain()``."""

    def __init__(self, cluster: Cluster, subscriptions: SubscriptionState, config: ConsumerConfig) -> None:
        self.cluster = cluster
        self.subscriptions = subscriptions
        self.config = config
        # per partition, its completed fetches in offset order (at most PREFETCHED)
        self.buffer: dict[TopicPartition, deque[CompletedFetch]] = {}
        self.in_flight: set[TopicPartition] = set()
        self.in_flight_nodes: set[int] = set()
        self.errors: list[BaseException] = []  # raised to the caller of the next poll
        self._wakeup = trio.Event()
        self.data_ready = trio.Event()
        self._metadata = BackgroundRefresh(cluster, config.retry_backoff_ms / 1000, self.wakeup)
        self._isolation = 1 if config.isolation_level == "read_committed" else 0
        # node -> when its caught-up partitions' long poll was first held back (see above)
        self._held_since: dict[int, float] = {}
        # decode fetched records into columns (getmany_columns) instead of ConsumerRecords
        self.columnar = False
        # a refused login wakes pollers: they raise it (Consumer.getmany)
        cluster.auth_listeners.append(self.notify)

    def wakeup(self) -> None:
        self._wakeup.set()

    def notify(self) -> None:
        """Wake pollers (new assignment or records): they re-check positions and buffers."""
        self.data_ready.set()
        self.data_ready = trio.Event()
        self.wakeup()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                wait = self._start_fetches(nursery)
                with trio.move_on_after(min(wait, self.config.retry_backoff_ms / 1000 * 5)):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()

    def _start_fetches(self, nursery: trio.Nursery) -> float:
        """Send the Fetches due; the seconds until a held-back long poll is due (or inf)."""
        by_node: dict[int, list[TopicPartition]] = {}
        waiting: set[int] = set()  # nodes with records waiting beyond a partition's buffer
        unknown = False
        partitions = self.subscriptions.partitions
        for tp in self.subscriptions.fetchable():
            if tp in self.in_flight:
                continue
            leader = self.cluster.leader_for(*tp)
            if leader < 0:
                unknown = True
                continue
            if leader in self.in_flight_nodes:
                continue
            queue = self.buffer.get(tp)
            if queue and (len(queue) >= PREFETCHED or queue[-1].error is not None):
                # full, or ending with a damaged batch's error (refetched once it is raised)
                if queue[-1].next_offset < partitions[tp].readable_end:
                    waiting.add(leader)
                continue
            by_node.setdefault(leader, []).append(tp)
        if unknown:
            self._refresh_metadata()
        now = trio.current_time()
        due = float("inf")
        held_now: dict[int, float] = {}
        for node, tps in by_node.items():
            if node in waiting and all(
                    0 <= partitions[tp].readable_end <= self._fetch_position(tp) for tp in tps):
                # a long poll now would park in front of the records waiting for a buffered
                # partition: send it with that partition's next Fetch, or once it is overdue
                held = held_now[node] = self._held_since.get(node, now)
                left = held + self.config.fetch_max_wait_ms / 1000 - now
                if left > 0:
                    due = min(due, left)
                    continue
                del held_now[node]
            self.in_flight_nodes.add(node)
            self.in_flight.update(tps)
            nursery.start_soon(self._fetch, node, tps)
        self._held_since = held_now  # a hold ends when its Fetch goes or nothing is held
        return due

    def _fetch_position(self, tp: TopicPartition) -> int:
        """Where ``tp``'s next Fetch starts: after its buffered fetches, else its position."""
        queue = self.buffer.get(tp)
        return queue[-1].next_offset if queue else self.subscriptions.partitions[tp].position

    def _refresh_metadata(self) -> None:
        self._metadata.start(self._nursery)

    async def _fetch(self, node: int, tps: list[TopicPartition]) -> None:
        try:
            await self._fetch_once(node, tps)
        except errors.KafkaError as exc:
            log.debug("fetch from broker %s failed: %s", node, exc)
            self._refresh_metadata()
            await trio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self.in_flight_nodes.discard(node)
            self.in_flight.difference_update(tps)
            self.wakeup()

    async def _fetch_once(self, node: int, tps: list[TopicPartition]) -> None:
        cfg = self.config
        sent: dict[TopicPartition, tuple[int, int]] = {}
        topics: dict[str, list[dict]] = {}
        for tp in tps:
            st = self.subscriptions.partitions.get(tp)
            if st is None or st.position is None:
                continue
            position = self._fetch_position(tp)
            sent[tp] = (position, st.epoch)
            topics.setdefault(tp[0], []).append(
                {
                    "partition": tp[1],
                    "fetch_offset": position,
                    "partition_max_bytes": cfg.max_partition_fetch_bytes,
                    "current_leader_epoch": -1,
                    "log_start_offset": -1,
                    "last_fetched_epoch": -1,
                }
            )
        if not sent:
            return
        conn = await self.cluster.connection(node)
        response = await conn.request(
            ApiKey.FETCH,
            {
                "replica_id": -1,
                "max_wait": cfg.fetch_max_wait_ms,
                "min_bytes": cfg.fetch_min_bytes,
                "max_bytes": cfg.fetch_max_bytes,
                "isolation_level": self._isolation,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [],
                "rack_id": cfg.client_rack,
            },
            timeout=(cfg.request_timeout_ms + cfg.fetch_max_wait_ms) / 1000,
        )
        errors.raise_for_code(getattr(response, "error_code", 0), f"Fetch from broker {node}")
        got_data = backoff = False
        for topic in response.responses:
            for p in topic.partitions:
                tp = (topic.topic, int(p.partition_index))
                if tp not in sent:
                    continue
                fetch_offset, epoch = sent[tp]
                st = self.subscriptions.partitions.get(tp)
                if (st is None or st.epoch != epoch or st.position is None
                        or self._fetch_position(tp) != fetch_offset):
                    continue  # seeked or revoked meanwhile
                code = int(p.error_code)
                if code:
                    backoff |= self._partition_error(tp, code)
                    continue
                st.high_watermark = int(p.high_watermark)
                lso = int(getattr(p, "last_stable_offset", -1))
                st.readable_end = lso if self._isolation and lso >= 0 else st.high_watermark
                data = p.records or b""
                aborted = None
                if self._isolation and getattr(p, "aborted_transactions", None):
                    aborted = [(int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions]
                try:
                    decode = decode_fetched_columns if self.columnar else decode_fetched
                    records, next_offset = decode(
                        tp[0], tp[1], bytes(data), fetch_offset,
                        check_crcs=cfg.check_crcs, aborted=aborted,
                        max_decompressed=cfg.max_decompressed_batch_bytes,
                    )
                except CorruptRecordError as exc:
                    cls = errors.CorruptMessageError
                    detail = str(exc)
                    if isinstance(exc.__cause__, DecompressedTooLargeError):
                        cls = errors.DecompressedBatchTooLargeError
                        detail += " (max.decompressed.batch.bytes)"
                    error = cls(f"{cls.name}: {tp[0]}-{tp[1]} at offset {fetch_offset}: {detail}")
                    # raised once the records buffered before it are handed out; the
                    # partition is not fetched meanwhile (its queue ends with the error)
                    self.buffer.setdefault(tp, deque()).append(CompletedFetch(
                        tp, epoch, fetch_offset, [], fetch_offset, error=error))
                    got_data = True
                    continue
                if not records and next_offset == fetch_offset:
                    continue  # nothing new (Kafka >= 0.10.1 always returns a whole batch)
                self.buffer.setdefault(tp, deque()).append(
                    CompletedFetch(tp, epoch, fetch_offset, records, next_offset))
                got_data = True
        if got_data:
            self.notify()
        if backoff:
            # A broker answers a Fetch for a deleted or moving partition at once: without
            # this pause (its partitions stay in flight meanwhile) we would re-ask it in a
            # tight loop until metadata catches up.
            await trio.sleep(cfg.retry_backoff_ms / 1000)

    def _partition_error(self, tp: TopicPartition, code: int) -> bool:
        """Handle a partition's error code; True when the fetch should back off."""
        if code == errors.OffsetOutOfRangeError.code:
            strategy = self.config.auto_offset_reset
            st = self.subscriptions.partitions[tp]
            if strategy == "none":
                self.errors.append(
                    errors.OffsetOutOfRangeError(
                        f"{tp[0]}-{tp[1]}: offset {st.position} is out of range and "
                        "auto.offset.reset=none"
                    )
                )
                st.awaiting_seek = True  # stop refetching it until the application seeks
            else:
                self.subscriptions.request_reset(tp, -2 if strategy == "earliest" else -1)
            return False
        if code in _LEADER_ERRORS or errors.for_code(code).retriable:
            self._refresh_metadata()
            return True
        self.errors.append(errors.from_code(code, f"fetch {tp[0]}-{tp[1]}"))
        return False

    def use_columns(self, columnar: bool) -> None:
        """Decode what is fetched from now on as columns (or records again); what is
        buffered in the other form is dropped and fetched again from the positions."""
        if columnar != self.columnar:
            self.columnar = columnar
            self.discard(list(self.buffer))

    def drain(
        self, max_records: int, only: set[TopicPartition] | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]] | dict[TopicPartition, RecordColumns]:
        """Up to ``max_records`` buffered records (per partition in offset order), advancing
        each partition's position past what is returned.  A queued error (a damaged batch)
        is moved to ``errors`` once no records are buffered before it, and ends the drain.
        In columnar mode: a RecordColumns per partition, from one fetch of it per call."""
        columnar = self.columnar
        out: dict = {}
        budget = max_records
        for tp in list(self.buffer):
            if budget <= 0:
                break
            if only is not None and tp not in only:
                continue
            queue = self.buffer[tp]
            st = self.subscriptions.partitions.get(tp)
            if st is None or st.position is None or st.epoch != queue[0].epoch:
                del self.buffer[tp]
                continue
            if st.paused:
                continue
            while queue and budget > 0:
                fetch = queue[0]
                if fetch.error is not None:
                    if not out:
                        del self.buffer[tp]
                        self.errors.append(fetch.error)
                        self.wakeup()
                    return out
                if columnar:
                    if tp in out:
                        break  # one RecordColumns per partition and call
                    chunk = fetch.records.slice(fetch.index, fetch.index + budget)
                    last = chunk.offsets[-1] if len(chunk) else None
                else:
                    chunk = fetch.records[fetch.index : fetch.index + budget]
                    last = chunk[-1].offset if chunk else None
                fetch.index += len(chunk)
                if last is not None:
                    got = out.get(tp)
                    if got is None:
                        out[tp] = chunk
                    else:
                        got.extend(chunk)
                    budget -= len(chunk)
                    st.position = last + 1
                if fetch.index < len(fetch.records):
                    break
                st.position = max(st.position, fetch.next_offset)
                queue.popleft()
                self.wakeup()  # room for the partition's next prefetch
            if not queue:
                del self.buffer[tp]
        return out

    def buffered_records(self) -> int:
        return sum(f.remaining for queue in self.buffer.values() for f in queue)

    def discard(self, tps) -> None:
        for tp in tps:
            self.buffer.pop(tp, None)
        self.wakeup()

    def take_errors(self) -> list[BaseException]:
        errs, self.errors = self.errors, []
        return errs
