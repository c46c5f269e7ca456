"""Committed offsets in memory: the materialized view of ``__consumer_offsets``.

The log is the truth (see protocol/internal_records/consumer_offsets.py for its records); this map is rebuilt from it at
broker start and updated after each commit is durably appended.  It also decides which
offsets have outlived ``offsets.retention.minutes`` using Kafka's rules (KIP-211):

- an Empty consumer group: every offset expires ``retention`` after the group became empty;
- a group that only commits (no protocol type): each offset ``retention`` after its commit;
- a Stable consumer group: offsets of topics no member subscribes to any more, ``retention``
  after their commit;
- an offset committed with an explicit expire timestamp (OffsetCommitValue v1): at that time.

Sans-I/O: no trio, the clock is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from databus.protocol.internal_records.consumer_offsets import OffsetValue

from ...protocol.types import TopicPartition
from .group_state import GroupSnapshot, GroupState


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1

    @classmethod
    def from_value(cls, value: OffsetValue) -> CommittedOffset:
        return cls(
            value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms,
            value.expire_timestamp_ms,
        )

    def to_value(self) -> OffsetValue:
        return OffsetValue(self.offset, self.leader_epoch, self.metadata, self.commit_timestamp_ms,
                           self.expire_timestamp_ms)


class OffsetStore:
    def __init__(self) -> None:
        self._groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    def put(self, group_id: str, tp: TopicPartition, committed: CommittedOffset | None) -> None:
        """Apply one record: a commit, or (None) a tombstone."""
        if committed is None:
            offsets = self._groups.get(group_id)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self._groups[group_id]
            return
        self._groups.setdefault(group_id, {})[tp] = committed

    def get(self, group_id: str, tp: TopicPartition) -> CommittedOffset | None:
        return self._groups.get(group_id, {}).get(tp)

    def offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._groups.get(group_id, {}))

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._groups.get(group_id))

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def drop_group(self, group_id: str) -> list[TopicPartition]:
        """Forget every offset of the group; returns the partitions (to write tombstones)."""
        return list(self._groups.pop(group_id, {}))

    def expired(
        self,
        group_id: str,
        snapshot: GroupSnapshot | None,
        subscribed_topics: Iterable[str] | None,
        now_ms: int,
        retention_ms: int,
    ) -> list[TopicPartition]:
        """The group's offsets that have expired at ``now_ms`` (see the module docstring)."""
        offsets = self._groups.get(group_id, {})
        out = []
        is_consumer_group = snapshot is not None and snapshot.protocol_type
        subscribed = set(subscribed_topics or ())
        for tp, committed in offsets.items():
            if committed.expire_timestamp_ms >= 0:
                if committed.expire_timestamp_ms <= now_ms:
                    out.append(tp)
                continue
            if snapshot is None or not is_consumer_group:
                base = committed.commit_timestamp_ms
            elif snapshot.state is GroupState.EMPTY:
                base = snapshot.state_timestamp_ms
            elif (
                snapshot.state is GroupState.STABLE
                and snapshot.protocol_type == "consumer"
                and subscribed_topics is not None
                and tp[0] not in subscribed
            ):
                base = committed.commit_timestamp_ms
            else:
                continue
            if base + retention_ms <= now_ms:
                out.append(tp)
        return out
