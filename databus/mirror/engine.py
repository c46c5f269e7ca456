"""One mirror's I/O shell: read the matched source partitions, write the target, keep the
progress on the target (the decisions are in naming, provenance, progress, translate).

Tasks of a running mirror (``MirrorEngine.run``):

* copy      ``Consumer.getmany_columns`` on the assigned source partitions (``assign``, no
            group: adding a topic never rebalances anything) -> loop check (one scan of the
            column buffers) -> ``send_columns`` to the same partition of the target topic:
            the records go from the fetched columns into the target's batch with a
            provenance header each, encoded in C, no Python object per record;
* progress  exactly-once (the default where the target has transactions): the copy runs in
            transactions of ``transaction.boundary.interval.ms``; each one ends with the
            progress of every partition it moved, written to the offset-syncs topic in the
            same transaction, then commits.  The transactional id is the mirror's
            (``transactional_id``): a mirror process starting fences any older one, whose
            open transaction is aborted, and it resumes from the committed progress.
            At-least-once: after the target acknowledged, the new position of each
            partition is written to the offset-syncs topic (at most one write in flight per
            partition);
* discover  every ``metadata.max.age.ms`` (the consumer's): list the source topics, create
            missing target topics with the source's partition count and configs, grow
            partitions, assign the new partitions;
* health    every few seconds: source high watermarks (lag) and a target round trip; a
            cluster going unreachable or coming back is logged once per change;
* groups    with ``sync.group.offsets``: translated group offsets committed on the target.

Failures: the producer retries within ``delivery.timeout.ms``.  Exactly-once: a batch that
still fails, or a commit that does, abandons the transaction; the mirror starts again from
the committed progress (a new producer, fencing the old one's transaction).  At-least-once:
a batch that still fails with a retriable error rewinds its partition to the acknowledged
position once everything in flight for it has settled, and reading starts again from there
(forever, with backoff).  A record the target refuses (non-retriable: too large, ...) or a
target topic that is gone stops that partition: logged, shown by the status table and the
metrics, never skipped.
"""

from __future__ import annotations

import logging
import re
import struct
import time
from collections.abc import Mapping
from typing import Any

import trio

from databus.client import Admin, Consumer, Producer
from databus.client import errors as kerrors
from databus.client.backoff import ExponentialBackoff
from databus.client.config import AdminConfig
from databus.client.offsets import LATEST, list_offsets
from databus.client.transactions import TransactionError
from databus.config import ClusterConfig, resolve_references
from databus.mirror.config import MirrorConfig
from databus.protocol.api_keys import ApiKey
from databus.protocol.columns import KEY_OFFSETS, VALUE_OFFSETS, RecordColumns
from databus.protocol.records import scan_columns
from databus.protocol.types import TopicPartition

from . import progress as prog
from . import provenance
from .metrics import MirrorMetrics, MirrorStats
from .naming import TopicNaming
from .translate import OffsetSearch, from_sync

log = logging.getLogger("databus.mirror")


# Topic configs copied to a target topic when the source sets them (MirrorMaker 2 copies
# every non-default one; these are the ones that change what the copy keeps and accepts).
COPIED_TOPIC_CONFIGS = (
    "cleanup.policy", "retention.ms", "retention.bytes", "max.message.bytes",
    "segment.bytes", "segment.ms", "min.compaction.lag.ms", "delete.retention.ms",
    "message.timestamp.type",
)
# Defaults the mirror's clients use unless the mirror's consumer:/producer: say otherwise:
# bigger polls and batches than an app's (a mirror copies bulk), idempotence and acks=all
# always.
CONSUMER_DEFAULTS = {"max.poll.records": 10000, "fetch.max.wait.ms": 100}
PRODUCER_DEFAULTS = {"linger.ms": 10, "batch.size": 262144}
# Exactly-once: a transaction left open by a mirror killed mid-copy holds back every
# read_committed reader of its partitions (the progress topic's too, shared by the mirrors of
# a target) until it is aborted: by the mirror's restart, else by this timeout (Kafka
# Streams' exactly-once default).
TRANSACTIONAL_PRODUCER_DEFAULTS = {"transaction.timeout.ms": 10000}
TRANSACTION_APIS = ("INIT_PRODUCER_ID", "ADD_PARTITIONS_TO_TXN", "END_TXN")
POSITION_SWEEP_INTERVAL = 1.0  # seconds between looks for positions moved without records
HEALTH_INTERVAL = 5.0
RETRY_BACKOFF = (0.2, 10.0)  # seconds: first and longest wait between attempts


