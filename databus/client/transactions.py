"""The transactional producer's client side (KIP-98, KIP-447): this module owns its state.

``Producer(bootstrap, {"transactional.id": ...})`` then ``init_transactions()`` (the
transaction coordinator's producer id and epoch: FindCoordinator key type 1, then
InitProducerId), ``begin_transaction()``, sends (each new partition is added with
AddPartitionsToTxn before its first record is queued), ``send_offsets_to_transaction``
(AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator) and
``commit_transaction()`` / ``abort_transaction()`` (flush, then EndTxn).  Retriable
coordinator answers (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR)
are retried after ``retry.backoff.ms``; PRODUCER_FENCED and the like make the producer
unusable (``FATAL``), as in Kafka's clients.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import trio

from ..protocol.api_keys import ApiKey
from ..protocol.types import TopicPartition
from . import errors

log = logging.getLogger(__name__)

KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1
_RETRY_CODES = {"CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS",
                "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE"}
_FATAL_CODES = {"PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "INVALID_PRODUCER_ID_MAPPING",
                "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "INVALID_TRANSACTION_TIMEOUT"}


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    PREPARED = "prepared"  # flushed, left open for another process to commit (two-phase)
    FATAL = "fatal"


@dataclass(frozen=True)
class PreparedTransaction:
    """A transaction flushed and left open (``Producer.prepare_transaction``), named by what
    its EndTxn needs: whoever holds this may commit or abort it (``complete_transactions``),
    as KIP-939's PreparedTxnState lets an external coordinator do.  Until then its records
    are invisible to read_committed readers; the coordinator aborts it after
    ``transaction.timeout.ms``, and a new producer with the same transactional id fences and
    aborts it at ``init_transactions``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


class TransactionError(errors.KafkaError):
    """A transactional call made in the wrong state, or the producer was fenced."""


