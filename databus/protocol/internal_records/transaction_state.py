"""The records of ``__transaction_state``: the durable state of every transactional id.

One compacted internal topic (Kafka's name and layout), replayed at start; the newest record
per key is the truth.  A transactional id's records all go to one partition
(``partition_for``, the same hash as ``__consumer_offsets``).  The layouts are Kafka's
TransactionLogKey v0 and TransactionLogValue v0 in the classic (non-flexible) encoding:

    key   v0  version int16, transactional id string
    value v0  version int16, producer id int64, producer epoch int16,
              transaction timeout ms int32, state int8,
              partitions nullable array [topic string, partitions array int32],
              last update timestamp ms int64, transaction start timestamp ms int64
"""

from __future__ import annotations

from databus.protocol.binary import BinaryFormatError as TxnStateRecordError  # re-exported
from databus.protocol.binary import Reader, Writer

from . import partition_for  # noqa: F401  (same hash as Kafka)
from .transaction_metadata import TxnMetadata, TxnState

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0

__all__ = ["TRANSACTION_STATE_TOPIC", "TxnStateRecordError", "decode_key", "decode_value",
           "encode_key", "encode_value", "partition_for"]


def encode_key(transactional_id: str) -> bytes:
    w = Writer()
    w.i16(KEY_VERSION)
    w.string(transactional_id)
    return w.getvalue()


def decode_key(data: bytes) -> str:
    r = Reader(data, f"{TRANSACTION_STATE_TOPIC} key")
    version = r.i16()
    if version != KEY_VERSION:
        raise TxnStateRecordError(f"{TRANSACTION_STATE_TOPIC} key: unknown version {version}")
    txn_id = r.string()
    r.done()
    return txn_id


def encode_value(meta: TxnMetadata) -> bytes:
    w = Writer()
    w.i16(VALUE_VERSION)
    w.i64(meta.producer_id)
    w.i16(meta.producer_epoch)
    w.i32(meta.timeout_ms)
    w.raw(bytes([int(meta.state)]))
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    w.i32(len(by_topic))
    for topic, partitions in by_topic.items():
        w.string(topic)
        w.i32(len(partitions))
        for partition in partitions:
            w.i32(partition)
    w.i64(meta.update_ms)
    w.i64(meta.start_ms)
    return w.getvalue()


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    r = Reader(data, f"{TRANSACTION_STATE_TOPIC} value of {transactional_id!r}")
    version = r.i16()
    if version != VALUE_VERSION:
        raise TxnStateRecordError(f"{TRANSACTION_STATE_TOPIC} value: unknown version {version}")
    producer_id, epoch, timeout = r.i64(), r.i16(), r.i32()
    raw_state = r.raw(1)[0]
    try:
        state = TxnState(raw_state)
    except ValueError:
        raise TxnStateRecordError(
            f"{TRANSACTION_STATE_TOPIC} value: unknown state {raw_state}") from None
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(r.i32(), 0)):  # -1: null array
        topic = r.string()
        count = r.i32()
        if count < 0:
            raise TxnStateRecordError(f"{TRANSACTION_STATE_TOPIC} value: bad count {count}")
        partitions.update((topic, r.i32()) for _ in range(count))
    update_ms, start_ms = r.i64(), r.i64()
    r.done()
    return TxnMetadata(transactional_id, producer_id, epoch, timeout, state,
                       frozenset(partitions), start_ms, update_ms)
