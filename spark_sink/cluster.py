"""The databus source's I/O: what it asks the cluster, through databus's own client.

Driver side (planning): ``snapshot`` discovers the partitions a query reads and their
earliest / latest offsets (plus any timestamp lookups) in one short ``trio.run``.  Executor
side: ``fetch_range`` reads one OffsetRange with a consumer of its own, built from the
options (nothing from the driver's memory reaches an executor), and yields the records in
chunks.  No consumer group, no commits: the Spark checkpoint is the only source of truth.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import queue
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import trio

from databus.client import (
    EARLIEST,
    LATEST,
    Admin,
    AdminConfig,
    Cluster,
    ConsumerConfig,
    KafkaError,
    ProducerConfig,
    SyncConsumer,
    errors,
    list_offsets,
)
from databus.protocol.api_keys import ApiKey
from databus.protocol.columns import OFFSET, ColumnBuffers
from databus.protocol.records import CorruptRecordError, iter_headers

from .options import OptionError, SourceOptions, TopicPartition
from .planning import DataLossError, OffsetRange

log = logging.getLogger("databus_spark")

# Our consumer's defaults where a Spark task reads better with other values than Kafka's
# (the user's kafka.* settings win): bigger polls feed bigger Arrow batches.
CONSUMER_DEFAULTS = {"max.poll.records": "20000", "max.partition.fetch.bytes": str(8 << 20)}
CONSUMER_FIXED = {"enable.auto.commit": "false", "auto.offset.reset": "none"}


def _config(cls, settings: Mapping[str, str]):
    try:
        return cls.from_kafka(dict(settings))
    except errors.ConfigError as exc:
        raise OptionError(f"kafka.* options: {exc}") from None


def consumer_config(kafka: Mapping[str, str]) -> ConsumerConfig:
    """The executors' consumer settings (raises OptionError naming a bad kafka.* option)."""
    settings = {**CONSUMER_DEFAULTS, **kafka, **CONSUMER_FIXED}
    settings.pop("bootstrap.servers", None)
    return _config(ConsumerConfig, settings)


def admin_config(kafka: Mapping[str, str]) -> AdminConfig:
    """The driver's admin settings: the kafka.* options every client shares."""
    known = {info.alias for info in AdminConfig.model_fields.values()}
    return _config(AdminConfig, {k: v for k, v in kafka.items()
                                 if k in known and k != "bootstrap.servers"})


def producer_config(kafka: Mapping[str, str]) -> ProducerConfig:
    settings = dict(kafka)
    settings.pop("bootstrap.servers", None)
    return _config(ProducerConfig, settings)


def _run(fn, *args):
    """trio.run, raising what failed rather than the ExceptionGroup the client's nursery
    wraps it in (Spark shows the user the exception's own type and message)."""
    try:
        return trio.run(fn, *args)
    except BaseExceptionGroup as group:
        exc: BaseException = group
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        if exc is group:
            raise
        raise exc from None


# -- driver: partitions and offsets ---------------------------------------------------------

@dataclass
class Snapshot:
    partitions: list[TopicPartition]
    earliest: dict[TopicPartition, int]
    latest: dict[TopicPartition, int]
    # one answer per request map given to snapshot(): {tp: offset}, -1 where no record
    # has a timestamp at or after the one asked
    looked_up: list[dict[TopicPartition, int]] = field(default_factory=list)


async def _partitions(admin: Admin, opts: SourceOptions) -> list[TopicPartition]:
    if opts.assign:
        return list(opts.assign)
    if opts.subscribe:
        names = list(opts.subscribe)
    else:
        pattern = re.compile(opts.subscribe_pattern)
        names = [t for t in await admin.list_topics() if pattern.fullmatch(t)]
    if not names:
        return []
    out: list[TopicPartition] = []
    for name, desc in (await admin.describe_topics(names)).items():
        if isinstance(desc, errors.UnknownTopicOrPartitionError):
            continue  # as Kafka's source: a subscribed topic that does not exist has no data yet
        if isinstance(desc, KafkaError):
            raise desc
        out += [(name, p.partition) for p in desc.partitions]
    return sorted(out)


