"""The databus source's I/O: what it asks the cluster, through databus's own client.

Driver side (planning): ``snapshot`` discovers the partitions a query reads and their
earliest / latest offsets (plus any timestamp lookups) in one short ``trio.run``.  Executor
side: ``fetch_range`` reads one OffsetRange with a consumer of its own, built from the
options (nothing from the driver's memory reaches an executor), and yields the records in
chunks.  No consumer group, no commits: the Spark checkpoint is the only source of truth.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import trio

from databus.client import (
    EARLIEST,
    LATEST,
    Admin,
    AdminConfig,
    ConsumerConfig,
    ConsumerRecord,
    KafkaError,
    Producer,
    ProducerConfig,
    SyncConsumer,
    errors,
)

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

    return trio.run(run)


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

def fetch_range(
    bootstrap: str,
    config: ConsumerConfig,
    rng: OffsetRange,
    *,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[list[ConsumerRecord]]:
    """Yield the records of ``rng`` in offset order, in chunks of up to max.poll.records.

    Offsets missing inside the range (compaction, transaction markers) are not data loss.
    Records gone to retention before or while reading, or a partition now ending before
    ``rng.end``: DataLossError naming the offsets with ``fail_on_data_loss``, else a warning
    and the rest of the range.  No progress for ``poll_timeout_ms``: TimeoutError.
    """
    tp = (rng.topic, rng.partition)
    position = rng.start

    def lost(message: str) -> None:
        if fail_on_data_loss:
            raise DataLossError(
                f"{message} while reading {rng}. Set failOnDataLoss=false to skip them "
                "with a warning."
            )
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
                if position < earliest:
                    lost(f"records [{position}, {min(earliest, rng.end)}) of "
                         f"{tp[0]}-{tp[1]} are gone (earliest offset now {earliest})")
                    position = earliest
                    if position >= rng.end:
                        return
                    consumer.seek(tp, position)
                    continue
                latest = consumer.end_offsets([tp])[tp]
                lost(f"records [{latest}, {rng.end}) of {tp[0]}-{tp[1]} are gone (the "
                     f"partition now ends at {latest})")
                return
            if records:
                if records[-1].offset >= rng.end:
                    records = [r for r in records if r.offset < rng.end]
                if records:
                    position = records[-1].offset + 1
                    yield records
                deadline = time.monotonic() + poll_timeout_ms / 1000
                continue
            now = consumer.position(tp)
            if now > position:  # past control batches or a compaction gap
                position = now
                deadline = time.monotonic() + poll_timeout_ms / 1000
                continue
            latest = consumer.end_offsets([tp])[tp]
            if latest < rng.end and latest <= position:
                lost(f"records [{max(latest, position)}, {rng.end}) of {tp[0]}-{tp[1]} are "
                     f"gone (the partition now ends at {latest})")
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no records of {rng} arrived from offset {position} within "
                    f"kafkaConsumer.pollTimeoutMs={poll_timeout_ms}"
                )



def earliest_offsets(opts: SourceOptions, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    async def run():
        async with Admin(opts.bootstrap_servers, admin_config(opts.kafka)) as admin:
            return await admin.list_offsets(partitions, "earliest")

    return trio.run(run) if partitions else {}


# -- executor: writing ----------------------------------------------------------------------

def produce_batches(bootstrap: str, config: ProducerConfig, batches, topic: str | None) -> int:
    """Send the rows of Arrow ``batches`` (the Kafka sink's columns: value, and optionally
    key, topic, partition, headers; ``topic`` overrides the column) and wait until all are
    delivered; the first delivery error is raised.  Returns how many were sent.

    One trio.run for the whole task: the sender runs at every ``await`` of ``send``, so the
    blocking pull of the next batch from Spark only pauses it between batches.
    """

    async def run() -> int:
        failures: list[BaseException] = []
        sent = 0

        def done(future) -> None:
            exc = future.exception()
            if exc is not None and not failures:
                failures.append(exc)

        async with Producer(bootstrap, config) as producer:
            for batch in batches:
                n = batch.num_rows
                values, keys = _column(batch, "value", True), _column(batch, "key", True)
                partitions = _column(batch, "partition")
                topics = [topic] * n if topic else _column(batch, "topic")
                headers = _column(batch, "headers")
                for i in range(n):
                    if topics[i] is None:
                        raise ValueError("a row to write has a null 'topic' (set the option "
                                         "'topic' or fill the column)")
                    hs = headers[i]
                    future = await producer.send(
                        topics[i], values[i], keys[i],
                        [(h["key"], h["value"]) for h in hs] if hs else None, partitions[i],
                    )
                    future.add_done_callback(done)
                sent += n
                if failures:
                    raise failures[0]
            await producer.flush()
        if failures:
            raise failures[0]
        return sent

    return trio.run(run)


def _column(batch, name: str, payload: bool = False) -> list:
    """Column ``name`` (any case) of an Arrow batch as a list, Nones when absent; string
    payloads are sent as their UTF-8 bytes, as Kafka's sink does."""
    for i, field_name in enumerate(batch.schema.names):
        if field_name.lower() == name:
            values = batch.column(i).to_pylist()
            if payload and batch.schema.types[i] == "string":
                values = [None if v is None else v.encode() for v in values]
            return values
    return [None] * batch.num_rows
