"""What the sidecar's group services (delay/, half/) share: started with
``await nursery.start(service.run)``, stopped with ``await service.stop()``.

Each runs on every sidecar that enables it as one consumer group per cluster: a group
consumer of the service's topics, an idempotent producer for what it hands on, and a side
task following a topic of its own (cancels, checks).  The subclass says what those are and
writes the loop; the clients' lifetime, the offset commits and the orderly stop are written
here once.

Commits: a record read is done when what it hands on is acknowledged.  The loop registers
each write with ``_handed_on(tp, offset, future)`` (``offset``: the first record a replay
must read again to make that write) and commits every so often with ``flush=False``: what
is acknowledged so far, without waiting for the writes in flight (a flush there stopped the
loop, and with it every other partition's work, for up to 1.7 s in a burst).  The stop and a
revocation flush first: their commit is the last this member makes for those partitions."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

import trio

from databus.client import Admin, Consumer, KafkaError, Producer
from databus.protocol.types import TopicPartition

log = logging.getLogger(__name__)


# Every group service's consumer, where the configuration's ``consumer:`` names none
# (docs/delayed.md, docs/transactions.md).  How soon a dead member's work moves: after
# session.timeout.ms, plus up to one heartbeat interval before each other member hears of
# the rebalance.  6 s is the shortest session a Kafka broker accepts by default
# (group.min.session.timeout.ms; the consumer's own default is 45 s, which left a kill -9's
# delayed messages and open transactions 45 s late); a heartbeat every 0.5 s costs the
# coordinator nothing.  cooperative-sticky: the members that live keep their partitions,
# and what they hold of them (delayed records, open transactions), through the handover
# (eager range revoked everything: every member dropped what it held and read it again),
# and topics of one partition each (the delay levels) are spread over the members by count
# (range gave every topic's partition 0 to one member).
CONSUMER_DEFAULTS = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                     "partition.assignment.strategy": "cooperative-sticky"}


def group_consumer_config(defaults: dict, settings: dict) -> dict:
    """``defaults`` under the configuration's ``settings``; a default heartbeat interval is
    kept below a session timeout the configuration lowered (a third of it, Kafka's rule of
    thumb), so that lowering the one alone is not refused for the other."""
    merged = {**defaults, **settings}
    if "heartbeat.interval.ms" in settings:
        return merged
    try:
        session = int(merged["session.timeout.ms"])
        if int(merged["heartbeat.interval.ms"]) >= session:
            merged["heartbeat.interval.ms"] = max(session // 3, 1)
    except (KeyError, TypeError, ValueError):
        pass  # no default to adjust, or a bad value: the consumer's validation names it
    return merged


class PartitionCore(Protocol):
    """The sans-I/O part of a service: what it holds of its assigned partitions."""

    def assign(self, tps: Iterable[TopicPartition]) -> None: ...

    def revoke(self, tps: Iterable[TopicPartition]) -> None: ...

    def safe_offsets(self, unfinished: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition, the offset a commit may name, below every ``unfinished`` one."""
        ...


