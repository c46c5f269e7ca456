"""The delay service: moves delayed messages down the delay topics and delivers them on time.

The trio shell around delay/core.py (where the storage scheme is described).  One service per
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

import trio

from databus.client import Admin, Consumer, KafkaError, Producer

from ..background import BackgroundService
from .core import CANCEL_TOPIC, LEVEL_TOPICS, Action, Scheduler

log = logging.getLogger("databus.sidecar.delay.service")

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
        self.scheduler = Scheduler(max_held)
        super().__init__(cluster, bootstrap, self.scheduler, group_id=group_id,
                         consumer=consumer, producer=producer)
        self.cancelled: dict[str, int] = {}  # id -> when it was cancelled (ms)
        self.delivered = 0
        self.forwarded = 0
        self.dropped = 0

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
            self._handed_on(action.tp, action.offset, future)

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
