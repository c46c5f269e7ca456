"""What ``__transaction_state`` persists of a transactional id: Kafka's TransactionState ids
and the metadata of TransactionLogValue (transaction_state.py encodes it).  The transaction
coordinator's state machine (broker/txn/state.py) moves a transactional id between these
values; they are declared here, below it, because the log's layout is Kafka's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


Partition = tuple[str, int]


@dataclass(frozen=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[Partition] = frozenset()
    start_ms: int = -1  # when the open transaction began (-1: none)
    update_ms: int = -1

    @property
    def committing(self) -> bool:
        return self.state is TxnState.PREPARE_COMMIT
