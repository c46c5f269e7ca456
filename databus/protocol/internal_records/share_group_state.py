"""The records of ``__share_group_state``: the durable state of share groups.

One compacted internal topic, replayed at start like ``__consumer_offsets``; the newest
record per key is the truth and a null value (tombstone) deletes.  A group's records all go
to one partition (``partition_for(group_id)``), so one append (and one fsync) carries every
share-partition of the group changed since the last write.

Layouts follow Kafka's ShareSnapshotKey/ShareSnapshotValue in content (start offset, state
epoch, in-flight state batches of first offset, last offset, delivery state, delivery count)
in the classic encoding of protocol/binary.py; they are databus's own, not byte-compatible
with Kafka's (which uses flexible versions):

    key v0  share-partition state   group string, topic id 16 bytes, partition int32
    key v1  group configs           group string
    key v2  group membership        group string
    value (state) v0   start offset int64, state epoch int32, write timestamp int64,
                       batches int32 count [first int64, last int64, state int8,
                       delivery count int16]
    value (configs) v0  count int32 [name string, value string]
    value (membership) v0  group epoch int32, assignment epoch int32,
                       members int32 count [member id string, member epoch int32,
                       rack nullable string, client id string, client host string,
                       subscribed int32 count [topic string],
                       assignment int32 count [topic string, int32 count [partition int32]]],
                       topics seen int32 count [topic string, partition count int32]
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from databus.protocol.binary import BinaryFormatError as ShareStateRecordError  # re-exported
from databus.protocol.binary import Reader, Writer

from .share_batches import RecordState, StateBatch

SHARE_STATE_TOPIC = "__share_group_state"
STATE_KEY_VERSION = 0
CONFIG_KEY_VERSION = 1
MEMBERSHIP_KEY_VERSION = 2
VALUE_VERSION = 0

_BATCH = struct.Struct(">qqbh")



@dataclass(frozen=True)
class StateKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True)
class ConfigKey:
    group_id: str


@dataclass(frozen=True)
class MembershipKey:
    group_id: str


@dataclass(frozen=True)
class MemberImage:
    """A share-group member as persisted (broker/share/group_state.py exports and restores
    it)."""

    member_id: str
    member_epoch: int
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class MembershipImage:
    """A share group's membership as persisted: its epochs, members and their assignments."""

    group_epoch: int
    assignment_epoch: int
    members: tuple[MemberImage, ...]
    # (topic, partition count) the target assignment was computed from
    topics_seen: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class StateValue:
    start_offset: int
    state_epoch: int
    write_timestamp_ms: int
    batches: tuple[StateBatch, ...]


AnyKey = StateKey | ConfigKey | MembershipKey


def encode_key(key: AnyKey) -> bytes:
    w = Writer()
    if isinstance(key, StateKey):
        w.i16(STATE_KEY_VERSION)
        w.string(key.group_id)
        w.raw(key.topic_id.bytes)
        w.i32(key.partition)
    else:
        w.i16(CONFIG_KEY_VERSION if isinstance(key, ConfigKey) else MEMBERSHIP_KEY_VERSION)
        w.string(key.group_id)
    return w.getvalue()


def decode_key(data: bytes) -> AnyKey:
    r = Reader(data, f"{SHARE_STATE_TOPIC} key")
    version = r.i16()
    if version == STATE_KEY_VERSION:
        group = r.string()
        topic_id = uuid.UUID(bytes=r.raw(16))
        key: AnyKey = StateKey(group, topic_id, r.i32())
    elif version == CONFIG_KEY_VERSION:
        key = ConfigKey(r.string())
    elif version == MEMBERSHIP_KEY_VERSION:
        key = MembershipKey(r.string())
    else:
        raise ShareStateRecordError(f"{SHARE_STATE_TOPIC} key: unknown version {version}")
    r.done()
    return key