def _admin_settings(*overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The connection keys (timeouts, client.id, backoff) of the mirror's overrides that the
    admin client shares with the consumer and the producer."""
    keys = {info.alias or name for name, info in AdminConfig.model_fields.items()}
    out: dict[str, Any] = {}
    for settings in overrides:
        out.update({k: v for k, v in settings.items() if k in keys and k != "bootstrap.servers"})
    return out


def transactional_id(mirror: str) -> str:
    """The transactional id of a mirror's target producer: one per mirror, the same in every
    process that runs it, so a new process fences the old one."""
    return f"databus-mirror-{mirror}"


class TransactionAbandoned(Exception):
    """Exactly-once: the open transaction cannot commit; start again from the committed
    progress (``MirrorEngine.run`` does, with backoff)."""


class TransactionsUnsupported(Exception):
    """``exactly.once: true`` and the target has no transactions."""


def retriable(error: BaseException) -> bool:
    # A refused login is not the record's fault: the partition waits (rewinds) until the
    # credentials are fixed, rather than stopping as for a record the target refuses.
    return isinstance(error, (kerrors.DeliveryTimeoutError, kerrors.RequestTimedOutError,
                              kerrors.AuthenticationError)) or (
        isinstance(error, kerrors.KafkaError) and error.retriable
    )


class _Reachability:
    """Logs a cluster going unreachable and coming back once per change, not per attempt."""

    def __init__(self, stats: MirrorStats, role: str, cluster: str, mirror: str) -> None:
        self.stats, self.role, self.cluster, self.mirror = stats, role, cluster, mirror
        self.known: bool | None = None

    def ok(self) -> None:
        if self.known is False:
            log.info("mirror %s: %s cluster %s is reachable again", self.mirror, self.role,
                     self.cluster)
        self.known = True
        self.stats.reachable[self.role] = True

    def failed(self, exc: BaseException) -> None:
        if self.known is not False:
            log.warning("mirror %s: %s cluster %s %s, retrying with backoff: %s",
                        self.mirror, self.role, self.cluster,
                        "refused the login" if isinstance(exc, kerrors.AuthenticationError)
                        else "unreachable", exc)
        self.known = False
        self.stats.reachable[self.role] = False


class _Partition:
    """A mirrored source partition: its progress, stats and target."""

    __slots__ = (
        "header_prefix",
        "progress",
        "rewinding",
        "sent_end",
        "stats",
        "stopped",
        "sync_in_flight",
        "target_topic",
        "tp",
    )

    def __init__(self, tp, target_topic, progress, stats, header_prefix) -> None:
        self.tp = tp
        self.target_topic = target_topic
        self.progress: prog.PartitionProgress = progress
        self.stats = stats
        self.stopped: str | None = None
        self.rewinding = False
        self.sync_in_flight = False
        self.header_prefix: bytes = header_prefix
        # last source offset handed to the producer (or passed over): the end of the
        # copy not yet in the progress topic, what a crash would copy again (at-least-once)
        self.sent_end = progress.acked.source_offset

    def refresh_stats(self) -> None:
        """Mirrored position, lag and in-flight span from the recorded progress (what a
        restart resumes from) and the last known source high watermark."""
        synced = self.progress.synced
        stats = self.stats
        stats.mirrored = synced.source_offset + 1
        stats.target_offset = synced.target_offset
        stats.in_flight = max(self.sent_end - synced.source_offset, 0)
        if stats.source_end >= 0:
            stats.lag = max(stats.source_end - max(stats.mirrored, 0), 0)


class MirrorEngine:
    def __init__(self, mirror: MirrorConfig, clusters: Mapping[str, ClusterConfig],
                 metrics: MirrorMetrics) -> None:
        self.mirror = mirror
        self.source = clusters[mirror.source]
        self.target = clusters[mirror.target]
        self.naming = TopicNaming.from_config(mirror, self.source.region)
        self.stats = metrics.mirror(mirror.name, mirror.source, mirror.target)
        # Each side's TLS/SASL settings come from its cluster (clusters: in sidecar.yaml)
        source_security = self.source.connection_settings()
        target_security = self.target.connection_settings()
        self.consumer_config = {**CONSUMER_DEFAULTS, **source_security,
                                **resolve_references(mirror.consumer),
                                "enable.auto.commit": False, "auto.offset.reset": mirror.start}
        self.producer_config = {**PRODUCER_DEFAULTS, **target_security,
                                **resolve_references(mirror.producer),
                                "acks": "all", "enable.idempotence": True}
        self.transactional_producer_config = {
            **PRODUCER_DEFAULTS, **TRANSACTIONAL_PRODUCER_DEFAULTS, **target_security,
            **resolve_references(mirror.producer), "acks": "all", "enable.idempotence": True,
            "transactional.id": transactional_id(mirror.name)}
        # None until the first run looked at the target (the exactly.once setting, else
        # whether the target has transactions)
        self.exactly_once: bool | None = None
        # partitions stopped by a refused record, kept across restarts from the committed
        # progress (a new MirrorEngine, after a config change, tries them again)
        self.stopped: dict[TopicPartition, str] = {}
        shared = _admin_settings(mirror.consumer, mirror.producer)
        self.source_admin_config = {**shared, **source_security}
        self.admin_config = {**shared, **target_security}  # the target's (progress, groups)
        self.target_prefix = provenance.prefix(mirror.target)
        self.source_health = _Reachability(self.stats, "source", mirror.source, mirror.name)
        self.target_health = _Reachability(self.stats, "target", mirror.target, mirror.name)
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self.source_admin: Admin | None = None
        self.target_admin: Admin | None = None
        self._reset()

    def _reset(self) -> None:
        """The state of one run (a restart from the committed progress begins afresh)."""
        self.parts: dict[TopicPartition, _Partition] = {}
        self.topic_partitions: dict[str, int] = {}  # source topic -> partitions mirrored
        self.syncs: dict[TopicPartition, prog.OffsetSync] = {}
        self._progress_wakeup = trio.Event()
        self._assigned = trio.Event()
        self._first_scan_done = False
        self._nursery: trio.Nursery | None = None
        self._txn_failure: BaseException | None = None
        self._txn_acked: list[tuple[_Partition, prog.Chunk, int, int]] = []
        self._next_sweep = 0.0
        # added to every transaction with its records' partitions (else a progress write
        # adds its partition alone)
        self._progress_tps: list[TopicPartition] = []

    @property
    def name(self) -> str:
        return self.mirror.name

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled.  ``started()`` once progress is loaded and copying begins.
        Exactly-once, a transaction that cannot commit starts the run again from the
        committed progress."""
        m = self.mirror
        log.info("mirror %s: %s -> %s starting", m.name, m.source, m.target)
        backoff = ExponentialBackoff(*(int(s * 1000) for s in RETRY_BACKOFF))
        attempt = 0
        while True:
            try:
                await self._run_once(task_status)
            except* TransactionAbandoned as group:
                exc = group.exceptions[0]
                self.stats.transactions_aborted += 1
                delay = backoff.backoff_ms(attempt) / 1000
                attempt += 1
                log.warning("mirror %s: transaction abandoned (%s); starting again from the "
                            "committed progress in %.1fs", m.name, exc, delay)
                await trio.sleep(delay)
                self._reset()
                task_status = trio.TASK_STATUS_IGNORED

    async def _run_once(self, task_status) -> None:
        m = self.mirror
        async with (
            Admin(self.source.bootstrap_servers, self.source_admin_config) as self.source_admin,
            Admin(self.target.bootstrap_servers, self.admin_config) as self.target_admin,
        ):
            if self.exactly_once is None:
                self.exactly_once = await self._retry(self._target_has_transactions,
                                                      self.target_health)
                self.stats.exactly_once = self.exactly_once
            consumer_config = self.consumer_config
            if self.exactly_once:
                # aborted source transactions are not copied (they would commit on the
                # target); the mirror's consumer: may say otherwise
                consumer_config = {"isolation.level": "read_committed", **consumer_config}
            async with (
                Consumer(self.source.bootstrap_servers, consumer_config) as self.consumer,
                # innermost: closed at once when a transaction is abandoned
                Producer(self.target.bootstrap_servers,
                         self.transactional_producer_config if self.exactly_once
                         else self.producer_config) as self.producer,
            ):
                if self.exactly_once:
                    # fences an older process of this mirror and aborts what it left open,
                    # so the progress read next is final
                    await self._retry(self._init_transactions, self.target_health)
                await self._retry(self._load_progress, self.target_health)
                try:
                    async with trio.open_nursery() as nursery:
                        self._nursery = nursery
                        await nursery.start(self._discover_loop)
                        if self.exactly_once:
                            nursery.start_soon(self._transaction_loop)
                        else:
                            nursery.start_soon(self._copy_loop)
                            nursery.start_soon(self._progress_loop)
                        nursery.start_soon(self._health_loop)
                        if m.sync_group_offsets:
                            nursery.start_soon(self._group_sync_loop)
                        task_status.started()
                except* TransactionAbandoned:
                    # Closed at once, not flushed: what is queued belongs to a transaction
                    # that will be aborted (the next InitProducerId does it).
                    await self.producer.close()
                    raise

    async def _target_has_transactions(self) -> bool:
        """The ``exactly.once`` setting, else whether the target speaks the transaction
        APIs (ApiVersions)."""
        wanted = self.mirror.exactly_once
        if wanted is False:
            log.info("mirror %s: at-least-once (exactly.once: false)", self.name)
            return False
        connection = await self.target_admin.cluster.any_connection()
        missing = [name for name in TRANSACTION_APIS
                   if getattr(ApiKey, name) not in connection.broker_versions]
        if not missing:
            log.info("mirror %s: exactly-once (transactional id %s)", self.name,
                     transactional_id(self.name))
            return True
        if wanted:
            raise TransactionsUnsupported(
                f"mirror {self.name}: exactly.once is true but target {self.mirror.target} "
                f"does not support transactions (no {', '.join(missing)})")
        log.warning("mirror %s: target %s does not support transactions (no %s): copying "
                    "at-least-once", self.name, self.mirror.target, ", ".join(missing))
        return False

    async def _init_transactions(self) -> None:
        try:
            await self.producer.init_transactions()
        except TransactionError as exc:  # fatal for this producer: start afresh
            raise TransactionAbandoned(f"init_transactions: {exc}") from exc

    async def _retry(self, fn, health: _Reachability):
        backoff = ExponentialBackoff(*(int(s * 1000) for s in RETRY_BACKOFF))
        attempt = 0
        while True:
            try:
                result = await fn()
            except (kerrors.KafkaError, OSError) as exc:
                health.failed(exc)
                await trio.sleep(backoff.backoff_ms(attempt) / 1000)
                attempt += 1
                continue
            health.ok()
            return result

    # -- progress -----------------------------------------------------------------------------

    async def _load_progress(self) -> None:
        """Create the offset-syncs topic if missing and read this mirror's syncs from it."""
        topic = self.mirror.offset_syncs_topic
        # compacted, one partition; a cluster without CreateTopics makes it on first use
        await self.target_admin.ensure_topics({topic: 1}, configs={"cleanup.policy": "compact"},
                                              or_auto_create=True)
        self.syncs = await read_offset_syncs(
            self.target.bootstrap_servers, topic, self.name, self.admin_config
        )
        # the producer's view of it (its metadata request creates it where the cluster
        # creates topics on first use); with one partition, every progress record goes there
        partitions = await self.producer.partitions_for(topic)
        self._progress_tps = [(topic, partitions[0])] if len(partitions) == 1 else []
        log.info("mirror %s: progress of %d partition(s) read from %s", self.name,
                 len(self.syncs), topic)

    async def _progress_loop(self) -> None:
        topic = self.mirror.offset_syncs_topic
        while True:
            await self._progress_wakeup.wait()
            self._progress_wakeup = trio.Event()
            for part in list(self.parts.values()):
                if part.sync_in_flight or not part.progress.dirty:
                    continue
                sync = part.progress.acked
                part.sync_in_flight = True
                key = prog.encode_key(self.name, *part.tp)
                try:
                    fut = await self.producer.send(topic, prog.encode_value(sync), key=key)
                except kerrors.KafkaError as exc:
                    part.sync_in_flight = False
                    log.warning("mirror %s: queueing progress of %s-%d failed: %s", self.name,
                                *part.tp, exc)
                    await trio.sleep(RETRY_BACKOFF[0])
                    self._progress_wakeup.set()
                    continue
                fut.add_done_callback(lambda f, p=part, s=sync: self._synced(p, s, f))

    def _synced(self, part: _Partition, sync: prog.OffsetSync, fut) -> None:
        part.sync_in_flight = False
        if fut.exception() is None:
            part.progress.synced = sync
            self.syncs[part.tp] = sync
            part.refresh_stats()
        if part.progress.dirty:
            self._progress_wakeup.set()

    # -- discovery ----------------------------------------------------------------------------

    async def _discover_loop(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        interval = self.consumer.config.metadata_max_age_ms / 1000
        backoff = ExponentialBackoff(*(int(s * 1000) for s in RETRY_BACKOFF))
        failures = 0
        started = False
        while True:
            try:
                await self._discover()
            except (kerrors.KafkaError, OSError) as exc:
                self.source_health.failed(exc)
                delay = min(backoff.backoff_ms(failures) / 1000, interval)
                failures += 1
            else:
                self.source_health.ok()
                failures = 0
                delay = interval
            if not started:
                started = True
                task_status.started()
            await trio.sleep(delay)

    async def _discover(self) -> None:
        admin = self.source_admin
        names = self.naming.select(await admin.list_topics())
        described = await admin.describe_topics(names) if names else {}
        grown = []
        for topic in names:
            desc = described.get(topic)
            if not hasattr(desc, "partitions"):
                continue  # deleted between the two requests
            count = len(desc.partitions)
            if self.topic_partitions.get(topic, 0) >= count:
                continue
            target_count = await self._ensure_target_topic(topic, count)
            if target_count is None:
                continue
            first = self.topic_partitions.get(topic, 0)
            self.topic_partitions[topic] = count
            grown.extend(self._add_partition(topic, p, target_count) for p in range(first, count))
        if grown:
            self.consumer.assign(list(self.parts))
            for part in grown:
                self._seek_start(part, new_topic=self._first_scan_done)
                if part.stopped:
                    self.consumer.pause(part.tp)
            self._assigned.set()
            log.info("mirror %s: copying %d new partition(s): %s", self.name, len(grown),
                     ", ".join(f"{t}-{p}" for t, p in (x.tp for x in grown)))
        self._first_scan_done = True

    def _add_partition(self, topic: str, partition: int, target_count: int) -> _Partition:
        tp = (topic, partition)
        stats = self.stats.partition(topic, partition)
        progress = prog.PartitionProgress(self.syncs.get(tp))
        part = _Partition(
            tp, self.naming.target_topic(topic), progress, stats,
            provenance.encode(self.mirror.source, self.naming.region, topic, partition, 0)[:-1],
        )
        progress.on_ack = lambda chunk, start, count, first, append_ms, p=part: self._acked(
            p, chunk, start, count, append_ms)
        progress.on_failure = lambda exc, p=part: self._failed(p, exc)
        stats.error = None
        part.refresh_stats()
        self.parts[tp] = part
        if tp in self.stopped:
            self._stop(part, self.stopped[tp])
        elif partition >= target_count:
            self._stop(part, f"target topic {part.target_topic} has {target_count} partition(s), "
                             f"so source partition {partition} has no counterpart there")
        return part

    def _seek_start(self, part: _Partition, *, new_topic: bool) -> None:
        """Position a partition: after its progress, else by ``start`` (a topic or partition
        that appears while the mirror runs starts at the beginning: its first records were
        written before the mirror noticed it)."""
        offset = part.progress.next_offset
        if offset is not None:
            self.consumer.seek(part.tp, offset)
        elif self.mirror.start == "latest" and not new_topic:
            self.consumer.seek_to_end(part.tp)
        else:
            self.consumer.seek_to_beginning(part.tp)

    async def _ensure_target_topic(self, topic: str, count: int) -> int | None:
        """Create (or grow) the target topic; returns its partition count, or None to try
        again at the next discovery."""
        target = self.naming.target_topic(topic)
        admin = self.target_admin
        try:
            configs = await self._source_configs(topic)
            created = await admin.create_topics({target: count}, configs=configs)
            error = created.get(target)
            if error is None:
                log.info("mirror %s: created %s on %s (%d partitions%s)", self.name, target,
                         self.mirror.target, count,
                         ", " + ", ".join(f"{k}={v}" for k, v in configs.items()) if configs else "")
            elif not isinstance(error, kerrors.TopicAlreadyExistsError):
                raise error
        except kerrors.KafkaError as exc:
            # A cluster that cannot create topics through the admin API (librdkafka's mock
            # names no controller) may still create them on first use; the producer's
            # metadata request below does that where auto.create.topics.enable is on.
            self.stats.errors += 1
            log.warning("mirror %s: could not create %s on %s (%s); relying on the cluster "
                        "to create it on first use", self.name, target, self.mirror.target, exc)
        described = await admin.describe_topics([target])
        desc = described.get(target)
        have = len(desc.partitions) if hasattr(desc, "partitions") else 0
        if have == 0:
            have = len(await self.producer.partitions_for(target))
        if have < count:
            result = await admin.create_partitions({target: count})
            if result.get(target) is None:
                log.info("mirror %s: grew %s to %d partitions", self.name, target, count)
                have = count
            else:
                log.error("mirror %s: could not grow %s to %d partitions: %s", self.name, target,
                          count, result[target])
        await self.producer.partitions_for(target)
        return have

    async def _source_configs(self, topic: str) -> dict[str, str]:
        try:
            got = await self.source_admin.describe_configs(topics=[topic])
        except kerrors.KafkaError:
            return {}
        entries = got.get(topic)
        if not isinstance(entries, dict):
            return {}
        return {k: e.value for k, e in entries.items()
                if k in COPIED_TOPIC_CONFIGS and not e.is_default and e.value is not None}

    # -- copying ------------------------------------------------------------------------------

    async def _copy_loop(self) -> None:
        consumer = self.consumer
        while True:
            if not self.parts:
                await self._assigned.wait()
                self._assigned = trio.Event()
                continue
            try:
                batches = await consumer.getmany_columns(
                    timeout=1.0, max_records=consumer.config.max_poll_records)
            except kerrors.KafkaError as exc:
                self.source_health.failed(exc)
                await trio.sleep(RETRY_BACKOFF[0])
                continue
            for tp, records in batches.items():
                if records:
                    await self._copy(tp, records)
            await self._sweep_positions()

    async def _transaction_loop(self) -> None:
        """Exactly-once: copy for ``transaction.boundary.interval.ms``, then write the
        progress of every partition that moved and commit, all in one transaction."""
        while True:
            if not self.parts:
                await self._assigned.wait()
                self._assigned = trio.Event()
                continue
            try:
                await self._transaction()
            except (kerrors.KafkaError, OSError) as exc:
                raise TransactionAbandoned(str(exc) or type(exc).__name__) from exc

    async def _transaction(self) -> None:
        consumer = self.consumer
        self.producer.begin_transaction()
        deadline = trio.current_time() + self.mirror.transaction_boundary_interval_ms / 1000
        while self._txn_failure is None:
            timeout = deadline - trio.current_time()
            if timeout <= 0:
                break
            try:
                batches = await consumer.getmany_columns(
                    timeout=timeout, max_records=consumer.config.max_poll_records)
            except kerrors.KafkaError as exc:
                self.source_health.failed(exc)
                await trio.sleep(min(RETRY_BACKOFF[0], max(timeout, 0)))
                continue
            if batches:
                # the target partitions of the poll and the progress topic, in one request
                await self.producer.add_partitions_to_transaction(
                    self._progress_tps + [
                        (self.parts[tp].target_topic, tp[1]) for tp in batches
                        if tp in self.parts and not self.parts[tp].stopped])
            for tp, records in batches.items():
                if records:
                    await self._copy(tp, records)
        await self._sweep_positions()
        await self._commit()

    async def _commit(self) -> None:
        """Write the progress of every partition that moved, then commit.  The progress
        names the last source offset copied (what a restart resumes after) and, as its
        target offset, the last one already acknowledged: not waiting for the rest keeps
        the commit to one flush.  That target offset may be a little behind (offset
        translation stays conservative with it: a failed-over group may re-read, never
        skip); the next transaction writes the exact one."""
        producer = self.producer
        synced = []
        for part in self.parts.values():
            progress = part.progress
            sync = prog.OffsetSync(part.sent_end, progress.acked.target_offset)
            if part.sent_end >= 0 and sync != progress.synced:
                await producer.send(self.mirror.offset_syncs_topic, prog.encode_value(sync),
                                    key=prog.encode_key(self.name, *part.tp))
                synced.append((part, sync))
        await producer.flush()
        if self._txn_failure is not None:
            raise self._txn_failure
        await producer.commit_transaction()
        self.target_health.ok()
        now_ms = time.time() * 1000
        for part, chunk, start, count in self._txn_acked:
            self._count(part, chunk, start, count, now_ms)
        self._txn_acked.clear()
        for part, sync in synced:
            part.progress.synced = sync
            self.syncs[part.tp] = sync
            part.refresh_stats()
        self.stats.transactions_committed += 1

    async def _sweep_positions(self) -> None:
        """Move the progress of partitions whose read position passed offsets that hold no
        record to copy (control batches, aborted transactions, compacted gaps at the end of
        the log), so a caught-up partition's progress reaches the source's end.  Runs in
        the copy task, between polls: every record read is registered by then."""
        now = trio.current_time()
        if now < self._next_sweep:
            return
        self._next_sweep = now + POSITION_SWEEP_INTERVAL
        moved = False
        for part in list(self.parts.values()):
            if part.stopped or part.rewinding or part.progress.failure:
                continue
            try:
                position = await self.consumer.position(part.tp)
            except (kerrors.KafkaError, OSError):
                continue  # no position yet
            if position - 1 > part.sent_end:
                part.sent_end = position - 1
                part.progress.add([], [], position - 1)
                moved = True
        if moved:
            self._progress_wakeup.set()

    async def _copy(self, tp: TopicPartition, records: RecordColumns) -> None:
        """Hand one partition's fetched records to the producer as they are in the
        consumer's column buffers: the C encoder writes each with its provenance header
        straight into the target's batch (``Producer.send_columns``), no object per
        record; the loop check and the size check are one scan of the same buffers."""
        part = self.parts.get(tp)
        if part is None or part.stopped or part.rewinding or part.progress.failure:
            return  # read again from the acknowledged position after the rewind
        row, stop = records.row_range
        buffers = records.buffers
        offsets = records.offsets
        end = offsets[-1]
        prefix = part.header_prefix
        skipped, too_large, size = scan_columns(
            buffers, row, stop, provenance.HEADER, self.target_prefix, len(prefix),
            self.producer.max_record_size)
        if too_large >= 0:
            # Send what came before it, then stop at this record: never skip it.
            end = offsets[too_large - row] - 1
            await self._send_columns(part, records, skipped, too_large, end)
            self._stop(part, f"record at offset {offsets[too_large - row]} is about {size} "
                             "bytes, more than "
                             f"max.request.size={self.producer.config.max_request_size}")
            return
        part.stats.skipped += len(skipped)
        await self._send_columns(part, records, skipped, stop, end)

    async def _send_columns(self, part: _Partition, records: RecordColumns,
                            skipped: list[int], stop: int, end: int) -> None:
        row = records.row_range[0]
        taken = records.slice(0, stop - row)
        if skipped:
            passed = set(skipped)
            keep = [i for i in range(stop - row) if i + row not in passed]
            offsets = [taken.offsets[i] for i in keep]
            stamps = [taken.timestamps[i] for i in keep]
        else:  # copies: the chunk outlives the fetch's buffers being reused
            offsets = memoryview(bytes(taken.offsets)).cast("q")
            stamps = memoryview(bytes(taken.timestamps)).cast("q")
        if end < 0 and not len(offsets):
            return
        part.sent_end = max(part.sent_end, end)
        chunk = part.progress.add(offsets, stamps, end)
        if not len(offsets):
            self._progress_wakeup.set()
            return
        buffers = records.buffers
        first, last = row, stop
        chunk.size = (_span(buffers, KEY_OFFSETS, first, last)
                      + _span(buffers, VALUE_OFFSETS, first, last)
                      + len(offsets) * (len(provenance.HEADER) + len(part.header_prefix) + 8))
        rewrite = (provenance.HEADER, part.header_prefix, self.target_prefix)
        while True:
            try:
                await self.producer.send_columns(part.target_topic, part.tp[1], buffers,
                                                 (first, last), rewrite, skipped, chunk)
                return
            except kerrors.BufferExhaustedError:
                continue  # the target is slow or away: keep waiting for room, never drop

    def _acked(self, part: _Partition, chunk, start: int, count: int, append_ms: int) -> None:
        if self.exactly_once:
            self._txn_acked.append((part, chunk, start, count))  # counted at the commit
            return
        self._count(part, chunk, start, count,
                    append_ms if append_ms >= 0 else time.time() * 1000)
        self._progress_wakeup.set()

    def _count(self, part: _Partition, chunk, start: int, count: int, visible_ms: float) -> None:
        """Records that readers of the target can now see (acknowledged; exactly-once:
        committed), at ``visible_ms``."""
        stats = part.stats
        stats.records += count
        stats.bytes += chunk.size * count // max(len(chunk.offsets), 1)
        stats.latency.observe_ages(visible_ms, chunk.timestamps[start:start + count])

    def _failed(self, part: _Partition, exc: BaseException) -> None:
        part.stats.errors += 1
        if self.exactly_once:
            # the transaction cannot commit: the loop abandons it at its end
            if self._txn_failure is None:
                self._txn_failure = exc
            if not retriable(exc):
                self.stopped[part.tp] = f"the target refused a record: {exc}"
            return
        if retriable(exc):
            log.warning("mirror %s: delivery to %s-%d failed (%s); reading %s-%d again from "
                        "offset %s", self.name, part.target_topic, part.tp[1], exc, *part.tp,
                        part.progress.next_offset)
            part.rewinding = True
            self.consumer.pause(part.tp)
            self._nursery.start_soon(self._rewind, part)
        else:
            self._stop(part, f"the target refused a record: {exc}")

    async def _rewind(self, part: _Partition) -> None:
        while not part.progress.settled:
            await trio.sleep(0.05)
        described = await self._retry(
            lambda: self.target_admin.describe_topics([part.target_topic]), self.target_health
        )
        if isinstance(described.get(part.target_topic), kerrors.UnknownTopicOrPartitionError):
            self._stop(part, f"target topic {part.target_topic} no longer exists")
            return
        await trio.sleep(RETRY_BACKOFF[0])
        part.progress.rewind()
        part.sent_end = part.progress.acked.source_offset
        self._seek_start(part, new_topic=True)
        part.rewinding = False
        self.consumer.resume(part.tp)

    def _stop(self, part: _Partition, reason: str) -> None:
        part.stopped = part.stats.error = reason
        part.stats.errors += 1
        if part.tp in self.consumer.assignment():
            self.consumer.pause(part.tp)
        log.error("mirror %s: partition %s-%d STOPPED at source offset %s: %s (fix the cause "
                  "and restart the mirror; nothing after it is copied)", self.name, *part.tp,
                  part.progress.next_offset if part.progress.next_offset is not None else
                  "(its start)",
                  reason)

    # -- health and lag -----------------------------------------------------------------------

    async def _health_loop(self) -> None:
        while True:
            await self.refresh_lag()
            await trio.sleep(HEALTH_INTERVAL)

    async def refresh_lag(self) -> None:
        tps = list(self.parts)
        if tps:
            try:
                ends = await self.source_admin.list_offsets(tps, "latest")
            except (kerrors.KafkaError, OSError) as exc:
                self.source_health.failed(exc)
            else:
                self.source_health.ok()
                for tp, end in ends.items():
                    part = self.parts.get(tp)
                    if part is not None:
                        part.stats.source_end = end
                        part.refresh_stats()
        try:
            await self.target_admin.describe_topics([self.mirror.offset_syncs_topic])
        except (kerrors.KafkaError, OSError) as exc:
            self.target_health.failed(exc)
        else:
            self.target_health.ok()

    # -- group offsets ------------------------------------------------------------------------

    async def _group_sync_loop(self) -> None:
        interval = self.mirror.sync_group_offsets_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            try:
                await self.sync_group_offsets()
            except (kerrors.KafkaError, OSError) as exc:
                self.stats.errors += 1
                log.warning("mirror %s: group offset sync failed, retrying in %gs: %s",
                            self.name, interval, exc)

    async def sync_group_offsets(self) -> int:
        """Commit translated offsets on the target for the source's groups that have no
        active member there; only ever moves a target group's offset forward.  Returns the
        number of offsets committed."""
        pattern = re.compile(self.mirror.groups_regex)
        groups = [g for g, kind in await self.source_admin.list_groups()
                  if pattern.fullmatch(g) and kind in ("consumer", "")]
        committed = 0
        for group in groups:
            offsets = {tp: off for tp, off in
                       (await self.source_admin.list_group_offsets(group)).items()
                       if tp in self.parts}
            if not offsets:
                continue
            described = (await self.target_admin.describe_groups([group])).get(group)
            if described is not None and described.members:
                continue  # active on the target: its own commits win
            translated = await translate_offsets(
                self.target.bootstrap_servers, self.naming, self.mirror.source,
                {tp: self.parts[tp].progress.synced for tp in offsets
                 if self.parts[tp].progress.synced.source_offset >= 0},
                offsets, self.admin_config,
            )
            try:
                current = await self.target_admin.list_group_offsets(group)
            except kerrors.KafkaError:
                current = {}
            forward = {ttp: off for ttp, off in translated.values()
                       if off is not None and off > current.get(ttp, -1)}
            if forward:
                await commit_group_offsets(self.target.bootstrap_servers, group, forward,
                                           self.admin_config)
                committed += len(forward)
                self.stats.group_offsets_synced += len(forward)
                log.info("mirror %s: group %s: committed %d translated offset(s) on %s",
                         self.name, group, len(forward), self.mirror.target)
        return committed


_I32 = struct.Struct("<i")


def _span(buffers: list, offsets: int, first: int, last: int) -> int:
    """Bytes of rows first..last-1 of a binary column (its end offsets are int32s)."""
    data = buffers[offsets]
    return _I32.unpack_from(data, last * 4)[0] - _I32.unpack_from(data, first * 4)[0]


# -- helpers shared with `databus mirror` ------------------------------------------------------


async def read_offset_syncs(bootstrap: str, topic: str, mirror: str,
                            settings: Mapping[str, Any] | None = None, *,
                            stable: bool = False) -> dict[TopicPartition, prog.OffsetSync]:
    """Read the committed records of the offset-syncs topic (read_committed: an aborted
    transaction's progress never counts) from the beginning to its current end: the high
    watermark, waiting for transactions still open there (a starting mirror, whose own were
    just aborted, must see all its committed progress), or with ``stable`` the last stable
    offset (what is committed now: ``mirror status``)."""
    config = {**(settings or {}), "enable.auto.commit": False, "auto.offset.reset": "earliest",
              "isolation.level": "read_committed"}
    async with Admin(bootstrap, settings or {}) as admin:
        described = (await admin.describe_topics([topic])).get(topic)
        if not hasattr(described, "partitions"):
            if isinstance(described, kerrors.UnknownTopicOrPartitionError):
                return {}
            raise described
        tps = [(topic, p.partition) for p in described.partitions]
        ends = {tp: off for tp, (off, _) in (await list_offsets(
            admin.cluster, dict.fromkeys(tps, LATEST), timeout=30,
            isolation_level=1 if stable else 0)).items()}
    wanted = {tp: end for tp, end in ends.items() if end > 0}
    records: list[tuple[bytes | None, bytes | None]] = []
    if wanted:
        async with Consumer(bootstrap, config) as consumer:
            consumer.assign(list(wanted))
            consumer.seek_to_beginning(*wanted)
            remaining = dict(wanted)
            while remaining:
                for batch in (await consumer.getmany(timeout=1.0)).values():
                    records.extend((r.key, r.value) for r in batch)
                # the position, not the last record: a transaction's marker ends the log
                for tp, end in list(remaining.items()):
                    if await consumer.position(tp) >= end:
                        del remaining[tp]
    return prog.read_syncs(records, mirror)


async def translate_offsets(
    target_bootstrap: str, naming: TopicNaming, source_cluster: str,
    syncs: Mapping[TopicPartition, prog.OffsetSync], committed: Mapping[TopicPartition, int],
    settings: Mapping[str, Any] | None = None,
) -> dict[TopicPartition, tuple[TopicPartition, int | None]]:
    """{source tp: committed offset} -> {source tp: (target tp, target offset or None)}.

    None: the target has nothing to resume from yet (no copy and no progress)."""
    out: dict[TopicPartition, tuple[TopicPartition, int | None]] = {}
    searches: dict[TopicPartition, int] = {}
    for tp, offset in committed.items():
        target_tp = (naming.target_topic(tp[0]), tp[1])
        quick = from_sync(syncs.get(tp), offset)
        if quick is not None:
            out[tp] = (target_tp, quick)
        else:
            searches[tp] = offset
    if not searches:
        return out
    config = {**(settings or {}), "enable.auto.commit": False, "auto.offset.reset": "earliest",
              "max.poll.records": 500, "isolation.level": "read_committed"}
    async with Consumer(target_bootstrap, config) as consumer:
        target_tps = {tp: (naming.target_topic(tp[0]), tp[1]) for tp in searches}
        consumer.assign(list(target_tps.values()))
        starts = await consumer.beginning_offsets(target_tps.values())
        ends = await consumer.end_offsets(target_tps.values())
        for tp, offset in searches.items():
            ttp = target_tps[tp]
            sync = syncs.get(tp)
            end = sync.target_offset + 1 if sync is not None and sync.target_offset >= 0 else ends[ttp]
            if ends[ttp] <= starts[ttp]:
                out[tp] = (ttp, None if sync is None else end)
                continue
            search = OffsetSearch(starts[ttp], end, offset)
            want = provenance.prefix(source_cluster)
            while (probe := search.probe()) is not None:
                found = await _first_copy(consumer, ttp, probe, search.end, want, tp)
                search.feed(probe, found)
            out[tp] = (ttp, search.result)
    return out


async def _first_copy(consumer: Consumer, ttp: TopicPartition, start: int, end: int,
                      want: bytes, source_tp: TopicPartition) -> tuple[int, int] | None:
    """(target offset, source offset) of the first copy of ``source_tp`` in [start, end)."""
    consumer.seek(ttp, start)
    position = start
    while position < end:
        batch = (await consumer.getmany(ttp, timeout=5.0)).get(ttp)
        if not batch:
            return None
        for r in batch:
            if r.offset >= end:
                return None
            p = provenance.last_from(r.headers, want)
            if p is not None and (p.topic, p.partition) == source_tp:
                return r.offset, p.offset
        position = batch[-1].offset + 1
    return None


async def commit_group_offsets(bootstrap: str, group: str, offsets: Mapping[TopicPartition, int],
                               settings: Mapping[str, Any] | None = None) -> None:
    """Commit ``offsets`` for ``group`` on a cluster without joining the group."""
    config = {**(settings or {}), "group.id": group, "enable.auto.commit": False}
    async with Consumer(bootstrap, config) as consumer:
        consumer.assign(list(offsets))
        await consumer.commit(dict(offsets))
