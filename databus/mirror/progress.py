"""Mirror progress (pure): offset-sync records and per-partition delivery bookkeeping.

Offset syncs (MirrorMaker 2's name) live in a compacted topic on the *target* cluster, one
key per (mirror, source topic, source partition), so a mirror restarted on any host resumes
where the target says it is::

    key   = "<mirror>/<source topic>/<partition>"                 (ASCII)
    value = int16 version (0) | int64 source offset | int64 target offset   (big-endian)

``source offset`` is the last source offset covered (written, or skipped by the loop check)
and ``target offset`` the offset its copy landed at on the target (-1 before the first
copy).  A record is written only after the target acknowledged every copy up to it, so
resuming at ``source offset + 1`` never skips a record; what the target acknowledged after
the last sync is written again after a crash (bounded duplicates).

``PartitionProgress`` is the bookkeeping of one source partition: each group of records
handed to the producer is a ``Chunk`` (the producer's DeliverySink); acknowledgements may
arrive per batch and out of order, and the acknowledged position only advances over a
contiguous prefix of fully acknowledged chunks.  A failed chunk stops the advance; the shell
then either rewinds (a retriable failure: read again from the acknowledged position, after
every chunk in flight has settled) or stops the partition (the target refused a record).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

_VALUE = struct.Struct(">hqq")
VERSION = 0


class OffsetSync(NamedTuple):
    source_offset: int  # last source offset covered
    target_offset: int  # where its copy landed on the target (-1: nothing copied yet)


def encode_key(mirror: str, topic: str, partition: int) -> bytes:
    return f"{mirror}/{topic}/{partition}".encode()


def decode_key(key: bytes) -> tuple[str, str, int]:
    mirror, topic, partition = key.decode("ascii").split("/")
    return mirror, topic, int(partition)


def encode_value(sync: OffsetSync) -> bytes:
    return _VALUE.pack(VERSION, sync.source_offset, sync.target_offset)


def decode_value(value: bytes) -> OffsetSync:
    if len(value) < _VALUE.size:
        raise ValueError(f"offset sync of {len(value)} bytes, expected {_VALUE.size}")
    version, source, target = _VALUE.unpack_from(value)
    if version != VERSION:
        raise ValueError(f"offset sync version {version} is not supported (only {VERSION})")
    return OffsetSync(source, target)


def read_syncs(records, mirror: str) -> dict[tuple[str, int], OffsetSync]:
    """The latest sync per source partition of ``mirror`` among ``records`` (key, value)
    pairs in log order; other mirrors' keys, tombstones and unreadable records are ignored."""
    out: dict[tuple[str, int], OffsetSync] = {}
    for key, value in records:
        if key is None:
            continue
        try:
            name, topic, partition = decode_key(key)
        except ValueError:
            continue
        if name != mirror:
            continue
        if value is None:
            out.pop((topic, partition), None)
            continue
        try:
            out[(topic, partition)] = decode_value(value)
        except ValueError:
            continue
    return out


class Chunk:
    """Records of one source partition handed to the producer together (the DeliverySink
    of ``Producer.send_batch``).  ``offsets[i]`` is the source offset of its i-th record;
    ``end_source`` the last source offset it covers (records skipped by the loop check
    included)."""

    __slots__ = (
        "end_source",
        "epoch",
        "error",
        "offsets",
        "owner",
        "remaining",
        "size",
        "target_last",
        "timestamps",
    )

    def __init__(self, owner, epoch, offsets, timestamps, end_source) -> None:
        self.owner = owner
        self.epoch = epoch
        self.offsets = offsets
        self.timestamps = timestamps
        self.end_source = end_source
        self.remaining = len(offsets)
        self.target_last = -1
        self.error: BaseException | None = None
        self.size = 0  # key+value+header bytes of its records (metrics)

    def batch_done(self, start, count, first_offset, append_ms, error) -> None:
        self.owner.batch_done(self, start, count, first_offset, append_ms, error)


class PartitionProgress:
    """Delivery bookkeeping of one source partition (see the module docstring).

    ``on_ack(chunk, start, count, first_offset, append_ms)`` is called for every
    acknowledged run of records (metrics); ``on_failure(error)`` once, at the first failed
    chunk of an epoch."""

    def __init__(self, sync: OffsetSync | None = None,
                 on_ack: Callable | None = None,
                 on_failure: Callable[[BaseException], None] | None = None) -> None:
        self.acked = sync or OffsetSync(-1, -1)
        self.synced = self.acked  # what the progress topic holds (as far as we know)
        self.pending: deque[Chunk] = deque()
        self.epoch = 0
        self.failure: BaseException | None = None
        self.on_ack = on_ack
        self.on_failure = on_failure

    @property
    def next_offset(self) -> int | None:
        """Where reading resumes: after the last acknowledged source offset (None: no
        progress yet, the mirror's ``start`` decides)."""
        return self.acked.source_offset + 1 if self.acked.source_offset >= 0 else None

    def add(self, offsets: list[int], timestamps: list[int], end_source: int) -> Chunk:
        """Register records about to be sent (``offsets`` may be empty: a run of records
        that were all skipped still moves the position)."""
        chunk = Chunk(self, self.epoch, offsets, timestamps, end_source)
        self.pending.append(chunk)
        if not offsets:
            self._advance()
        return chunk

    def batch_done(self, chunk: Chunk, start, count, first_offset, append_ms, error) -> None:
        if chunk.epoch != self.epoch:
            return  # a chunk from before a rewind: its records are being read again
        chunk.remaining -= count
        if error is not None:
            if chunk.error is None:
                chunk.error = error
            if self.failure is None:
                self.failure = error
                if self.on_failure is not None:
                    self.on_failure(error)
            return
        last = first_offset + count - 1 if first_offset >= 0 else -1
        chunk.target_last = max(chunk.target_last, last)
        if self.on_ack is not None:
            self.on_ack(chunk, start, count, first_offset, append_ms)
        self._advance()

    def _advance(self) -> None:
        pending = self.pending
        while pending and pending[0].remaining == 0 and pending[0].error is None:
            chunk = pending.popleft()
            target = chunk.target_last if chunk.target_last >= 0 else self.acked.target_offset
            self.acked = OffsetSync(chunk.end_source, target)

    @property
    def settled(self) -> bool:
        """No record of this partition is still waiting for the target's answer."""
        return all(c.remaining == 0 for c in self.pending)

    @property
    def in_flight(self) -> int:
        return sum(c.remaining for c in self.pending)

    def rewind(self) -> int | None:
        """After a retriable failure, once ``settled``: forget what was pending and return
        the offset to read again from (None: no progress, the mirror's start policy)."""
        self.pending.clear()
        self.failure = None
        self.epoch += 1
        return self.next_offset

    @property
    def dirty(self) -> bool:
        """The acknowledged position is ahead of what the progress topic holds."""
        return self.acked != self.synced