def snapshot(
    opts: SourceOptions,
    requests=None,
) -> Snapshot:
    """The query's partitions now, their earliest and latest offsets, and the answers to
    ``requests(partitions)`` (a callable returning a list of {tp: EARLIEST|LATEST|ts})."""

    async def run() -> Snapshot:
        async with Admin(opts.bootstrap_servers, admin_config(opts.kafka)) as admin:
            partitions = await _partitions(admin, opts)
            if not partitions:
                return Snapshot([], {}, {}, [{} for _ in (requests(partitions) if requests else [])])
            earliest = await admin.list_offsets(partitions, "earliest")
            latest = await admin.list_offsets(partitions, "latest")
            answers = []
            for req in requests(partitions) if requests else []:
                answers.append(await _lookup(admin, req, earliest, latest))
            return Snapshot(partitions, earliest, latest, answers)

    return _run(run)


async def _lookup(admin: Admin, req: Mapping[TopicPartition, int], earliest, latest):
    out: dict[TopicPartition, int] = {}
    by_ts: dict[int, list[TopicPartition]] = {}
    for tp, what in req.items():
        if what == EARLIEST:
            out[tp] = earliest[tp]
        elif what == LATEST:
            out[tp] = latest[tp]
        else:
            by_ts.setdefault(what, []).append(tp)
    for ts, tps in by_ts.items():
        out.update(await admin.list_offsets(tps, ts))
    return out


# -- executor: one range ---------------------------------------------------------------------

class Buffered(NamedTuple):
    """A raw fetch's records in the client's column buffers (Arrow's buffers, filled in C
    straight from the record batches); the offsets first, as in the consumer's lists."""

    offsets: memoryview  # int64, over buffers' own memory
    buffers: ColumnBuffers


# A chunk of one partition's records, as columns, and the timestamp type of each record
# (0 CreateTime, 1 LogAppendTime): Buffered and the types as int32 bytes from raw fetches;
# (offsets, timestamps ms, keys, values, headers) lists and a list from the consumer
# (read_committed).
Columns = Buffered | tuple[list, list, list, list, list]
Chunk = tuple[Columns, bytes | list[int]]
_TYPE_BYTES = (b"\0\0\0\0", b"\1\0\0\0")  # int32 0 and 1, little-endian as Arrow's
_DONE = object()