def encode_state_value(value: StateValue) -> bytes:
    w = Writer()
    w.i16(VALUE_VERSION)
    w.i64(value.start_offset)
    w.i32(value.state_epoch)
    w.i64(value.write_timestamp_ms)
    w.i32(len(value.batches))
    for b in value.batches:
        w.raw(_BATCH.pack(b.first_offset, b.last_offset, int(b.state), b.delivery_count))
    return w.getvalue()


def decode_state_value(data: bytes) -> StateValue:
    r = Reader(data, "share state value")
    version = r.i16()
    if version != VALUE_VERSION:
        raise ShareStateRecordError(f"share state value: unknown version {version}")
    start, epoch, written, count = r.i64(), r.i32(), r.i64(), r.i32()
    if count < 0:
        raise ShareStateRecordError(f"share state value: bad batch count {count}")
    batches = []
    for _ in range(count):
        first, last, state, delivered = _BATCH.unpack(r.raw(_BATCH.size))
        try:
            batches.append(StateBatch(first, last, RecordState(state), delivered))
        except ValueError as exc:
            raise ShareStateRecordError(f"share state value: bad state {state}") from exc
    r.done()
    return StateValue(start, epoch, written, tuple(batches))


def encode_config_value(configs: dict[str, str]) -> bytes:
    w = Writer()
    w.i16(VALUE_VERSION)
    w.i32(len(configs))
    for name, value in sorted(configs.items()):
        w.string(name)
        w.string(value)
    return w.getvalue()


def decode_config_value(data: bytes) -> dict[str, str]:
    r = Reader(data, "share group configs value")
    version = r.i16()
    if version != VALUE_VERSION:
        raise ShareStateRecordError(f"share group configs value: unknown version {version}")
    count = r.i32()
    if count < 0:
        raise ShareStateRecordError(f"share group configs value: bad count {count}")
    configs = {r.string(): r.string() for _ in range(count)}
    r.done()
    return configs


def encode_membership_value(image: MembershipImage) -> bytes:
    w = Writer()
    w.i16(VALUE_VERSION)
    w.i32(image.group_epoch)
    w.i32(image.assignment_epoch)
    w.i32(len(image.members))
    for m in image.members:
        w.string(m.member_id)
        w.i32(m.member_epoch)
        w.string(m.rack_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.i32(len(m.subscribed_topic_names))
        for topic in m.subscribed_topic_names:
            w.string(topic)
        w.i32(len(m.assignment))
        for topic, partitions in m.assignment:
            w.string(topic)
            w.i32(len(partitions))
            for p in partitions:
                w.i32(p)
    w.i32(len(image.topics_seen))
    for topic, count in image.topics_seen:
        w.string(topic)
        w.i32(count)
    return w.getvalue()


def _count(r: Reader, what: str) -> int:
    n = r.i32()
    if n < 0:
        raise ShareStateRecordError(f"share group membership value: bad {what} count {n}")
    return n


def decode_membership_value(data: bytes) -> MembershipImage:
    r = Reader(data, "share group membership value")
    version = r.i16()
    if version != VALUE_VERSION:
        raise ShareStateRecordError(f"share group membership value: unknown version {version}")
    group_epoch, assignment_epoch = r.i32(), r.i32()
    members = []
    for _ in range(_count(r, "member")):
        member_id, epoch = r.string(), r.i32()
        rack, client_id, client_host = r.string(nullable=True), r.string(), r.string()
        subscribed = tuple(r.string() for _ in range(_count(r, "topic")))
        assignment = tuple(
            (r.string(), tuple(r.i32() for _ in range(_count(r, "partition"))))
            for _ in range(_count(r, "assignment")))
        members.append(MemberImage(member_id, epoch, rack, client_id, client_host,
                                   subscribed, assignment))
    topics_seen = tuple((r.string(), r.i32()) for _ in range(_count(r, "topic")))
    r.done()
    return MembershipImage(group_epoch, assignment_epoch, tuple(members), topics_seen)