class TransactionManager:
    def __init__(self, cluster, sender, config, transactional_id: str | None = None) -> None:
        self.cluster = cluster
        self.sender = sender
        self.config = config
        self.transactional_id: str = transactional_id or config.transactional_id
        self.state = TxnState.UNINITIALIZED
        self.partitions: set[TopicPartition] = set()
        self.offsets_added = False
        self.fatal_error: BaseException | None = None

    # -- requests -----------------------------------------------------------------------

    async def _coordinator(self, key: str, key_type: int) -> int:
        response = await self._call(None, ApiKey.FIND_COORDINATOR,
                                    {"key": key, "key_type": key_type}, "FindCoordinator")
        node = int(response.node_id)
        if node not in self.cluster.brokers:
            self.cluster.register_address(node, response.host, int(response.port))
        return node

    async def _call(self, node, api_key, fields, what: str, code_of=None):
        """One request, retried while the answer is retriable; fatal answers fence us."""
        backoff = self.config.retry_backoff_ms / 1000
        deadline = trio.current_time() + self.config.max_block_ms / 1000
        while True:
            response = await self.cluster.request(node, api_key, fields)
            code = code_of(response) if code_of else response.error_code
            try:
                errors.raise_for_code(code, f"{what} of transactional id {self.transactional_id!r}")
                return response
            except errors.KafkaError as exc:
                kafka_name = exc.name
                if kafka_name in _FATAL_CODES:
                    self.state = TxnState.FATAL
                    self.fatal_error = exc
                    raise
                if kafka_name not in _RETRY_CODES and not exc.retriable:
                    raise
                if trio.current_time() >= deadline:
                    raise
                await trio.sleep(backoff)

    def _check(self, *allowed: TxnState) -> None:
        if self.state is TxnState.FATAL:
            raise TransactionError(f"the producer is fenced or failed: {self.fatal_error}")
        if self.state not in allowed:
            raise TransactionError(
                f"not allowed while the transactional producer is {self.state.value}")

    # -- the API ------------------------------------------------------------------------

    async def init(self) -> None:
        self._check(TxnState.UNINITIALIZED, TxnState.READY)
        node = await self._coordinator(self.transactional_id, KEY_TYPE_TRANSACTION)
        response = await self._call(node, ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": self.transactional_id,
            "transaction_timeout": self.config.transaction_timeout_ms,
            "producer_id": -1, "producer_epoch": -1}, "InitProducerId")
        self.sender.idempotence.set_producer_id(int(response.producer_id),
                                                int(response.producer_epoch))
        self.sender.acc.reset_sequences()
        self.state = TxnState.READY

    def begin(self) -> None:
        self._check(TxnState.READY)
        self.partitions = set()
        self.offsets_added = False
        self.state = TxnState.IN_TRANSACTION

    async def add_partition(self, tp: TopicPartition) -> None:
        """Before the first record of ``tp`` in this transaction is queued."""
        self._check(TxnState.IN_TRANSACTION)
        if tp not in self.partitions:
            await self.add_partitions([tp])

    async def add_partitions(self, tps) -> None:
        """Add the partitions not yet in the transaction, in one AddPartitionsToTxn (each
        costs the coordinator a durable state write: one for many is cheaper)."""
        self._check(TxnState.IN_TRANSACTION)
        new = sorted(set(tps) - self.partitions)
        if not new:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, partition in new:
            by_topic.setdefault(topic, []).append(partition)
        state = self.sender.idempotence
        node = await self._coordinator(self.transactional_id, KEY_TYPE_TRANSACTION)
        await self._call(node, ApiKey.ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": self.transactional_id,
            "v3_and_below_producer_id": state.producer_id,
            "v3_and_below_producer_epoch": state.producer_epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }, "AddPartitionsToTxn", code_of=lambda r: next(
            (int(p.partition_error_code) for t in r.results_by_topic_v3_and_below
             for p in t.results_by_partition if p.partition_error_code), 0))
        self.partitions.update(new)

    async def send_offsets(self, offsets: Mapping[TopicPartition, int], group_id: str) -> None:
        self._check(TxnState.IN_TRANSACTION)
        state = self.sender.idempotence
        node = await self._coordinator(self.transactional_id, KEY_TYPE_TRANSACTION)
        ids = {"transactional_id": self.transactional_id, "producer_id": state.producer_id,
               "producer_epoch": state.producer_epoch}
        await self._call(node, ApiKey.ADD_OFFSETS_TO_TXN, {**ids, "group_id": group_id},
                         "AddOffsetsToTxn")
        self.offsets_added = True
        group_node = await self._coordinator(group_id, KEY_TYPE_GROUP)
        by_topic: dict[str, list] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": offset,
                "committed_leader_epoch": -1, "committed_metadata": ""})
        await self._call(group_node, ApiKey.TXN_OFFSET_COMMIT, {
            **ids, "group_id": group_id, "generation_id": -1, "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
        }, "TxnOffsetCommit", code_of=lambda r: next(
            (int(p.error_code) for t in r.topics for p in t.partitions if p.error_code), 0))

    async def end(self, commit: bool) -> None:
        self._check(TxnState.IN_TRANSACTION)
        state = self.sender.idempotence
        if self.partitions or self.offsets_added:  # else the coordinator knows of nothing
            await self._end_txn(state.producer_id, state.producer_epoch, commit)
        self.partitions = set()
        self.state = TxnState.READY

    async def _end_txn(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        node = await self._coordinator(self.transactional_id, KEY_TYPE_TRANSACTION)
        await self._call(node, ApiKey.END_TXN, {
            "transactional_id": self.transactional_id,
            "producer_id": producer_id, "producer_epoch": producer_epoch,
            "committed": commit}, "EndTxn")

    def prepare(self) -> PreparedTransaction | None:
        """After the flush: hand the open transaction over (None if it holds nothing)."""
        self._check(TxnState.IN_TRANSACTION)
        state = self.sender.idempotence
        holds = bool(self.partitions or self.offsets_added)
        self.partitions = set()
        self.state = TxnState.PREPARED
        if not holds:
            return None
        return PreparedTransaction(self.transactional_id, state.producer_id,
                                   state.producer_epoch)


async def complete_transactions(cluster, config, prepared: Iterable[PreparedTransaction],
                                commit: bool) -> None:
    """Commit (or abort) transactions other producers prepared, one EndTxn each, in order.

    Idempotent: ending a transaction already ended the same way succeeds (the coordinator
    treats it as a retried EndTxn).  A transaction the coordinator aborted meanwhile (its
    timeout, or a newer producer with its transactional id) cannot be committed any more:
    ``ProducerFencedError`` / ``InvalidProducerIdMappingError``, naming the transactional id.
    ``config`` gives retry.backoff.ms and max.block.ms.
    """
    for txn in prepared:
        manager = TransactionManager(cluster, None, config, txn.transactional_id)
        await manager._end_txn(txn.producer_id, txn.producer_epoch, commit)
