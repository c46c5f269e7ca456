"""The transaction coordinator's state machine (KIP-98): this module owns it.  No I/O.

Per transactional id, a ``TxnMetadata`` (immutable; every change makes a new one): the
producer id and epoch it is bound to, its timeout, its state and the partitions of its open
transaction.  States and their numbers are Kafka's TransactionState:

    EMPTY --AddPartitions/AddOffsets--> ONGOING --EndTxn(commit)--> PREPARE_COMMIT
      ^                                    |                            | markers written
      |                                    +--EndTxn(abort), timeout--> PREPARE_ABORT
      +------ AddPartitions (a new transaction) --- COMPLETE_COMMIT / COMPLETE_ABORT <-+

The requests of a transactional producer come in as calls; each answers with a ``Plan``:
an error, or the metadata to make durable, and for an ending transaction the "prepare"
metadata whose partitions get a COMMIT or ABORT marker before the "complete" metadata is
written (Kafka's two-phase commit, done in-process since this broker is every partition's
leader).  The service (service.py) executes plans: while one runs, its transactional id is
``pending`` and other requests for it get CONCURRENT_TRANSACTIONS (clients retry).

Fencing: InitProducerId bumps the epoch (a new id once the epoch would overflow); requests
with an older epoch get PRODUCER_FENCED, with another producer id INVALID_PRODUCER_ID_MAPPING.
An InitProducerId that finds a transaction open aborts it first, with the bumped epoch on
its markers, so the zombie's next batch to those partitions is INVALID_PRODUCER_EPOCH.  A
transaction open longer than its timeout is aborted the same way (``timed_out``, then
``abort_timed_out``).

Transactions v2 (KIP-890, ``transaction.version`` 2; ``end_txn(..., v2=True)``, asked by
EndTxn v5+): every EndTxn bumps the epoch, the markers carry the bumped epoch (so a zombie's
late batch of the finished transaction is INVALID_PRODUCER_EPOCH on every partition it
wrote, the hanging-transaction fix) and the answer hands the producer the new epoch (a new
producer id once the epoch would overflow).  A retried EndTxn whose answer was lost names
the previous epoch (or, after an overflow, the previous producer id) and finds its own result
done: it gets the current id and epoch, nothing is written.  Partitions join the transaction
implicitly (Produce v12, TxnOffsetCommit v5: the same ``add_partitions``).  Version 1 (EndTxn
v0-4) is unchanged: librdkafka speaks it.  The previous producer id is kept in memory only
(``__transaction_state`` keeps Kafka's value v0): a retry across an epoch overflow and a
broker restart at once gets INVALID_PRODUCER_ID_MAPPING.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records.transaction_metadata import (  # noqa: F401 (re-exported)
    Partition,
    TxnMetadata,
    TxnState,
)

MAX_EPOCH = 32767  # Short.MaxValue: an epoch never reaches it (Kafka bumps to a new id)


@dataclass(frozen=True)
class Plan:
    """What a request needs done: an error (nothing to do), or ``prepare`` (persist it, then
    write its markers: COMMIT for PREPARE_COMMIT, ABORT for PREPARE_ABORT) and/or
    ``complete`` (persist it; the new state).  ``result`` is the metadata the answer reports
    (InitProducerId's producer id and epoch)."""

    error: ErrorCode = ErrorCode.none
    prepare: TxnMetadata | None = None
    complete: TxnMetadata | None = None
    answer: TxnMetadata | None = None  # nothing to write, this to report (a retried EndTxn)

    @property
    def result(self) -> TxnMetadata | None:
        return self.complete or self.prepare or self.answer


_OK = Plan()


def _finished(prepare: TxnMetadata, now_ms: int) -> TxnMetadata:
    state = (TxnState.COMPLETE_COMMIT if prepare.state is TxnState.PREPARE_COMMIT
             else TxnState.COMPLETE_ABORT)
    return replace(prepare, state=state, partitions=frozenset(), start_ms=-1, update_ms=now_ms)


class TransactionCoordinator:
    """transactional id -> TxnMetadata, and the rules of every transactional request."""

    def __init__(self, max_timeout_ms: int) -> None:
        self.max_timeout_ms = max_timeout_ms
        self.transactions: dict[str, TxnMetadata] = {}
        self.pending: set[str] = set()

    # -- loading and applying ---------------------------------------------------------------

    def load(self, metas: Iterable[TxnMetadata]) -> list[Plan]:
        """Take the replayed state; the plans that finish transactions caught between
        prepare and complete by a crash (their markers are written again)."""
        plans = []
        for meta in metas:
            self.transactions[meta.transactional_id] = meta
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                plans.append(Plan(prepare=meta, complete=_finished(meta, meta.update_ms)))
        return plans

    def unfinished(self) -> list[Plan]:
        """Plans that finish transactions left in PREPARE_* by a failed state or marker
        write (retried by the service's timer, as Kafka's marker channel retries)."""
        return [Plan(prepare=m, complete=_finished(m, m.update_ms))
                for t, m in self.transactions.items()
                if m.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
                and t not in self.pending]

    def applied(self, meta: TxnMetadata) -> None:
        """``meta`` is durable: it is the transactional id's state now."""
        self.transactions[meta.transactional_id] = meta

    def get(self, transactional_id: str) -> TxnMetadata | None:
        return self.transactions.get(transactional_id)

    # -- requests ---------------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int,
                         producer_epoch: int, now_ms: int,
                         new_producer_id: Callable[[], int]) -> Plan:
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return Plan(ErrorCode.invalid_transaction_timeout)
        if transactional_id in self.pending:
            return Plan(ErrorCode.concurrent_transactions)
        meta = self.transactions.get(transactional_id)
        if meta is None:
            fresh = TxnMetadata(transactional_id, new_producer_id(), 0, timeout_ms,
                                TxnState.EMPTY, update_ms=now_ms)
            return Plan(complete=fresh)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return Plan(ErrorCode.concurrent_transactions)
        if producer_id >= 0 and (producer_id, producer_epoch) != (meta.producer_id,
                                                                 meta.producer_epoch):
            # KIP-360: a producer re-initialising must still own the id it names
            return Plan(ErrorCode.producer_fenced if producer_id == meta.producer_id
                        else ErrorCode.invalid_producer_id_mapping)
        bumped = self._bump(meta, new_producer_id)
        if meta.state is TxnState.ONGOING:
            # Abort the open transaction under the bumped epoch (its markers fence the old
            # producer on every partition it wrote), then hand the new producer that epoch.
            prepare = replace(meta, producer_id=bumped.producer_id,
                              producer_epoch=bumped.producer_epoch,
                              state=TxnState.PREPARE_ABORT, update_ms=now_ms)
            if bumped.producer_id != meta.producer_id:
                # a new id: the markers must carry the old id, fenced by max epoch instead
                prepare = replace(prepare, producer_id=meta.producer_id,
                                  producer_epoch=MAX_EPOCH - 1)
            complete = replace(bumped, timeout_ms=timeout_ms, state=TxnState.EMPTY,
                               partitions=frozenset(), start_ms=-1, update_ms=now_ms)
            return Plan(prepare=prepare, complete=complete)
        return Plan(complete=replace(bumped, timeout_ms=timeout_ms, state=TxnState.EMPTY,
                                     partitions=frozenset(), start_ms=-1, update_ms=now_ms))

    @staticmethod
    def _bump(meta: TxnMetadata, new_producer_id: Callable[[], int]) -> TxnMetadata:
        if meta.producer_epoch >= MAX_EPOCH - 1:
            return replace(meta, producer_id=new_producer_id(), producer_epoch=0)
        return replace(meta, producer_epoch=meta.producer_epoch + 1)

    def _check(self, transactional_id: str, producer_id: int,
               producer_epoch: int) -> tuple[ErrorCode, TxnMetadata | None]:
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if producer_epoch != meta.producer_epoch:
            return ErrorCode.producer_fenced, None
        if transactional_id in self.pending or meta.state in (TxnState.PREPARE_COMMIT,
                                                              TxnState.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions, None
        return ErrorCode.none, meta

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[Partition], now_ms: int) -> Plan:
        """AddPartitionsToTxn (and AddOffsetsToTxn with the group's offsets partition)."""
        error, meta = self._check(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return Plan(error)
        wanted = frozenset(partitions)
        if meta.state is TxnState.ONGOING:
            if wanted <= meta.partitions:
                return _OK
            return Plan(complete=replace(meta, partitions=meta.partitions | wanted,
                                         update_ms=now_ms))
        return Plan(complete=replace(meta, state=TxnState.ONGOING, partitions=wanted,
                                     start_ms=now_ms, update_ms=now_ms))

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool, now_ms: int, *, v2: bool = False,
                new_producer_id: Callable[[], int] | None = None) -> Plan:
        if v2:
            assert new_producer_id is not None
            return self._end_txn_v2(transactional_id, producer_id, producer_epoch, commit,
                                    now_ms, new_producer_id)
        error, meta = self._check(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return Plan(error)
        if meta.state is TxnState.ONGOING:
            prepare = replace(meta, state=TxnState.PREPARE_COMMIT if commit
                              else TxnState.PREPARE_ABORT, update_ms=now_ms)
            return Plan(prepare=prepare, complete=_finished(prepare, now_ms))
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if meta.state is done:
            return _OK  # a retried EndTxn whose first answer was lost
        return Plan(ErrorCode.invalid_txn_state)

    def _end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    commit: bool, now_ms: int, new_producer_id: Callable[[], int]) -> Plan:
        meta = self.transactions.get(transactional_id)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if meta is not None and meta.state is done and transactional_id not in self.pending:
            retried = ((producer_id == meta.producer_id
                        and producer_epoch == meta.producer_epoch - 1)
                       or (producer_id == meta.prev_producer_id and meta.producer_epoch == 0))
            if retried:
                return Plan(answer=meta)  # its bump is done: hand out the result again
        error, meta = self._check(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return Plan(error)
        if meta.state is not TxnState.ONGOING and commit:
            return Plan(ErrorCode.invalid_txn_state)  # nothing was added: nothing to commit
        # ONGOING, or an abort of an empty transaction: bump the epoch either way
        prepare = replace(meta, producer_epoch=meta.producer_epoch + 1,
                          state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                          update_ms=now_ms)
        complete = _finished(prepare, now_ms)
        if prepare.producer_epoch >= MAX_EPOCH - 1:
            # the markers fence with the last epoch of this id; the producer gets a new id
            complete = replace(complete, producer_id=new_producer_id(), producer_epoch=0,
                               prev_producer_id=meta.producer_id)
        else:
            complete = replace(complete, prev_producer_id=-1)
        return Plan(prepare=prepare, complete=complete)

    def check_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                            offsets_partition: Partition) -> ErrorCode:
        """TxnOffsetCommit: the producer owns the transaction and added the group to it."""
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if producer_epoch != meta.producer_epoch:
            return ErrorCode.producer_fenced
        if meta.state is not TxnState.ONGOING or offsets_partition not in meta.partitions:
            return ErrorCode.invalid_txn_state
        return ErrorCode.none

    # -- timeouts ---------------------------------------------------------------------------

    def timed_out(self, now_ms: int) -> list[str]:
        """Transactional ids whose open transaction outlived its timeout.

        A transaction that began "after" ``now_ms`` began before the wall clock went back
        (a clock stepped back, a broker restarted on another clock): its start is moved to
        now, so it times out ``timeout_ms`` after the jump was seen, not hours later while
        it holds back every read_committed reader of its partitions.  (Kafka measures from
        the recorded start and would wait out the jump.)"""
        for t, m in list(self.transactions.items()):
            if m.state is TxnState.ONGOING and m.start_ms > now_ms:
                self.transactions[t] = replace(m, start_ms=now_ms)
        return [t for t, m in self.transactions.items()
                if m.state is TxnState.ONGOING and t not in self.pending
                and m.start_ms + m.timeout_ms <= now_ms]

    def abort_timed_out(self, transactional_id: str, now_ms: int) -> Plan:
        """Abort with the epoch bumped (Kafka fences a producer whose transaction timed out:
        its next request is PRODUCER_FENCED / INVALID_PRODUCER_EPOCH)."""
        meta = self.transactions.get(transactional_id)
        if (meta is None or meta.state is not TxnState.ONGOING
                or transactional_id in self.pending):
            return _OK
        if meta.producer_epoch >= MAX_EPOCH - 1:
            bumped = replace(meta, producer_epoch=MAX_EPOCH - 1)
        else:
            bumped = replace(meta, producer_epoch=meta.producer_epoch + 1)
        prepare = replace(bumped, state=TxnState.PREPARE_ABORT, update_ms=now_ms)
        return Plan(prepare=prepare, complete=_finished(prepare, now_ms))
