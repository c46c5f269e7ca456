"""The "consumer" protocol's opaque blobs, decoded just enough for the coordinator and tools.

JoinGroup carries each member's subscription and SyncGroup each member's assignment as
bytes that only clients define (ConsumerProtocolSubscription / ConsumerProtocolAssignment).
The broker needs the subscribed topics (OffsetDelete refuses to delete offsets of a topic the
group still reads; offsets of unsubscribed topics expire) and ``databus groups describe``
shows the assignment.  Every version starts with the same prefix, which is all we read:

    subscription  version int16, topics [string], ...
    assignment    version int16, assigned [topic string, partitions [int32]], ...
"""

from __future__ import annotations

from .binary import BinaryFormatError, Reader

CONSUMER_PROTOCOL_TYPE = "consumer"


def subscription_topics(metadata: bytes) -> set[str]:
    r = Reader(metadata, "consumer subscription")
    r.i16()
    count = r.i32()
    if count < 0:
        return set()
    return {r.string() for _ in range(count)}


def assignment_partitions(assignment: bytes) -> dict[str, list[int]]:
    """{topic: [partition, ...]}; an empty blob (no assignment yet) gives {}."""
    if not assignment:
        return {}
    r = Reader(assignment, "consumer assignment")
    r.i16()
    out: dict[str, list[int]] = {}
    count = r.i32()
    for _ in range(max(count, 0)):
        topic = r.string()
        n = r.i32()
        out.setdefault(topic, []).extend(r.i32() for _ in range(max(n, 0)))
    return out


__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "BinaryFormatError",
    "assignment_partitions",
    "subscription_topics",
]