class BackgroundService:
    """Subclasses set ``name``, ``topics`` and ``linger_ms``, pass their ``core`` and write
    ``_loop`` (return once ``self._stop`` is set; commit with ``flush=False``) and
    ``_follow``, and may override ``_make_topics``."""

    name = "service"
    topics: tuple[str, ...] = ()
    linger_ms = 5

    def __init__(self, cluster: str, bootstrap: str, core: PartitionCore, *, group_id: str,
                 consumer: dict | None = None, producer: dict | None = None) -> None:
        self.cluster = cluster
        self.bootstrap = bootstrap
        self.core = core
        self.group_id = group_id
        self.consumer_settings = dict(consumer or {})
        self.producer_settings = dict(producer or {})
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._closing = False
        self._stop = trio.Event()
        self._done = trio.Event()
        # per partition: (offset, future) of writes handed on and not yet acknowledged, and
        # the lowest offset whose write failed (the commit stays below it: read again by
        # the partition's next owner)
        self._inflight: dict[TopicPartition, list] = {}
        self._failed: dict[TopicPartition, int] = {}

    async def stop(self) -> None:
        self._stop.set()
        await self._done.wait()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        # Started at once: clients and their nurseries are opened inside this task only
        # after it has moved to its final nursery (as the sinks runtime does).
        task_status.started(self)
        try:
            await self._run()
        finally:
            self._done.set()

    async def _run(self) -> None:
        await self._create_topics()
        consumer_config = {
            "group.id": self.group_id, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "fetch.max.wait.ms": 100,
            **group_consumer_config(CONSUMER_DEFAULTS, self.consumer_settings),
        }
        producer_config = {"acks": "all", "enable.idempotence": True,
                           "linger.ms": self.linger_ms, **self.producer_settings}
        async with Producer(self.bootstrap, producer_config) as producer, \
                Consumer(self.bootstrap, consumer_config, on_assigned=self._assigned,
                         on_revoked=self._revoked) as consumer:
            self._producer, self._consumer = producer, consumer
            consumer.subscribe(list(self.topics))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._follow)
                log.info("%s for cluster %s running (group %s)", self.name, self.cluster,
                         self.group_id)
                try:
                    await self._loop(consumer, producer)  # until stop()
                    # the last commit here, not in the revocation of a closing consumer
                    await self._commit(consumer, producer)
                finally:
                    self._closing = True
                    nursery.cancel_scope.cancel()

    async def _create_topics(self) -> None:
        """The service's topics, where a cluster does not create topics on first use (an
        existing topic is fine)."""
        try:
            async with Admin(self.bootstrap) as admin:
                await self._make_topics(admin)
        except (KafkaError, OSError, trio.TooSlowError) as exc:
            log.warning("cluster %s: could not create the %s topics (%s); relying on topic "
                        "auto-creation", self.cluster, self.name, exc)

    async def _make_topics(self, admin: Admin) -> None:
        await admin.create_topics(list(self.topics))

    async def _loop(self, consumer: Consumer, producer: Producer) -> None:
        raise NotImplementedError

    async def _follow(self) -> None:
        raise NotImplementedError

    # -- commits and rebalances ---------------------------------------------------------------

    def _handed_on(self, tp: TopicPartition, offset: int, future) -> None:
        """A write made for the records of ``tp`` from ``offset`` on (a DeliveryFuture)."""
        self._inflight.setdefault(tp, []).append((offset, future))

    def _unacknowledged(self) -> dict[TopicPartition, int]:
        """Per partition, the lowest offset whose write is in flight or failed."""
        unfinished: dict[TopicPartition, int] = {}
        for tp, entries in self._inflight.items():
            failed = [offset for offset, future in entries
                      if future.done() and future.exception() is not None]
            if failed:  # logged once: the entries leave the in-flight list here
                log.error("%s-%d: %d write(s) of the %s failed; their records are read again "
                          "by the partition's next owner", *tp, len(failed), self.name)
                self._failed[tp] = min(failed + [self._failed.get(tp, failed[0])])
            self._inflight[tp] = entries = [e for e in entries if not e[1].done()]
            lows = [offset for offset, _future in entries]
            if tp in self._failed:
                lows.append(self._failed[tp])
            if lows:
                unfinished[tp] = min(lows)
        return unfinished

    async def _commit(self, consumer: Consumer, producer: Producer,
                      only: Iterable[TopicPartition] | None = None, *,
                      flush: bool = True) -> None:
        """Commit, per partition (of ``only``, or all), the core's safe offset below every
        write not acknowledged; ``flush`` waits for the writes in flight first."""
        if flush and any(self._inflight.values()):
            await producer.flush()
        offsets = self.core.safe_offsets(self._unacknowledged())
        if only is not None:
            wanted = set(only)
            offsets = {tp: o for tp, o in offsets.items() if tp in wanted}
        if offsets:
            try:
                await consumer.commit(offsets)
            except KafkaError as exc:
                log.warning("%s: commit failed (%s); will retry", self.name, exc)

    async def _assigned(self, partitions: list[TopicPartition]) -> None:
        self.core.assign(partitions)

    async def _revoked(self, partitions: list[TopicPartition]) -> None:
        # the last commit of these partitions here (not when the consumer closes: the
        # stop's commit in _run comes first); their next owner reads on from it
        if not self._closing and self._consumer is not None and self._producer is not None:
            await self._commit(self._consumer, self._producer, partitions)
        self.core.revoke(partitions)
        for tp in partitions:
            self._inflight.pop(tp, None)
            self._failed.pop(tp, None)
