"""The delay service: moves delayed messages down the delay topics and delivers them on time.

The trio shell around delay_core (where the storage scheme is described).  One service per
cluster, in every sidecar with ``delay.enabled``; the sidecars form one consumer group
(``delay.group.id``) over the level topics, so a sidecar that dies hands its partitions
(and so its pending messages) to the others after the group's session timeout, as any Kafka
consumer group does: it works the same against the built-in broker and any Kafka cluster.

Loop: fetch from the assigned level partitions (a partition holding ``max_held`` records is
paused: memory stays bounded however many messages wait), sleep until the earliest ready
record (one deadline per partition), forward or deliver what is ready through one
idempotent producer (acks=all), and every ``COMMIT_INTERVAL_S`` commit, per partition, the
offset below the first record not yet handed on and acknowledged (without waiting for the
writes in flight: the loop must not stop).  Before a rebalance takes partitions away, the
producer is flushed and their offsets committed, and their held records are dropped (the
next owner reads them from the commit).

Cancels: a second consumer (no group) reads the whole compacted ``databus-delay-cancel``
topic; a cancelled id is skipped at every step.  Cancels older than ``cancel.retention.ms``
are forgotten (the topic's own retention).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import trio

from databus.client import Admin, Consumer, KafkaError, Producer

from .background import BackgroundService
from .delay_core import CANCEL_TOPIC, LEVEL_TOPICS, Action, Scheduler, TopicPartition

log = logging.getLogger("databus.sidecar.delay")

COMMIT_INTERVAL_S = 0.5
POLL_CAP_S = 0.2  # longest sleep between looks at the schedule while records may arrive
CANCEL_RETENTION_MS = 7 * 24 * 3600 * 1000


def now_ms() -> int:
    return int(time.time() * 1000)


class DelayService(BackgroundService):
    name = "delay service"
    topics = LEVEL_TOPICS
    linger_ms = 5

    def __init__(self, cluster: str, bootstrap: str, *, group_id: str,
                 consumer: dict | None = None, producer: dict | None = None,
                 max_held: int = 1000) -> None:
        super().__init__(cluster, bootstrap, group_id=group_id, consumer=consumer,
                         producer=producer)
        self.scheduler = Scheduler(max_held)
        self.cancelled: dict[str, int] = {}  # id -> when it was cancelled (ms)
        self.delivered = 0
        self.forwarded = 0
        self.dropped = 0
        # per partition: [offset, future] of records handed on and not yet acknowledged
        self._inflight: dict[TopicPartition, list] = {}

    async def _make_topics(self, admin: Admin) -> None:
        await super()._make_topics(admin)
        await admin.create_topics(
            [CANCEL_TOPIC],
            configs={"cleanup.policy": "compact,delete", "retention.ms": str(CANCEL_RETENTION_MS)})

    # -- the main loop ----------------------------------------------------------------------

    async def _loop(self, consumer: Consumer, producer: Producer) -> None:
        last_commit = trio.current_time()
        while not self._stop.is_set():
            deadline = self.scheduler.next_deadline()
            wait = POLL_CAP_S if deadline is None else min(
                max((deadline - now_ms()) / 1000, 0), POLL_CAP_S)
            batches = await consumer.getmany(timeout=wait)
            for tp, records in batches.items():
                self.scheduler.add(tp, records)
                if self.scheduler.full(tp):
                    consumer.pause(tp)
            now = now_ms()
            await self._act(self.scheduler.take_ready(now, self.cancelled), producer, now)
            paused = [tp for tp in consumer.paused() if not self.scheduler.full(tp)]
            if paused:
                consumer.resume(*paused)
            if trio.current_time() - last_commit >= COMMIT_INTERVAL_S:
                await self._commit(consumer, producer, flush=False)
                last_commit = trio.current_time()

    async def _act(self, actions: list[Action], producer: Producer, decided_ms: int) -> None:
        for action in actions:
            delayed = action.delayed
            if delayed is None:
                if action.error:
                    log.error("%s-%d offset %d: not a delayed message (%s); skipped",
                              *action.tp, action.offset, action.error)
                self.dropped += 1
                continue
            try:
                if action.level is None:
                    future = await producer.send(delayed.target, delayed.value, delayed.key,
                                                 delayed.delivered_headers(),
                                                 delayed.partition)
                    self.delivered += 1
                else:
                    # stamped with the time the level was chosen for, not the (later) time
                    # of this send: its readiness counts from its timestamp, and in a burst
                    # the last send of a step comes well after the decision
                    future = await producer.send(LEVEL_TOPICS[action.level], delayed.value,
                                                 delayed.key, delayed.stored_headers(),
                                                 timestamp_ms=decided_ms)
                    self.forwarded += 1
            except KafkaError as exc:
                # a target that is gone or a partition it never had: nothing will change
                log.error("delayed message %s for %s not delivered: %s", delayed.delay_id,
                          delayed.target, exc)
                self.dropped += 1
                continue
            self._inflight.setdefault(action.tp, []).append((action.offset, future))

    async def _commit(self, consumer: Consumer, producer: Producer,
                      only: Iterable[TopicPartition] | None = None, *,
                      flush: bool = True) -> None:
        # flush=False (the loop's periodic commit) commits what is acknowledged so far
        # without waiting: a flush there stopped the loop for up to 1.7 s in a burst
        if flush and any(self._inflight.values()):
            await producer.flush()
        unfinished: dict[TopicPartition, int] = {}
        for tp, entries in self._inflight.items():
            pending = [offset for offset, future in entries if not future.done()]
            failed = [offset for offset, future in entries
                      if future.done() and future.exception() is not None]
            if failed:
                log.error("%s-%d: %d delayed messages failed to be written; they are read "
                          "again after a restart", *tp, len(failed))
            if pending or failed:
                unfinished[tp] = min(pending + failed)
                self._inflight[tp] = [(o, f) for o, f in entries if not f.done()
                                      or f.exception() is not None]
            else:
                self._inflight[tp] = []
        offsets = self.scheduler.safe_offsets(unfinished)
        if only is not None:
            wanted = set(only)
            offsets = {tp: o for tp, o in offsets.items() if tp in wanted}
        if offsets:
            try:
                await consumer.commit(offsets)
            except KafkaError as exc:
                log.warning("delay service: commit failed (%s); will retry", exc)

    # -- rebalances and cancels -------------------------------------------------------------

    async def _assigned(self, partitions: list[TopicPartition]) -> None:
        self.scheduler.assign(partitions)

    async def _revoked(self, partitions: list[TopicPartition]) -> None:
        if not self._closing and self._consumer is not None and self._producer is not None:
            await self._commit(self._consumer, self._producer, partitions)
        self.scheduler.revoke(partitions)
        for tp in partitions:
            self._inflight.pop(tp, None)

    async def _follow(self) -> None:  # the cancel topic
        async with Consumer(self.bootstrap, {"auto.offset.reset": "earliest",
                                             "enable.auto.commit": False}) as consumer:
            partitions = await consumer.partitions_for(CANCEL_TOPIC)
            consumer.assign([(CANCEL_TOPIC, p) for p in partitions])
            while True:
                records = await consumer.poll(timeout=1.0)
                horizon = now_ms() - CANCEL_RETENTION_MS
                for record in records:
                    if record.key and record.timestamp >= horizon:
                        self.cancelled[record.key.decode(errors="replace")] = record.timestamp
                if len(self.cancelled) > 1000 and records:
                    self.cancelled = {k: t for k, t in self.cancelled.items() if t >= horizon}
