"""The ``__consumer_offsets`` records of consumer groups (KIP-848), byte for byte Kafka 4.0's
(``group-coordinator/src/main/resources/common/message/ConsumerGroup*.json``): the key is
the record type as an int16 "version", then the group id (and member id), classic
encoding; the value starts with an int16 version (0) and is flexible (compact strings and
arrays, uuids, a tagged-field section per struct, none written).

    key 3  ConsumerGroupMetadataKey            group     value: Epoch int32
    key 4  ConsumerGroupPartitionMetadataKey   group     value: Topics [TopicId uuid,
               TopicName string, NumPartitions int32, PartitionMetadata [Partition int32,
               Racks [string]]]
    key 5  ConsumerGroupMemberMetadataKey      group, member   value: InstanceId string?,
               RackId string?, ClientId string, ClientHost string,
               SubscribedTopicNames [string], SubscribedTopicRegex string?,
               ServerAssignor string?, RebalanceTimeoutMs int32
    key 6  ConsumerGroupTargetAssignmentMetadataKey  group    value: AssignmentEpoch int32
    key 7  ConsumerGroupTargetAssignmentMemberKey    group, member   value:
               TopicPartitions [TopicId uuid, Partitions [int32]]
    key 8  ConsumerGroupCurrentMemberAssignmentKey   group, member   value: MemberEpoch int32,
               PreviousMemberEpoch int32, State int8, AssignedPartitions [TopicId uuid,
               Partitions [int32]], PartitionsPendingRevocation [same]

A null value is a tombstone (member left, group deleted).  Replay applies them in log order
(the topic is compacted: the newest record per key is the truth).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from databus.protocol.binary import BinaryFormatError, Reader, Writer

# a member's partitions: topic id -> partitions (the coordinator's assignors compute them)
Assignment = dict[uuid.UUID, frozenset[int]]

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_MEMBER = 8
RECORD_TYPES = range(GROUP_METADATA, CURRENT_MEMBER + 1)
_MEMBER_KEYS = (MEMBER_METADATA, TARGET_MEMBER, CURRENT_MEMBER)
VALUE_VERSION = 0


@dataclass(frozen=True)
class RecordKey:
    record_type: int
    group_id: str
    member_id: str | None = None  # keys 5, 7, 8


@dataclass(frozen=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(frozen=True)
class MemberMetadata:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int


@dataclass(frozen=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


def encode_key(key: RecordKey) -> bytes:
    w = Writer()
    w.i16(key.record_type)
    w.string(key.group_id)
    if key.record_type in _MEMBER_KEYS:
        w.string(key.member_id or "")
    return w.getvalue()


def decode_key(data: bytes) -> RecordKey:
    r = Reader(data, "__consumer_offsets consumer-group key")
    record_type = r.i16()
    if record_type not in RECORD_TYPES:
        raise BinaryFormatError(f"not a consumer-group record key (type {record_type})")
    group_id = r.string()
    member_id = r.string() if record_type in _MEMBER_KEYS else None
    r.done()
    return RecordKey(record_type, group_id, member_id)


def _topic_partitions(w: Writer, assignment: Assignment) -> None:
    w.compact_count(len(assignment))
    for topic_id in sorted(assignment, key=str):
        w.uuid(topic_id)
        parts = sorted(assignment[topic_id])
        w.compact_count(len(parts))
        for p in parts:
            w.i32(p)
        w.no_tags()


def _read_topic_partitions(r: Reader) -> Assignment:
    out: Assignment = {}
    for _ in range(r.compact_count()):
        topic_id = r.uuid()
        out[topic_id] = frozenset(r.i32() for _ in range(r.compact_count()))
        r.skip_tags()
    return out


def _start(version: int = VALUE_VERSION) -> Writer:
    w = Writer()
    w.i16(version)
    return w


def _end(w: Writer) -> bytes:
    w.no_tags()
    return w.getvalue()


def _reader(data: bytes, what: str) -> Reader:
    r = Reader(data, what)
    version = r.i16()
    if version != VALUE_VERSION:
        raise BinaryFormatError(f"{what}: unsupported version {version}")
    return r


def _finish(r: Reader):
    r.skip_tags()
    r.done()


def encode_epoch(epoch: int) -> bytes:
    """ConsumerGroupMetadataValue and ConsumerGroupTargetAssignmentMetadataValue alike."""
    w = _start()
    w.i32(epoch)
    return _end(w)


def decode_epoch(data: bytes) -> int:
    r = _reader(data, "consumer-group epoch value")
    epoch = r.i32()
    _finish(r)
    return epoch


def encode_partition_metadata(topics: tuple[TopicMetadata, ...]) -> bytes:
    w = _start()
    w.compact_count(len(topics))
    for t in topics:
        w.uuid(t.topic_id)
        w.compact_string(t.name)
        w.i32(t.partitions)
        w.compact_count(0)  # PartitionMetadata (racks): not tracked
        w.no_tags()
    return _end(w)


def decode_partition_metadata(data: bytes) -> tuple[TopicMetadata, ...]:
    r = _reader(data, "ConsumerGroupPartitionMetadataValue")
    topics = []
    for _ in range(r.compact_count()):
        topic_id, name, count = r.uuid(), r.compact_string(), r.i32()
        for _ in range(r.compact_count()):
            r.i32()
            for _ in range(r.compact_count()):
                r.compact_string()
            r.skip_tags()
        r.skip_tags()
        topics.append(TopicMetadata(topic_id, name, count))
    _finish(r)
    return tuple(topics)


def encode_member_metadata(m: MemberMetadata) -> bytes:
    w = _start()
    w.compact_string(m.instance_id)
    w.compact_string(m.rack_id)
    w.compact_string(m.client_id)
    w.compact_string(m.client_host)
    w.compact_count(len(m.subscribed_topic_names))
    for name in m.subscribed_topic_names:
        w.compact_string(name)
    w.compact_string(m.subscribed_topic_regex)
    w.compact_string(m.server_assignor)
    w.i32(m.rebalance_timeout_ms)
    return _end(w)


def decode_member_metadata(data: bytes) -> MemberMetadata:
    r = _reader(data, "ConsumerGroupMemberMetadataValue")
    instance_id = r.compact_string(nullable=True)
    rack_id = r.compact_string(nullable=True)
    client_id = r.compact_string()
    client_host = r.compact_string()
    names = tuple(r.compact_string() for _ in range(r.compact_count()))
    regex = r.compact_string(nullable=True)
    assignor = r.compact_string(nullable=True)
    rebalance_timeout = r.i32()
    _finish(r)
    return MemberMetadata(instance_id, rack_id, client_id, client_host, names, regex, assignor,
                          rebalance_timeout)


def encode_target_member(assignment: Assignment) -> bytes:
    w = _start()
    _topic_partitions(w, assignment)
    return _end(w)


def decode_target_member(data: bytes) -> Assignment:
    r = _reader(data, "ConsumerGroupTargetAssignmentMemberValue")
    out = _read_topic_partitions(r)
    _finish(r)
    return out


def encode_current_member(c: CurrentAssignment) -> bytes:
    w = _start()
    w.i32(c.member_epoch)
    w.i32(c.previous_member_epoch)
    w.i8(c.state)
    _topic_partitions(w, c.assigned)
    _topic_partitions(w, c.pending_revocation)
    return _end(w)


def decode_current_member(data: bytes) -> CurrentAssignment:
    r = _reader(data, "ConsumerGroupCurrentMemberAssignmentValue")
    epoch, previous, state = r.i32(), r.i32(), r.i8()
    assigned = _read_topic_partitions(r)
    pending = _read_topic_partitions(r)
    _finish(r)
    return CurrentAssignment(epoch, previous, state, assigned, pending)
