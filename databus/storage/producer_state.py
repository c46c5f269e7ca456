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

Transactions (KIP-98) are tracked here too, from the same headers: a transactional batch
opens its producer's transaction on this partition (``ongoing``: pid -> first offset) unless
one is open; a control batch (a COMMIT or ABORT marker written by the transaction
coordinator) closes it, and an ABORT adds ``AbortedTxn(pid, first offset, marker offset)`` to
``aborted`` (Kafka's .txnindex, kept in the snapshot instead of a file per segment).  The
last stable offset is the first offset of the oldest open transaction (or the log end);
read_committed fetches stop there and get the aborted transactions of the range they read.
A marker's epoch becomes the producer's epoch, so a producer fenced by a bumped epoch gets
INVALID_PRODUCER_EPOCH on its next batch.

The state survives restarts: ``snapshot_bytes`` / ``load_snapshot`` write and read
``<20-digit offset>.snapshot`` files (taken on roll and clean close), and recovery replays
the batch headers after the newest usable snapshot (``PartitionLog`` does the replay).

Snapshot format (big-endian): magic ``DBPS``, version u16, CRC-32C u32 of the rest, then
msgpack; version 1: ``[[pid, epoch, last_timestamp, [[first_seq, last_seq, first_offset,
last_offset], ...]], ...]``; version 2: ``[that list, [[pid, first_offset], ...] (open
transactions), [[pid, first_offset, last_offset], ...] (aborted transactions)]``.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field

import crc32c
import msgpack

from databus.protocol.records import CONTROL_ABORT, NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader

from .errors import InvalidProducerEpochError, OutOfOrderSequenceError

BATCHES_PER_PRODUCER = 5
INT32_MAX = 2**31 - 1
NO_PRODUCER_EPOCH = -1
_SNAPSHOT_HEAD = struct.Struct(">4sHI")
_SNAPSHOT_MAGIC = b"DBPS"
_SNAPSHOT_VERSION = 2
_SNAPSHOT_VERSIONS = (1, 2)


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


@dataclass(frozen=True)
class AbortedTxn:
    """An aborted transaction on one partition: its records lie in [first_offset,
    last_offset] (the ABORT marker's offset); read_committed consumers drop them."""

    producer_id: int
    first_offset: int
    last_offset: int


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
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open txn
        self.aborted: list[AbortedTxn] = []  # in marker (last offset) order

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

    def update_from_header(self, h: BatchHeader, control_type: int | None = None) -> None:
        """Record a batch as found in the log (its base offset is its real one);
        ``control_type`` is a control batch's marker type (CONTROL_COMMIT/CONTROL_ABORT)."""
        if h.producer_id == NO_PRODUCER_ID:
            return
        self.update(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                    h.base_offset, h.base_offset + h.last_offset_delta, h.max_timestamp)
        if h.is_control:
            first = self.ongoing.pop(h.producer_id, None)
            if control_type == CONTROL_ABORT and first is not None:
                self.aborted.append(AbortedTxn(h.producer_id, first, h.base_offset))
        elif h.is_transactional:
            self.ongoing.setdefault(h.producer_id, h.base_offset)

    # -- transactions -----------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, None when none is open."""
        return min(self.ongoing.values()) if self.ongoing else None

    def aborted_in_range(self, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions a read of [start, upper) must know about: those whose marker
        is at or after ``start`` and whose first record is before ``upper`` (Kafka's
        collectAbortedTransactions)."""
        aborted = self.aborted
        i = bisect_left(aborted, start, key=lambda a: a.last_offset)
        return [a for a in aborted[i:] if a.first_offset < upper]

    def drop_aborted_before(self, log_start_offset: int) -> None:
        """Forget aborted transactions wholly below the log start (retention deleted them)."""
        aborted = self.aborted
        i = bisect_left(aborted, log_start_offset, key=lambda a: a.last_offset)
        if i:
            del aborted[:i]

    def snapshot_bytes(self) -> bytes:
        body = msgpack.packb([
            [[pid, e.epoch, e.last_timestamp,
              [[m.first_seq, m.last_seq, m.first_offset, m.last_offset] for m in e.batches]]
             for pid, e in self.producers.items()],
            [[pid, first] for pid, first in self.ongoing.items()],
            [[a.producer_id, a.first_offset, a.last_offset] for a in self.aborted],
        ])
        return _SNAPSHOT_HEAD.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_VERSION, crc32c.crc32c(body)) + body

    @classmethod
    def load_snapshot(cls, data: bytes) -> ProducerStateManager:
        """Parse a snapshot; ValueError naming the problem if it is not intact."""
        if len(data) < _SNAPSHOT_HEAD.size:
            raise ValueError(f"snapshot of {len(data)} bytes is shorter than its header")
        magic, version, crc = _SNAPSHOT_HEAD.unpack_from(data)
        body = data[_SNAPSHOT_HEAD.size:]
        if magic != _SNAPSHOT_MAGIC or version not in _SNAPSHOT_VERSIONS:
            raise ValueError(f"not a version 1 or 2 producer snapshot (version {version})")
        if crc32c.crc32c(body) != crc:
            raise ValueError("snapshot fails its CRC-32C check")
        state = cls()
        content = msgpack.unpackb(body)
        producers = content if version == 1 else content[0]
        if version >= 2:
            state.ongoing = {pid: first for pid, first in content[1]}
            state.aborted = [AbortedTxn(*entry) for entry in content[2]]
        for pid, epoch, last_ts, batches in producers:
            entry = state.producers[pid] = ProducerEntry(epoch=epoch, last_timestamp=last_ts)
            for first_seq, last_seq, first_offset, last_offset in batches:
                entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset))
        return state
