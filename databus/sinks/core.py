"""The sinks runtime's pure core: what has been handed to a sink, what it reported durable,
what may be committed, lag and the age of the last durable offset.  No I/O, no trio; the
clock is passed in (seconds, any monotonic origin).

The one rule it enforces: an offset is committed only when the plugin reported it durable,
only for a partition this member owns, only forward, and never past what was handed to the
plugin (a report beyond that is a plugin bug, refused with an error naming it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from databus.protocol.types import TopicPartition

# Kafka Connect's dead-letter headers, so tools written for Connect's DLQs read ours.
HEADER_TOPIC = "__connect.errors.topic"
HEADER_PARTITION = "__connect.errors.partition"
HEADER_OFFSET = "__connect.errors.offset"
HEADER_MESSAGE = "__connect.errors.exception.message"
HEADER_SINK = "__databus.errors.sink"


class PluginReportError(ValueError):
    """The plugin reported something impossible (an offset it was never handed)."""


@dataclass
class PartitionProgress:
    committed: int | None  # next offset to read, as the group has it (None: nothing yet)
    handed: int | None = None  # offset after the last record handed to the plugin
    pending_since: float | None = None  # when records beyond ``committed`` were first handed

    @property
    def pending(self) -> bool:
        return self.handed is not None and (self.committed is None or self.handed > self.committed)


class SinkProgress:
    """One sink member's partitions and counters (the metrics read them)."""

    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, PartitionProgress] = {}
        self.records_in = 0
        self.dead_letters = 0
        self.errors = 0
        self.commits = 0
        self.end_offsets: dict[TopicPartition, int] = {}

    # -- assignment ------------------------------------------------------------------------

    def assigned(self, tp: TopicPartition, committed: int | None) -> None:
        self.partitions[tp] = PartitionProgress(committed)

    def revoked(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)
        self.end_offsets.pop(tp, None)

    def owns(self, tp: TopicPartition) -> bool:
        return tp in self.partitions

    def owned(self) -> list[TopicPartition]:
        return sorted(self.partitions)

    # -- records ---------------------------------------------------------------------------

    def handed(self, tp: TopicPartition, count: int, next_offset: int, now: float) -> None:
        """``count`` records ending before ``next_offset`` went to the plugin."""
        progress = self.partitions[tp]
        progress.handed = next_offset
        if progress.pending and progress.pending_since is None:
            progress.pending_since = now
        self.records_in += count

    def to_commit(self, reported: Mapping[TopicPartition, int] | None) -> dict[TopicPartition, int]:
        """The part of a plugin's durable report that is worth committing (see the module
        docstring); reports for partitions no longer owned are ignored."""
        out: dict[TopicPartition, int] = {}
        for tp, offset in (reported or {}).items():
            tp = TopicPartition(str(tp[0]), int(tp[1]))
            progress = self.partitions.get(tp)
            if progress is None:
                continue
            offset = int(offset)
            handed = progress.handed if progress.handed is not None else progress.committed
            if handed is None or offset > handed:
                raise PluginReportError(
                    f"reported offset {offset} of {tp[0]}-{tp[1]} durable, but was handed "
                    f"records only up to {handed if handed is not None else 'none'}"
                )
            if progress.committed is None or offset > progress.committed:
                out[tp] = offset
        return out

    def committed(self, offsets: Mapping[TopicPartition, int], now: float) -> None:
        """The group stored ``offsets``."""
        for tp, offset in offsets.items():
            progress = self.partitions.get(tp)
            if progress is None:
                continue
            progress.committed = offset
            progress.pending_since = now if progress.pending else None
        if offsets:
            self.commits += 1

    # -- figures ---------------------------------------------------------------------------

    def durable_age(self, now: float) -> float:
        """Seconds the oldest not-yet-durable records have waited since the durable offset
        last moved; 0 when everything handed is committed."""
        since = [p.pending_since for p in self.partitions.values() if p.pending_since is not None]
        return max(0.0, now - min(since)) if since else 0.0

    def lag(self) -> dict[TopicPartition, int]:
        """Records between the committed offset and the log end, per owned partition
        (from the last ``end_offsets`` lookup)."""
        out = {}
        for tp, end in self.end_offsets.items():
            progress = self.partitions.get(tp)
            if progress is not None:
                out[tp] = max(0, end - (progress.committed or 0))
        return out


def dead_letter_headers(
    sink: str, record_headers: Iterable[tuple[str, bytes | None]], topic: str, partition: int,
    offset: int, reason: str,
) -> list[tuple[str, bytes | None]]:
    """The record's own headers plus where it came from and why it was rejected."""
    return [
        *record_headers,
        (HEADER_TOPIC, topic.encode()),
        (HEADER_PARTITION, str(partition).encode()),
        (HEADER_OFFSET, str(offset).encode()),
        (HEADER_MESSAGE, reason.encode("utf-8", "replace")),
        (HEADER_SINK, sink.encode()),
    ]
