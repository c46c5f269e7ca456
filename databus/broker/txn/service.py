"""The transaction coordinator service: the trio side of Kafka transactions in a running broker.

It wires the sans-I/O coordinator (state.py) to the broker:
- ``__transaction_state`` (records from protocol/internal_records/transaction_state.py), replayed at start and, as in Kafka,
  created on first use (a broker nobody uses transactions with has no such topic); every change of a
  transactional id is appended through ``broker.append_durably`` before it is acted on or
  answered, so an acknowledged InitProducerId/AddPartitionsToTxn/EndTxn survives kill -9;
- plans: ``prepare`` is made durable, then a COMMIT or ABORT marker (a control batch with
  the producer's id and epoch) is appended to every partition of the transaction (Kafka's
  WriteTxnMarkers, in-process: this broker leads every partition) and fsynced, then
  ``complete`` is written.  A crash between the two leaves PREPARE_* in the log: the replay
  writes the markers again (a second marker for a closed transaction changes nothing);
- markers on ``__consumer_offsets`` partitions also settle the transactional offset
  commits held by the group service (TxnOffsetCommit);
- one timer task aborts transactions older than their timeout
  (``transaction.abort.timed.out.transaction.cleanup.interval.ms``) and finishes those a
  failed write left between prepare and complete.

Handlers (handlers/transactions.py, handlers/init_producer_id.py) translate kio messages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio

from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records.consumer_offsets import OFFSETS_TOPIC
from databus.protocol.internal_records.transaction_state import (
    TRANSACTION_STATE_TOPIC,
    TxnStateRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from databus.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, build_batch, build_control_batch

from ..coordinator.replay import log_records
from ..errors import error_code_for
from .state import Plan, TransactionCoordinator, TxnMetadata

log = logging.getLogger(__name__)

# Kafka's transaction.state.log.segment.bytes
STATE_TOPIC_SEGMENT_BYTES = 104_857_600


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class TransactionService:
    """Transactions of one broker.  ``await nursery.start(service.run)``."""

    def __init__(self, broker, *, num_partitions: int, max_timeout_ms: int,
                 abort_check_interval_ms: int,
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        self.broker = broker
        self.num_partitions = num_partitions
        self.abort_check_interval_ms = abort_check_interval_ms
        self.clock = clock
        self.coordinator = TransactionCoordinator(max_timeout_ms)
        self.loaded = False

    # -- lifecycle --------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Create/replay ``__transaction_state``, finish what a crash interrupted, then
        abort timed-out transactions until cancelled."""
        info = self.broker.topic(TRANSACTION_STATE_TOPIC)
        if info is not None:
            self._check_partitions(info)
        plans = self.coordinator.load(self.replay() if info is not None else [])
        for plan in plans:
            meta = plan.prepare
            log.info("transaction of %r was %s at the last stop: writing its markers",
                     meta.transactional_id, meta.state.name)
            await self.execute(plan)
        self.loaded = True
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._timeout_loop)
            task_status.started(self)

    def _ensure_state_topic(self) -> None:
        if self.broker.topic(TRANSACTION_STATE_TOPIC) is None:
            self.broker.create_topic(
                TRANSACTION_STATE_TOPIC, self.num_partitions,
                {"cleanup.policy": "compact", "segment.bytes": str(STATE_TOPIC_SEGMENT_BYTES)},
            )

    def _check_partitions(self, info) -> None:
        if info.partitions != self.num_partitions:
            # Kafka keeps the topic's real partition count; so do we, or ids would move.
            log.warning("%s has %d partitions, transaction.state.log.num.partitions=%d is "
                        "ignored", TRANSACTION_STATE_TOPIC, info.partitions, self.num_partitions)
        self.num_partitions = info.partitions

    def replay(self) -> list[TxnMetadata]:
        latest: dict[str, TxnMetadata | None] = {}
        for partition in range(self.num_partitions):
            plog = self.broker.get_log(TRANSACTION_STATE_TOPIC, partition)
            if plog is None:
                continue
            name = f"{TRANSACTION_STATE_TOPIC}-{partition}"
            for offset, key, value in log_records(plog, name):
                if key is None:
                    continue
                try:
                    txn_id = decode_key(key)
                    latest[txn_id] = None if value is None else decode_value(txn_id, value)
                except TxnStateRecordError as exc:
                    log.error("%s: skipping record at offset %d: %s", name, offset, exc)
        metas = [m for m in latest.values() if m is not None]
        log.info("loaded %d transactional ids from %s", len(metas), TRANSACTION_STATE_TOPIC)
        return metas

    # -- executing plans --------------------------------------------------------------------

    def new_producer_id(self) -> int:
        return self.broker.producer_ids.next_id()

    async def _persist(self, meta: TxnMetadata) -> None:
        self._ensure_state_topic()
        batch = build_batch([(encode_key(meta.transactional_id), encode_value(meta), (),
                              self.clock())])
        await self.broker.append_durably(
            TRANSACTION_STATE_TOPIC, partition_for(meta.transactional_id, self.num_partitions),
            batch)

    async def execute(self, plan: Plan) -> ErrorCode:
        """Carry out a plan (see state.Plan); the error to answer with."""
        if plan.error != ErrorCode.none or plan.result is None:
            return plan.error
        txn_id = plan.result.transactional_id
        coordinator = self.coordinator
        coordinator.pending.add(txn_id)
        try:
            if plan.prepare is not None:
                await self._persist(plan.prepare)
                coordinator.applied(plan.prepare)
                await self.write_markers(plan.prepare)
            if plan.complete is not None:
                await self._persist(plan.complete)
                coordinator.applied(plan.complete)
        except Exception as exc:
            code = error_code_for(exc)
            log.warning("transaction of %r: could not write its state: %s", txn_id, exc)
            # Kafka answers a failed state write with COORDINATOR_NOT_AVAILABLE (retriable):
            # the client retries and the next attempt redoes what is missing.
            return (ErrorCode.coordinator_not_available
                    if code in (ErrorCode.unknown_server_error, ErrorCode.kafka_storage_error)
                    else code)
        finally:
            coordinator.pending.discard(txn_id)
        return ErrorCode.none

    async def write_markers(self, meta: TxnMetadata) -> None:
        """A COMMIT (PREPARE_COMMIT) or ABORT marker on every partition of the transaction,
        fsynced; on ``__consumer_offsets`` partitions the group service then settles the
        transaction's offset commits."""
        kind = CONTROL_COMMIT if meta.committing else CONTROL_ABORT
        written = []
        for topic, partition in sorted(meta.partitions):
            ok = self.write_marker(topic, partition, meta.producer_id, meta.producer_epoch,
                                   kind)
            if ok is not None:
                written.append((topic, partition, ok))
        # every partition's fsync asked for before waiting: one group-commit round for all
        waiters = [self.broker.durable_waiter(topic, partition, last_offset)
                   for topic, partition, last_offset in written]
        for waiter in waiters:
            if waiter is not None:
                await waiter.wait()

    def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                     kind: int, coordinator_epoch: int = 0) -> int | None:
        """Append one marker; its offset, or None when the partition is gone (a deleted
        topic has nothing left to commit or abort)."""
        batch = build_control_batch(producer_id, producer_epoch, kind,
                                    coordinator_epoch=coordinator_epoch, timestamp=self.clock())
        if self.broker.get_log(topic, partition) is None:
            log.warning("transaction marker for %s-%d skipped: the partition is gone",
                        topic, partition)
            return None
        info = self.broker.append(topic, partition, batch, allow_control=True)
        if topic == OFFSETS_TOPIC:
            self.broker.groups.complete_txn(partition, producer_id, kind == CONTROL_COMMIT,
                                            info.first_offset)
        return info.last_offset

    # -- requests ---------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               producer_id: int, producer_epoch: int
                               ) -> tuple[ErrorCode, int, int]:
        plan = self.coordinator.init_producer_id(transactional_id, timeout_ms, producer_id,
                                                 producer_epoch, self.clock(),
                                                 self.new_producer_id)
        error = await self.execute(plan)
        if error != ErrorCode.none:
            return error, -1, -1
        meta = plan.result
        log.info("transactional id %r: producer id %d epoch %d", transactional_id,
                 meta.producer_id, meta.producer_epoch)
        return ErrorCode.none, meta.producer_id, meta.producer_epoch

    async def add_partitions(self, transactional_id: str, producer_id: int,
                             producer_epoch: int, partitions) -> ErrorCode:
        plan = self.coordinator.add_partitions(transactional_id, producer_id, producer_epoch,
                                               partitions, self.clock())
        return await self.execute(plan)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> ErrorCode:
        plan = self.coordinator.end_txn(transactional_id, producer_id, producer_epoch, commit,
                                        self.clock())
        return await self.execute(plan)

    # -- timeouts ---------------------------------------------------------------------------

    async def _timeout_loop(self) -> None:
        while True:
            await trio.sleep(self.abort_check_interval_ms / 1000)
            for plan in self.coordinator.unfinished():
                await self.execute(plan)
            for txn_id in self.coordinator.timed_out(self.clock()):
                plan = self.coordinator.abort_timed_out(txn_id, self.clock())
                meta = plan.prepare
                if meta is None:
                    continue
                log.info("aborting the transaction of %r (producer id %d): open longer than "
                         "its timeout of %d ms", txn_id, meta.producer_id, meta.timeout_ms)
                error = await self.execute(plan)
                if error != ErrorCode.none:
                    log.warning("abort of timed-out transaction %r failed (%s); will retry",
                                txn_id, error.name)
