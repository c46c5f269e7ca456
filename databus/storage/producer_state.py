"""Idempotent-producer state of one partition: this module owns that state machine.

Per producer id: its current epoch and the metadata of its last 5 appended batches (first and
last sequence, first and last offset), as Kafka's ProducerStateManager keeps them.  Everything
comes from the fixed batch header (producerId, producerEpoch, baseSequence,
lastOffsetDelta), so no record is ever parsed.

``check_sequence`` is the pure rule the broker applies before an append (``PartitionLog``
applies it inside ``append``):

* a batch equal (epoch, first and last sequence) to one of the cached 5 is a DUPLICATE: the
  answer is its original offsets and nothing is appended;
* an epoch older than the producer's current one -> ``InvalidProducerEpochError``
  (INVALID_PRODUCER_EPOCH);
* a new (higher) epoch must start at sequence 0, unless the producer is unknown here
  (its batches were all deleted by retention: any sequence is accepted, as Kafka does);
* within an epoch the first sequence must follow the last one (wrapping at int32 max),
  otherwise ``OutOfOrderSequenceError`` (OUT_OF_ORDER_SEQUENCE_NUMBER).

The state survives restarts: ``snapshot_bytes`` / ``load_snapshot`` write and read
``<20-digit offset>.snapshot`` files (taken on roll and clean close), and recovery replays
the batch headers after the newest usable snapshot (``PartitionLog`` does the replay).

Snapshot format (big-endian): magic ``DBPS``, version u16, CRC-32C u32 of the rest, then
msgpack ``[[pid, epoch, last_timestamp, [[first_seq, last_seq, first_offset, last_offset],
...]], ...]``.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field

import crc32c
import msgpack

from databus.protocol.records import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader

from .errors import InvalidProducerEpochError, OutOfOrderSequenceError

BATCHES_PER_PRODUCER = 5
INT32_MAX = 2**31 - 1
NO_PRODUCER_EPOCH = -1
_SNAPSHOT_HEAD = struct.Struct(">4sHI")
_SNAPSHOT_MAGIC = b"DBPS"
_SNAPSHOT_VERSION = 1


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_PER_PRODUCER))
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE


def in_sequence(last_seq: int, next_first_seq: int) -> bool:
    return next_first_seq == last_seq + 1 or (next_first_seq == 0 and last_seq == INT32_MAX)


def check_sequence(entry: ProducerEntry | None, producer_id: int, epoch: int,
                   first_seq: int, last_seq: int) -> BatchMetadata | None:
    """The pure idempotence rule (see the module docstring).

    Returns the original batch's metadata for a duplicate, None for a batch to append;
    raises InvalidProducerEpochError or OutOfOrderSequenceError.
    """
    if producer_id == NO_PRODUCER_ID or first_seq == NO_SEQUENCE:
        return None
    if entry is None or entry.epoch == NO_PRODUCER_EPOCH:
        return None
    if epoch < entry.epoch:
        raise InvalidProducerEpochError(
            f"producer {producer_id} has epoch {epoch}, older than its current epoch {entry.epoch}"
        )
    if epoch == entry.epoch:
        for meta in entry.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        if entry.batches and not in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {epoch}: sequence {first_seq} does not follow "
                f"the last appended sequence {entry.last_seq}"
            )
        return None
    if first_seq != 0:
        raise OutOfOrderSequenceError(
            f"producer {producer_id}: new epoch {epoch} must start at sequence 0, not {first_seq}"
        )
    return None


class ProducerStateManager:
    """Producer id -> ProducerEntry for one partition."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    def check(self, h: BatchHeader) -> BatchMetadata | None:
        return check_sequence(self.producers.get(h.producer_id), h.producer_id,
                              h.producer_epoch, h.base_sequence, h.last_sequence)

    def update(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
               first_offset: int, last_offset: int, timestamp: int) -> None:
        """Record an appended batch (its offsets as assigned)."""
        if producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry()
        if epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        if first_seq != NO_SEQUENCE:
            entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset))
        entry.last_timestamp = max(entry.last_timestamp, timestamp)

    def update_from_header(self, h: BatchHeader) -> None:
        """Record a batch as found in the log (its base offset is its real one)."""
        if h.producer_id != NO_PRODUCER_ID:
            self.update(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                        h.base_offset, h.base_offset + h.last_offset_delta, h.max_timestamp)

    def snapshot_bytes(self) -> bytes:
        body = msgpack.packb([
            [pid, e.epoch, e.last_timestamp,
             [[m.first_seq, m.last_seq, m.first_offset, m.last_offset] for m in e.batches]]
            for pid, e in self.producers.items()
        ])
        return _SNAPSHOT_HEAD.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_VERSION, crc32c.crc32c(body)) + body

    @classmethod
    def load_snapshot(cls, data: bytes) -> ProducerStateManager:
        """Parse a snapshot; ValueError naming the problem if it is not intact."""
        if len(data) < _SNAPSHOT_HEAD.size:
            raise ValueError(f"snapshot of {len(data)} bytes is shorter than its header")
        magic, version, crc = _SNAPSHOT_HEAD.unpack_from(data)
        body = data[_SNAPSHOT_HEAD.size:]
        if magic != _SNAPSHOT_MAGIC or version != _SNAPSHOT_VERSION:
            raise ValueError(f"not a version {_SNAPSHOT_VERSION} producer snapshot")
        if crc32c.crc32c(body) != crc:
            raise ValueError("snapshot fails its CRC-32C check")
        state = cls()
        for pid, epoch, last_ts, batches in msgpack.unpackb(body):
            entry = state.producers[pid] = ProducerEntry(epoch=epoch, last_timestamp=last_ts)
            for first_seq, last_seq, first_offset, last_offset in batches:
                entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset))
        return state
