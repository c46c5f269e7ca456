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
    value (state) v0   start offset int64, state epoch int32, write timestamp int64,
                       batches int32 count [first int64, last int64, state int8,
                       delivery count int16]
    value (configs) v0  count int32 [name string, value string]
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
class StateValue:
    start_offset: int
    state_epoch: int
    write_timestamp_ms: int
    batches: tuple[StateBatch, ...]


def encode_key(key: StateKey | ConfigKey) -> bytes:
    w = Writer()
    if isinstance(key, StateKey):
        w.i16(STATE_KEY_VERSION)
        w.string(key.group_id)
        w.raw(key.topic_id.bytes)
        w.i32(key.partition)
    else:
        w.i16(CONFIG_KEY_VERSION)
        w.string(key.group_id)
    return w.getvalue()


def decode_key(data: bytes) -> StateKey | ConfigKey:
    r = Reader(data, f"{SHARE_STATE_TOPIC} key")
    version = r.i16()
    if version == STATE_KEY_VERSION:
        group = r.string()
        topic_id = uuid.UUID(bytes=r.raw(16))
        key: StateKey | ConfigKey = StateKey(group, topic_id, r.i32())
    elif version == CONFIG_KEY_VERSION:
        key = ConfigKey(r.string())
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