def fetch_range(
    bootstrap: str,
    config: ConsumerConfig,
    rng: OffsetRange,
    *,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[Chunk]:
    """Yield the records of ``rng`` in offset order, one chunk per Fetch response.

    A thread runs the fetches (trio, our client's Cluster) and hands over the raw record
    bytes; this thread decodes them (every codec, CRCs checked with check.crcs) while the next
    Fetch is on the wire.  Records are decoded a batch at a time, in C, straight into the
    client's column buffers (databus.protocol.columns), which become the Arrow arrays without
    a copy: no Python object per record.

    Offsets missing inside the range (compaction, transaction markers) are not data loss.
    Records gone to retention before or while reading, or a partition now ending before
    ``rng.end``: DataLossError naming the offsets with ``fail_on_data_loss``, else a warning
    and the rest of the range.  No progress for ``poll_timeout_ms``: TimeoutError.
    """
    if config.isolation_level == "read_committed":
        # aborted transactions are the consumer's business: take its (slower) path
        yield from _consumer_range(bootstrap, config, rng, fail_on_data_loss, poll_timeout_ms)
        return
    chunks: queue.Queue = queue.Queue(maxsize=2)
    stop = threading.Event()
    thread = threading.Thread(
        target=_fetch_thread, name=f"databus-fetch-{rng}", daemon=True,
        args=(bootstrap, config, rng, fail_on_data_loss, poll_timeout_ms, chunks, stop),
    )
    thread.start()
    try:
        while True:
            item = chunks.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            offset, blob = item
            try:
                with no_cyclic_gc():
                    chunk = _decode(blob, offset, rng.end, config.check_crcs)
            except CorruptRecordError as exc:
                raise errors.CorruptMessageError(f"{rng} at offset {offset}: {exc}") from None
            yield chunk
    finally:
        stop.set()
        while thread.is_alive():  # unblock a pending put, then let the thread finish
            try:
                chunks.get(timeout=0.1)
            except queue.Empty:
                pass
        thread.join()


@contextlib.contextmanager
def no_cyclic_gc():
    """Pause the cyclic garbage collector while a chunk is decoded and made Arrow.

    The consumer's path (read_committed) makes a tuple per record: tens of thousands per
    chunk would start a young collection every 700 (CPython's threshold), each rescanning
    what is alive: measured here, that doubled the cost of decoding and tripled that of
    building the columns.  The tuples hold no cycles;
    reference counting frees them.  The previous state is restored: the worker process is
    Spark's and runs other code too (cf. databus/gc_tuning.py, for databus's own services).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _decode(blob: bytes, fetch_offset: int, end: int, verify_crc: bool) -> Chunk:
    columns = ColumnBuffers()
    types = bytearray()
    for pos, h in iter_headers(blob):
        if h.next_offset <= fetch_offset or h.is_control:
            continue
        if h.base_offset >= end:
            break
        _, appended = columns.append_batch(blob, pos, fetch_offset, end, verify_crc=verify_crc)
        types += _TYPE_BYTES[h.timestamp_type] * appended
    return Buffered(memoryview(columns.buffers[OFFSET]).cast("q"), columns), bytes(types)


def _fetch_thread(bootstrap, config, rng, fail_on_data_loss, poll_timeout_ms, chunks, stop):
    def put(item) -> None:
        while not stop.is_set():
            try:
                chunks.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    try:
        _run(_fetch_loop, bootstrap, config, rng, fail_on_data_loss, poll_timeout_ms,
                 put, stop)
    except BaseException as exc:  # noqa: BLE001 - handed to the reading thread, which raises it
        put(exc)
    else:
        put(_DONE)


async def _fetch_loop(bootstrap, config, rng, fail_on_data_loss, poll_timeout_ms, put, stop):
    tp = (rng.topic, rng.partition)
    name = f"{tp[0]}-{tp[1]}"
    timeout = config.request_timeout_ms / 1000
    backoff = config.retry_backoff_ms / 1000
    cluster = Cluster(bootstrap, config, allow_auto_create=False)

    def lost(message: str) -> None:
        if fail_on_data_loss:
            raise DataLossError(
                f"{message} while reading {rng}. Set failOnDataLoss=false to skip them "
                "with a warning."
            )
        log.warning("%s while reading %s; skipped (failOnDataLoss=false)", message, rng)

    async def retry_later() -> None:
        with contextlib.suppress(KafkaError):
            await cluster.refresh_metadata([tp[0]], allow_auto_create=False)
        await trio.sleep(backoff)

    async with cluster.running():
        position = rng.start
        deadline = trio.current_time() + poll_timeout_ms / 1000
        while position < rng.end and not stop.is_set():
            if trio.current_time() > deadline:
                raise TimeoutError(f"no records of {rng} arrived from offset {position} within "
                                   f"kafkaConsumer.pollTimeoutMs={poll_timeout_ms}")
            leader = cluster.leader_for(*tp)
            if leader < 0:
                await retry_later()
                continue
            try:
                response = await cluster.request(leader, ApiKey.FETCH, {
                    "replica_id": -1, "max_wait": config.fetch_max_wait_ms,
                    "min_bytes": config.fetch_min_bytes, "max_bytes": config.fetch_max_bytes,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": tp[0], "partitions": [{
                        "partition": tp[1], "fetch_offset": position,
                        "partition_max_bytes": config.max_partition_fetch_bytes,
                        "current_leader_epoch": -1, "log_start_offset": -1,
                        "last_fetched_epoch": -1,
                    }]}],
                    "forgotten_topics_data": [], "rack_id": config.client_rack,
                }, timeout=timeout + config.fetch_max_wait_ms / 1000)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                await retry_later()
                continue
            answer = next((p for t in response.responses if t.topic == tp[0]
                           for p in t.partitions if int(p.partition_index) == tp[1]), None)
            code = int(answer.error_code) if answer is not None else errors.UnknownTopicOrPartitionError.code
            if code == errors.OffsetOutOfRangeError.code:
                got = await list_offsets(cluster, {tp: EARLIEST}, timeout=timeout)
                earliest = got[tp][0]
                if position < earliest:
                    lost(f"records [{position}, {min(earliest, rng.end)}) of {name} are gone "
                         f"(earliest offset now {earliest})")
                    position = earliest
                    continue
                latest = (await list_offsets(cluster, {tp: LATEST}, timeout=timeout))[tp][0]
                lost(f"records [{latest}, {rng.end}) of {name} are gone (the partition now "
                     f"ends at {latest})")
                return
            if code:
                err = errors.from_code(code, f"fetch {name}")
                if not err.retriable:
                    raise err
                await retry_later()
                continue
            blob = bytes(answer.records or b"")
            next_offset = position
            for _pos, h in iter_headers(blob):
                next_offset = max(next_offset, h.next_offset)
            if next_offset > position:
                put((position, blob))
                position = next_offset
                deadline = trio.current_time() + poll_timeout_ms / 1000
                continue
            high_watermark = int(answer.high_watermark)
            if 0 <= high_watermark <= position < rng.end:
                lost(f"records [{position}, {rng.end}) of {name} are gone (the partition now "
                     f"ends at {high_watermark})")
                return


def _consumer_range(bootstrap, config, rng, fail_on_data_loss, poll_timeout_ms) -> Iterator[Chunk]:
    """The range through our consumer (read_committed: it skips aborted transactions)."""
    tp = (rng.topic, rng.partition)
    position = rng.start

    def lost(message: str) -> None:
        if fail_on_data_loss:
            raise DataLossError(f"{message} while reading {rng}. Set failOnDataLoss=false to "
                                "skip them with a warning.")
        log.warning("%s while reading %s; skipped (failOnDataLoss=false)", message, rng)

    with SyncConsumer(bootstrap, config) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, position)
        deadline = time.monotonic() + poll_timeout_ms / 1000
        while position < rng.end:
            try:
                records = consumer.poll(0.5)
            except errors.OffsetOutOfRangeError:
                earliest = consumer.beginning_offsets([tp])[tp]
                if position >= earliest:
                    raise
                lost(f"records [{position}, {min(earliest, rng.end)}) of {tp[0]}-{tp[1]} are "
                     f"gone (earliest offset now {earliest})")
                position = earliest
                consumer.seek(tp, position)
                continue
            records = [r for r in records if r.offset < rng.end]
            if records:
                position = records[-1].offset + 1
                deadline = time.monotonic() + poll_timeout_ms / 1000
                yield (([r.offset for r in records], [r.timestamp for r in records],
                        [r.key for r in records], [r.value for r in records],
                        [r.headers for r in records]),
                       [r.timestamp_type for r in records])
                continue
            position = max(position, consumer.position(tp))
            if time.monotonic() > deadline:
                raise TimeoutError(f"no records of {rng} arrived from offset {position} within "
                                   f"kafkaConsumer.pollTimeoutMs={poll_timeout_ms}")


def earliest_offsets(opts: SourceOptions, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    async def run():
        async with Admin(opts.bootstrap_servers, admin_config(opts.kafka)) as admin:
            return await admin.list_offsets(partitions, "earliest")

    return _run(run) if partitions else {}
