"""Small Kafka value types shared by the broker, the client and the sidecar.

They live here, below both the broker and the client (which never import each other), so
that each concept has one definition.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["TopicPartition"]


class TopicPartition(NamedTuple):
    """One partition of one topic, Kafka's ``TopicPartition``.

    A NamedTuple on purpose: it is a ``(topic, partition)`` tuple, so the plain tuples that
    callers build (``consumer.assign([("orders", 0)])``) compare and hash equal to it and
    work as the same dict keys; ``tp.topic`` and ``tp.partition`` name the fields.
    """

    topic: str
    partition: int
