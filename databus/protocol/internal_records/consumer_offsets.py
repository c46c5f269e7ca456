"""The records of ``__consumer_offsets``: which partition a group lives in, and the binary
key/value layouts, byte-for-byte those of Kafka's group coordinator so that tools that know
Kafka's format (and our ``dump-log``) read them unchanged.

Keys and values start with an int16 schema version, then the fields in Kafka's classic
(non-flexible) encoding: int16-length strings (-1 = null), int32-length bytes, int32 counts.

    key v0/v1  OffsetCommitKey    group string, topic string, partition int32
    key v2     GroupMetadataKey   group string
    value      OffsetCommitValue v3 (written; v1 when it has an expire time; v0-3 read):
               offset int64, [v3] leaderEpoch int32, metadata string, commitTimestamp int64,
               [v1] expireTimestamp int64
    value      GroupMetadataValue v3 (written; v0-3 read):
               protocolType string, generation int32, protocol string?, leader string?,
               [v2+] currentStateTimestamp int64,
               members [memberId string, [v3] groupInstanceId string?, clientId string,
                        clientHost string, [v1+] rebalanceTimeout int32, sessionTimeout int32,
                        subscription bytes, assignment bytes]

A null value is a tombstone: the offset (or the whole group) was deleted.  The topic is
compacted, so the newest record per key is the truth; replay applies them in log order.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from databus.protocol.binary import BinaryFormatError as OffsetsRecordError
from databus.protocol.binary import Reader, Writer

from . import partition_for  # noqa: F401  (GroupMetadataManager.partitionFor)

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3


# ---------------------------------------------------------------------------------------------
# a group's metadata: what GroupMetadataValue holds (the coordinator's group_state.py keeps
# the group; these are the values it persists and DescribeGroups reports)


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class MemberSnapshot:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # metadata of the selected protocol
    assignment: bytes


@dataclass(frozen=True)
class GroupSnapshot:
    """What Kafka's GroupMetadataValue holds; also what DescribeGroups reports."""

    group_id: str
    state: GroupState
    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: tuple[MemberSnapshot, ...]


# ---------------------------------------------------------------------------------------------
# keys


@dataclass(frozen=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int  # -1 = unknown
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1  # only v1 carried it


def encode_offset_key(key: OffsetKey) -> bytes:
    w = Writer()
    w.i16(OFFSET_COMMIT_KEY_VERSION)
    w.string(key.group_id)
    w.string(key.topic)
    w.i32(key.partition)
    return w.getvalue()


def encode_group_key(key: GroupKey) -> bytes:
    w = Writer()
    w.i16(GROUP_METADATA_KEY_VERSION)
    w.string(key.group_id)
    return w.getvalue()


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """Decode a record key; None for record types of newer protocols we do not use."""
    r = Reader(data, "__consumer_offsets key")
    version = r.i16()
    if version in (0, 1):
        key: OffsetKey | GroupKey = OffsetKey(r.string(), r.string(), r.i32())
    elif version == 2:
        key = GroupKey(r.string())
    elif version >= 3:
        return None  # consumer-group (KIP-848), share-group ... records: not ours
    else:
        raise OffsetsRecordError(f"__consumer_offsets key: unknown version {version}")
    r.done()
    return key


# ---------------------------------------------------------------------------------------------
# values


def encode_offset_value(value: OffsetValue) -> bytes:
    """v3, or v1 when the commit carries an explicit expire timestamp (OffsetCommit v2-v4's
    retention time), as Kafka writes it: only v1 has the field."""
    w = Writer()
    if value.expire_timestamp_ms >= 0:
        w.i16(1)
        w.i64(value.offset)
        w.string(value.metadata)
        w.i64(value.commit_timestamp_ms)
        w.i64(value.expire_timestamp_ms)
        return w.getvalue()
    w.i16(OFFSET_COMMIT_VALUE_VERSION)
    w.i64(value.offset)
    w.i32(value.leader_epoch)
    w.string(value.metadata)
    w.i64(value.commit_timestamp_ms)
    return w.getvalue()


def decode_offset_value(data: bytes) -> OffsetValue:
    r = Reader(data, "OffsetCommitValue")
    version = r.i16()
    if not 0 <= version <= 3:
        raise OffsetsRecordError(f"OffsetCommitValue: unsupported version {version}")
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    r.done()
    return OffsetValue(offset, leader_epoch, metadata, commit_ts, expire_ts)


def encode_group_value(snapshot: GroupSnapshot) -> bytes:
    w = Writer()
    w.i16(GROUP_METADATA_VALUE_VERSION)
    w.string(snapshot.protocol_type or "")
    w.i32(snapshot.generation_id)
    w.string(snapshot.protocol_name)
    w.string(snapshot.leader_id)
    w.i64(snapshot.state_timestamp_ms)
    w.i32(len(snapshot.members))
    for m in snapshot.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.i32(m.rebalance_timeout_ms)
        w.i32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.getvalue()


def decode_group_value(group_id: str, data: bytes) -> GroupSnapshot:
    r = Reader(data, "GroupMetadataValue")
    version = r.i16()
    if not 0 <= version <= 3:
        raise OffsetsRecordError(f"GroupMetadataValue: unsupported version {version}")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    state_ts = r.i64() if version >= 2 else -1
    count = r.i32()
    if count < 0:
        raise OffsetsRecordError(f"GroupMetadataValue: bad member count {count}")
    members = []
    for _ in range(count):
        member_id = r.string()
        instance_id = r.string(nullable=True) if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        session_timeout = None
        rebalance_timeout = r.i32() if version >= 1 else None
        session_timeout = r.i32()
        if rebalance_timeout is None:
            rebalance_timeout = session_timeout
        subscription = r.bytes_()
        assignment = r.bytes_()
        members.append(
            MemberSnapshot(
                member_id, instance_id, client_id, client_host, rebalance_timeout,
                session_timeout, subscription, assignment,
            )
        )
    r.done()
    state = GroupState.STABLE if members else GroupState.EMPTY
    return GroupSnapshot(
        group_id, state, protocol_type or None, generation, protocol, leader, state_ts,
        tuple(members),
    )
