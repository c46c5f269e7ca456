"""Kafka's ConsumerProtocol: the bytes consumers put in JoinGroup metadata and SyncGroup
assignments, so that groups mixing our consumers with Java / librdkafka ones work.

The one codec of these blobs: our client's group member and assignors write and read them,
the broker's coordinator reads the subscribed topics (OffsetDelete refuses a topic the group
still reads; offsets of unsubscribed topics expire), and ``databus groups describe`` shows
the assignments.

Subscription (JoinGroup protocol metadata)::

    version int16 | topics [string] | user_data bytes | owned_partitions [topic, [int32]] (v1+)
    | generation_id int32 (v2+) | rack_id string (v3+)

Assignment (SyncGroup)::

    version int16 | assigned_partitions [topic, [int32]] | user_data bytes

Versions only append fields, so a reader decodes the prefix it knows and ignores the rest
(Kafka's forward-compatibility rule): we decode with min(version, newest we know).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any

from kio.schema.consumer_protocol_assignment.v0.data import (
    ConsumerProtocolAssignment as _AssignmentV0,
)
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as _SubV0
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as _SubV1
from kio.schema.consumer_protocol_subscription.v2.data import ConsumerProtocolSubscription as _SubV2
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as _SubV3
from kio.serial import entity_reader, entity_writer

from .entities import build
from .types import TopicPartition

PROTOCOL_TYPE = "consumer"
SUBSCRIPTION_VERSION = 3
_SUBSCRIPTIONS = {0: _SubV0, 1: _SubV1, 2: _SubV2, 3: _SubV3}
_VERSION = struct.Struct(">h")


class ConsumerProtocolError(ValueError):
    """Group metadata or an assignment that is not valid ConsumerProtocol bytes."""


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None


@dataclass(frozen=True)
class Assignment:
    partitions: tuple[TopicPartition, ...] = ()
    user_data: bytes | None = None


def _group(tps) -> list[dict]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(tps):
        by_topic.setdefault(topic, []).append(partition)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


def _encode(version: int, cls: type, fields: dict) -> bytes:
    out = io.BytesIO()
    out.write(_VERSION.pack(version))
    entity_writer(cls)(out, build(cls, fields))
    return out.getvalue()


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    return _encode(
        version,
        _SUBSCRIPTIONS[version],
        {
            "topics": sorted(sub.topics),
            "user_data": sub.user_data,
            "owned_partitions": _group(sub.owned_partitions),
            "generation_id": sub.generation_id,
            "rack_id": sub.rack_id,
        },
    )


def decode_subscription(data: bytes) -> Subscription:
    """ConsumerProtocolError names what is wrong with ``data``."""
    if len(data) < 2:
        raise ConsumerProtocolError(f"subscription of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data, 0)
    if version < 0:
        raise ConsumerProtocolError(f"subscription version {version} is negative")
    cls = _SUBSCRIPTIONS[min(version, SUBSCRIPTION_VERSION)]
    try:
        sub: Any
        sub, _ = entity_reader(cls)(bytes(data), 2)
    except Exception as exc:
        raise ConsumerProtocolError(f"undecodable subscription v{version}: {exc}") from exc
    owned = tuple(
        TopicPartition(str(tp.topic), int(p))
        for tp in getattr(sub, "owned_partitions", ()) for p in tp.partitions
    )
    return Subscription(
        tuple(sub.topics),
        sub.user_data,
        owned,
        int(getattr(sub, "generation_id", -1)),
        getattr(sub, "rack_id", None),
    )


def encode_assignment(assignment: Assignment) -> bytes:
    return _encode(
        0,
        _AssignmentV0,
        {"assigned_partitions": _group(assignment.partitions), "user_data": assignment.user_data},
    )


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment()  # a member the leader gave nothing (or a failed sync)
    if len(data) < 2:
        raise ConsumerProtocolError(f"assignment of {len(data)} bytes has no version")
    try:
        a, _ = entity_reader(_AssignmentV0)(bytes(data), 2)
    except Exception as exc:
        raise ConsumerProtocolError(f"undecodable assignment: {exc}") from exc
    return Assignment(
        tuple(TopicPartition(str(tp.topic), int(p))
              for tp in a.assigned_partitions for p in tp.partitions),
        a.user_data,
    )
