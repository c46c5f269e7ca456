"""What ``__share_group_state`` persists of a share-partition's in-flight records: Kafka's
RecordState ids and the state batches of ShareSnapshotValue (share_group_state.py encodes
them).  The share-partition state machine (broker/share/partition_state.py) keeps its runs
and snapshots them as these batches; they are declared here, below it, because the
persisted numbers are Kafka's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class RecordState(IntEnum):
    """Kafka's RecordState ids (the numbers persisted in share state batches)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


@dataclass(frozen=True)
class StateBatch:
    """A run of in-flight offsets in one state with one delivery count: what is persisted."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int
