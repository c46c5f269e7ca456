"""The consumer's subscription state: what it consumes and where it stands.

This module owns, per assigned partition: the *position* (the offset of the next record
poll() returns), a pending reset (earliest/latest/timestamp, resolved by the consumer before
fetching), the paused flag and the last known high watermark.  It also owns the choice
between the two modes, which cannot be mixed: subscribe(topics) (the group assigns
partitions) or assign(partitions) (manual, no group).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..protocol.types import TopicPartition
from . import errors


@dataclass
class PartitionState:
    position: int | None = None
    reset_to: int | None = None  # EARLIEST (-2), LATEST (-1) or a timestamp, pending
    paused: bool = False  # by the application (pause/resume)
    # out of range with auto.offset.reset=none: not fetched again (the error would repeat)
    # until the application seeks; separate from ``paused`` so a seek is enough, as in Kafka
    awaiting_seek: bool = False
    high_watermark: int = -1
    # where the records this consumer may read end at the broker (the high watermark, or the
    # last stable offset under read_committed), from the last Fetch response; -1 unknown
    readable_end: int = -1
    epoch: int = 0  # bumps on every seek so stale fetches are dropped


class SubscriptionState:
    def __init__(self) -> None:
        self.topics: tuple[str, ...] = ()
        self.pattern: re.Pattern | None = None  # subscribe(pattern=...): topics follow it
        self.manual = False
        self.partitions: dict[TopicPartition, PartitionState] = {}

    # -- modes ---------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        if self.manual and self.partitions:
            raise errors.KafkaError(
                "subscribe() after assign(): call unsubscribe() first (modes cannot be mixed)"
            )
        self.manual = False
        self.topics = tuple(sorted(set(topics)))

    def subscribe_pattern(self, pattern: re.Pattern) -> None:
        self.subscribe(())
        self.pattern = pattern

    def match_pattern(self, all_topics: Iterable[str]) -> bool:
        """Set the subscribed topics to those matching the pattern; True if they changed."""
        matched = tuple(sorted(t for t in all_topics if self.pattern.fullmatch(t)))
        changed = matched != self.topics
        self.topics = matched
        return changed

    def assign_manually(self, tps: Iterable[TopicPartition]) -> None:
        if self.topics:
            raise errors.KafkaError(
                "assign() after subscribe(): call unsubscribe() first (modes cannot be mixed)"
            )
        self.manual = True
        self.set_assignment(tps)

    def unsubscribe(self) -> None:
        self.topics = ()
        self.pattern = None
        self.manual = False
        self.partitions = {}

    @property
    def uses_group_assignment(self) -> bool:
        return (bool(self.topics) or self.pattern is not None) and not self.manual

    # -- assignment ----------------------------------------------------------------------

    def set_assignment(self, tps: Iterable[TopicPartition]) -> None:
        """Replace the assignment, keeping the state of partitions that stay."""
        new = {}
        for tp in tps:
            new[tp] = self.partitions.get(tp) or PartitionState()
        self.partitions = new

    def add(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.partitions.setdefault(tp, PartitionState())

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)

    def assigned(self) -> set[TopicPartition]:
        return set(self.partitions)

    def state(self, tp: TopicPartition) -> PartitionState:
        try:
            return self.partitions[tp]
        except KeyError:
            raise errors.KafkaError(f"partition {tp[0]}-{tp[1]} is not assigned to this consumer") from None

    # -- positions -----------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"seek offset must be >= 0, got {offset}")
        st = self.state(tp)
        st.position = offset
        st.reset_to = None
        st.awaiting_seek = False
        st.epoch += 1

    def request_reset(self, tp: TopicPartition, target: int) -> None:
        st = self.state(tp)
        st.position = None
        st.reset_to = target
        st.awaiting_seek = False
        st.epoch += 1

    def missing_positions(self) -> list[TopicPartition]:
        return [tp for tp, st in self.partitions.items() if st.position is None]

    def fetchable(self) -> list[TopicPartition]:
        return [
            tp for tp, st in self.partitions.items()
            if st.position is not None and not st.paused and not st.awaiting_seek
        ]

    def positions(self) -> dict[TopicPartition, int]:
        return {tp: st.position for tp, st in self.partitions.items() if st.position is not None}
