"""RecordBatch v2 (Kafka's "magic 2" message format): the batch header, validation, and
(further down) record encoding/decoding with the four codecs.

Batch layout (all big-endian)::

    offset  size  field
    0       8     baseOffset            \\ outside the CRC: the broker rewrites baseOffset,
    8       4     batchLength           |  batchLength = bytes after this field
    12      4     partitionLeaderEpoch  /  and partitionLeaderEpoch in place
    16      1     magic (= 2)
    17      4     crc (CRC-32C of bytes 21..end)
    21      2     attributes            bits 0-2 codec, 3 timestampType, 4 transactional,
                                        5 control, 6 hasDeleteHorizonMs
    23      4     lastOffsetDelta
    27      8     baseTimestamp
    35      8     maxTimestamp
    43      8     producerId
    51      2     producerEpoch
    53      4     baseSequence
    57      4     recordsCount
    61      ...   records (compressed as a whole when the codec is not none)

The broker stores batches opaquely: it needs only this header, never the records.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

import crc32c as _crc32c

MAGIC_V2 = 2
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted in batchLength
CRC_START = 21

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CODEC_BY_NAME = {v: k for k, v in CODEC_NAMES.items()}
ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # 0 = CreateTime, 1 = LogAppendTime
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")


class CorruptRecordError(ValueError):
    """A batch whose framing, magic or CRC is wrong (Kafka's CORRUPT_MESSAGE)."""


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # sequences wrap at int32 max, as in Kafka's DefaultRecordBatch.incrementSequence
        return (self.base_sequence + self.last_offset_delta) % (2**31)


def parse_header(buf, pos: int = 0) -> BatchHeader:
    """Unpack the 61-byte header at ``pos``; no validation beyond having the bytes."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch header at byte {pos} needs {HEADER_SIZE} bytes, {len(buf) - pos} available"
        )
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


def compute_crc(buf, pos: int, size: int) -> int:
    """CRC-32C of the batch at ``pos`` of ``size`` bytes, over bytes 21..end."""
    return _crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + size])


def validate_batch(buf, pos: int = 0, max_size: int | None = None) -> BatchHeader:
    """Check one batch at ``pos``: length fits, magic is 2, CRC-32C matches.

    Raises CorruptRecordError naming the problem.  ``max_size`` (when given) bounds the
    whole batch size; exceeding it raises RecordTooLargeError.
    """
    h = parse_header(buf, pos)
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch at byte {pos} has invalid length {h.batch_length}")
    if pos + h.size > len(buf):
        raise CorruptRecordError(
            f"batch at byte {pos} claims {h.size} bytes but only {len(buf) - pos} remain"
        )
    if h.magic != MAGIC_V2:
        raise CorruptRecordError(f"batch at byte {pos} has magic {h.magic}, only 2 is supported")
    if max_size is not None and h.size > max_size:
        raise RecordTooLargeError(f"batch of {h.size} bytes exceeds max.message.bytes={max_size}")
    if h.last_offset_delta < 0 or h.records_count < 0:
        raise CorruptRecordError(f"batch at byte {pos} has negative offset delta or count")
    crc = compute_crc(buf, pos, h.size)
    if crc != h.crc:
        raise CorruptRecordError(
            f"batch at byte {pos} fails its CRC-32C check (stored {h.crc:#010x}, computed {crc:#010x})"
        )
    return h


class RecordTooLargeError(ValueError):
    """A batch larger than max.message.bytes (Kafka's MESSAGE_TOO_LARGE)."""


def iter_headers(buf, pos: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete batch in buf[pos:end], without CRC checks.

    Stops at the first incomplete batch.  Use validate_batch for untrusted input.
    """
    end = len(buf) if end is None else end
    while end - pos >= HEADER_SIZE:
        h = parse_header(buf, pos)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > end:
            return
        yield pos, h
        pos += h.size


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Rewrite baseOffset in place (outside the CRC, so the batch stays valid)."""
    _I64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _I32.pack_into(buf, pos + 12, epoch)
