"""The idempotent producer's state: producer id, epoch and the next sequence per partition.

This module owns that state machine.  The sender asks for a producer id (InitProducerId)
before its first send; each batch takes its partition's next sequence when first drained
and keeps it across retries, so a retried batch that the broker already wrote is recognised
(DUPLICATE_SEQUENCE_NUMBER or the original's offset) instead of written twice.  When the
broker forgets us (UNKNOWN_PRODUCER_ID) or sequences diverge (OUT_OF_ORDER_SEQUENCE_NUMBER)
the state is reset: a new producer id and sequences from 0 (KIP-360 would bump the epoch;
without transactions a fresh id is equivalent).
"""

from __future__ import annotations

from dataclasses import dataclass, field

NO_PRODUCER_ID = -1
_SEQUENCE_WRAP = 2**31


@dataclass
class IdempotenceState:
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    next_sequence: dict[tuple[str, int], int] = field(default_factory=dict)
    generation: int = 0  # bumps when the producer id changes

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = epoch
        self.next_sequence.clear()
        self.generation += 1

    def reset(self) -> None:
        """Forget the producer id: the sender must call InitProducerId again."""
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self.next_sequence.clear()

    def take_sequence(self, tp: tuple[str, int], count: int) -> int:
        """The base sequence for a new batch of ``count`` records on ``tp``."""
        base = self.next_sequence.get(tp, 0)
        self.next_sequence[tp] = (base + count) % _SEQUENCE_WRAP
        return base
