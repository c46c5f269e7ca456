"""The half-message service: settles apps' transactions and runs their check-backs.

The trio shell around half/core.py (where the scheme is described).  In every sidecar with
``transactions.enabled``, per cluster:

- a member of the consumer group ``transactions.group.id`` over ``databus-txn-half``: it
  collects each open transaction's messages, writes them to their topics when the commit
  record comes (idempotent producer, acks=all) or drops them on rollback, sends check
  requests for transactions silent past ``check.ms`` and rolls back after ``max.checks``;
  offsets are committed below the oldest open transaction and the oldest committed one
  whose writes are not all acknowledged (the loop's periodic commit does not wait for the
  writes in flight: background.py), so a dead member's transactions are settled by the
  next one;
- a reader (no group) of ``databus-txn-check`` from its end: a request for a producer group
  one of this sidecar's apps registered for (``Checkers``) goes to that app as a ``check``
  frame; the app answers with an end record.
"""

from __future__ import annotations

import itertools
import logging
import time

import trio

from databus.client import Admin, Consumer, KafkaError, Producer

from ..background import BackgroundService
from .core import CHECK_TOPIC, HALF_TOPIC, ROLLBACK, HalfTracker, end_headers

log = logging.getLogger("databus.sidecar.half.service")

COMMIT_INTERVAL_S = 0.5


def now_ms() -> int:
    return int(time.time() * 1000)


class Checkers:
    """Which app connections answer check-backs of which producer groups."""

    def __init__(self) -> None:
        self._by_group: dict[str, list] = {}
        self._turn = itertools.count()

    def register(self, connection, groups) -> None:
        for group in groups:
            members = self._by_group.setdefault(group, [])
            if connection not in members:
                members.append(connection)

    def forget(self, connection) -> None:
        for members in self._by_group.values():
            if connection in members:
                members.remove(connection)

    def ask(self, group: str, txn: str) -> bool:
        """Send a check to one registered app (taking turns); False when none is here."""
        members = self._by_group.get(group)
        if not members:
            return False
        members[next(self._turn) % len(members)].session.send_check(group, txn)
        return True


class HalfService(BackgroundService):
    name = "half-message service"
    topics = (HALF_TOPIC,)
    linger_ms = 2

    def __init__(self, cluster: str, bootstrap: str, checkers: Checkers, *, group_id: str,
                 check_ms: int, max_checks: int, consumer: dict | None = None,
                 producer: dict | None = None) -> None:
        self.tracker = HalfTracker()
        super().__init__(cluster, bootstrap, self.tracker, group_id=group_id,
                         consumer=consumer, producer=producer)
        self.checkers = checkers
        self.check_ms = check_ms
        self.max_checks = max_checks
        self.committed = self.rolled_back = self.checks_sent = 0

    async def _make_topics(self, admin: Admin) -> None:
        await admin.create_topics([HALF_TOPIC, CHECK_TOPIC])

    async def _loop(self, consumer: Consumer, producer: Producer) -> None:
        last_commit = last_check = trio.current_time()
        check_every = max(self.check_ms / 4000, 0.05)
        while not self._stop.is_set():
            batches = await consumer.getmany(timeout=min(check_every, 0.2))
            for tp, records in batches.items():
                resolutions, problems = self.tracker.add(tp, records)
                for problem in problems:
                    log.warning("%s-%d %s", *tp, problem)
                for resolution in resolutions:
                    await self._settle(tp, resolution, producer)
            if trio.current_time() - last_check >= check_every:
                await self._check(producer)
                last_check = trio.current_time()
            if trio.current_time() - last_commit >= COMMIT_INTERVAL_S:
                await self._commit(consumer, producer, flush=False)
                last_commit = trio.current_time()

    async def _settle(self, tp, resolution, producer: Producer) -> None:
        if not resolution.commit:
            self.rolled_back += 1
            log.debug("transaction %s rolled back", resolution.txn_id)
            return
        for message in resolution.messages:
            try:
                future = await producer.send(message.target, message.value, message.key,
                                             message.headers, message.partition)
            except KafkaError as exc:
                log.error("transaction %s: a message for %s not delivered: %s",
                          resolution.txn_id, message.target, exc)
                continue
            # until it is acknowledged, a replay must read the transaction from its start
            self._handed_on(tp, resolution.first_offset, future)
        self.committed += 1

    async def _check(self, producer: Producer) -> None:
        checks, rollbacks = self.tracker.due_checks(now_ms(), self.check_ms, self.max_checks)
        for txn_id, txn in checks:
            await producer.send(CHECK_TOPIC, txn_id.encode(), txn.group.encode())
            self.checks_sent += 1
        for txn_id, txn in rollbacks:
            log.warning("transaction %s of producer group %r rolled back: no answer to %d "
                        "checks", txn_id, txn.group, self.max_checks)
            # The rollback is an end record like an app's: the same partition, after the
            # transaction's messages, so every member settles it the same way.
            await producer.send(HALF_TOPIC, ROLLBACK, None, end_headers(txn_id, txn.group),
                                txn.tp[1])

    async def _follow(self) -> None:  # the check topic
        """Check requests for this sidecar's apps (from the end: older ones are answered
        or will be asked again)."""
        async with Consumer(self.bootstrap, {"enable.auto.commit": False}) as consumer:
            partitions = await consumer.partitions_for(CHECK_TOPIC)
            tps = [(CHECK_TOPIC, p) for p in partitions]
            consumer.assign(tps)
            consumer.seek_to_end(*tps)
            while True:
                for record in await consumer.poll(timeout=1.0):
                    if record.key and record.value:
                        group = record.key.decode(errors="replace")
                        self.checkers.ask(group, record.value.decode(errors="replace"))
