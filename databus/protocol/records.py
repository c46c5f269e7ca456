"""RecordBatch v2 (Kafka's "magic 2" message format): the batch header, validation, and
(further down) the records inside a batch.

This module owns the format.  The broker uses the header half (parse_header,
validate_batch, iter_headers, set_base_offset): it stores batches opaquely, except that
appends to compacted topics check every record for a key (keyless_records, which reads only
the record and key lengths).  Clients and the
log compactor use the record half: BatchBuilder (the producer's incremental encoder),
build_batch (a whole batch at once, keeping explicit offsets), decode_records /
decode_batches (validated, decompressed, one Record per record).  Codecs live in codecs.py
and varints in varint.py; their public names are re-exported here.

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

The broker stores batches opaquely: it needs only this header, and the records' key
lengths on compacted topics.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c as _crc32c

from .codecs import (  # noqa: F401  (re-exported: the codec ids belong to the batch format)
    CODEC_BY_NAME,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NAMES,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    CodecError,
    UnsupportedCodecError,
    compress,
    decompress,
)
from .defaults import BATCH_SIZE
from .speedups import native as _native
from .varint import (
    ZIGZAG_BYTES,
    ZIGZAG_ONE_BYTE,
    ZIGZAG_TABLE_SIZE,
    ZIGZAG_TWO_BYTES,
    VarintError,
    decode_zigzag,
    encode_zigzag,
)

MAGIC_V2 = 2
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted in batchLength
CRC_START = 21

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


_ATTRIBUTES = struct.Struct(">h")


def set_log_append_time(buf: bytearray | memoryview, pos: int, header: BatchHeader,
                        now_ms: int) -> None:
    """LogAppendTime, stamped in place: ``now_ms`` becomes the batch's maxTimestamp, the
    timestamp-type bit is set and the CRC recomputed (header fields only, records untouched)."""
    _ATTRIBUTES.pack_into(buf, pos + 21, header.attributes | ATTR_TIMESTAMP_TYPE)
    _I64.pack_into(buf, pos + 35, now_ms)
    _U32.pack_into(buf, pos + 17, compute_crc(buf, pos, header.size))


# ---------------------------------------------------------------------------------------
# Records.  Inside the (possibly compressed) payload, each record is::
#
#     length           varint   bytes after this field
#     attributes       int8     unused, 0
#     timestampDelta   varlong  against baseTimestamp
#     offsetDelta      varint   against baseOffset
#     keyLength        varint   -1 = null key
#     key              bytes
#     valueLength      varint   -1 = null value (a tombstone)
#     value            bytes
#     headersCount     varint
#     headers          [keyLength varint, key UTF-8, valueLength varint (-1 = null), value]
#
# All varints are zigzag (see varint.py).  Encoding and decoding run once per record on the
# producer and consumer paths, so both loops below are written for CPython's speed: table
# lookups for the common one- and two-byte varints, bytes slicing, no per-field objects.
# ---------------------------------------------------------------------------------------

CONTROL_ABORT, CONTROL_COMMIT = 0, 1
_CONTROL_TYPE_NAMES = {CONTROL_ABORT: "ABORT", CONTROL_COMMIT: "COMMIT"}

# Bytes 0..20 (outside the CRC) and 21..60 (the CRC-covered part of the header).
_HEAD = struct.Struct(">qiibI")
_TAIL = struct.Struct(">hiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")

# Upper bound of a record's framing beyond key, value and headers: length (5), attributes
# (1), timestampDelta (10), offsetDelta (5).
MAX_RECORD_OVERHEAD = 21

_NULL = b"\x01"  # zigzag(-1)
_ZERO = b"\x00"
_INT32_MAX = 2**31 - 1


class Record(NamedTuple):
    offset: int  # absolute
    timestamp: int  # ms since the epoch, absolute
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


_tuple_new = tuple.__new__


def as_bytes(data, what: str):
    """A record's key, value or header value as bytes (or None); a TypeError names what is
    wrong with anything else.  The producer checks with it too, at send()."""
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"record {what} must be bytes or None, not {type(data).__name__}")


def _encode_headers(headers) -> bytes:
    parts = [encode_zigzag(len(headers))]
    for name, hvalue in headers:
        if not isinstance(name, str):
            raise TypeError(f"header keys must be str, not {type(name).__name__}")
        raw = name.encode("utf-8")
        parts.append(encode_zigzag(len(raw)))
        parts.append(raw)
        if hvalue is None:
            parts.append(_NULL)
        else:
            hvalue = as_bytes(hvalue, "header value")
            parts.append(encode_zigzag(len(hvalue)))
            parts.append(hvalue)
    return b"".join(parts)


def record_size_upper_bound(key, value, headers=()) -> int:
    """The most bytes this record can take encoded in a RecordBatch v2 (uncompressed, batch
    header not included), whatever its timestamp and offset delta.

    Nothing is encoded, so producers check it per record against max.request.size and
    buffer.memory before encoding: every varint is counted at its widest (5 bytes, 10 for
    the timestamp delta) and a header name at 4 bytes per character (UTF-8's most).
    """
    size = MAX_RECORD_OVERHEAD + 5  # + the header count
    size += 1 if key is None else len(key) + 5
    size += 1 if value is None else len(value) + 5
    if headers:
        for name, data in headers:
            size += 5 + 4 * len(name) + (1 if data is None else len(data) + 5)
    return size


class BatchBuilder:
    """Encodes records one at a time into a RecordBatch v2, for the producer's accumulator.

    ``append`` encodes the record immediately and answers whether it fit in ``batch_size``
    (uncompressed bytes, header included, as Kafka's ``batch.size``); the first record always
    fits, so a record larger than batch.size travels in a batch of its own.  ``build`` then
    compresses once and writes the header.  Producer id, epoch and base sequence may be set
    at any time before ``build`` (the sender assigns sequences when it drains the batch), and
    ``build`` may be called again after changing them without recompressing.
    """

    __slots__ = (
        "_base_ts",
        "_count",
        "_last_delta",
        "_max_ts",
        "_parts",
        "_payload",
        "_size",
        "_tail",
        "base_offset",
        "base_sequence",
        "batch_size",
        "codec",
        "compression_level",
        "control",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "timestamp_type",
        "transactional",
    )

    def __init__(
        self,
        *,
        codec: int = CODEC_NONE,
        batch_size: int = BATCH_SIZE,
        base_offset: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
        base_sequence: int = NO_SEQUENCE,
        partition_leader_epoch: int = -1,
        transactional: bool = False,
        control: bool = False,
        timestamp_type: int = 0,
        compression_level: int | None = None,
    ) -> None:
        if codec not in CODEC_NAMES:
            raise UnsupportedCodecError(f"unknown compression codec id {codec} (Kafka knows 0-4)")
        if timestamp_type not in (0, 1):
            raise ValueError(
                f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}"
            )
        self.codec = codec
        self.compression_level = compression_level
        self.batch_size = batch_size
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self.transactional = transactional
        self.control = control
        self.timestamp_type = timestamp_type
        self._parts: list[bytes | bytearray] = []
        self._tail: bytearray | None = None  # the C append_record's part, grown in place
        self._size = HEADER_SIZE
        self._count = 0
        self._last_delta = -1
        self._base_ts = -1
        self._max_ts = -1
        self._payload: bytes | None = None

    @property
    def uncompressed_size(self) -> int:
        """Bytes of the batch so far before compression, header included (exact)."""
        return self._size

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def last_offset_delta(self) -> int:
        """Offset delta of the last record appended (-1 while empty)."""
        return self._last_delta

    @property
    def base_timestamp(self) -> int:
        return self._base_ts

    @property
    def max_timestamp(self) -> int:
        return self._max_ts

    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool = False
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.transactional = transactional

    def append(
        self, timestamp: int, key, value, headers=(), offset_delta: int | None = None
    ) -> bool:
        """Encode one record; False (and nothing appended) when it would overflow batch_size
        or its timestamp delta would not fit a varlong.

        ``offset_delta`` defaults to one past the previous record's; an explicit one must be
        larger than the previous (offsets increase within a batch).  Key and value may be
        any bytes-like object (``append_many`` takes bytes only).
        """
        if type(timestamp) is not int:
            raise TypeError(f"record timestamp must be an int (ms), not {type(timestamp).__name__}")
        if key is not None and type(key) is not bytes:
            key = as_bytes(key, "key")
        if value is not None and type(value) is not bytes:
            value = as_bytes(value, "value")
        record = ((timestamp, key, value, headers),)
        if offset_delta is None:
            return self.append_many(record) == 1
        if not self._last_delta < offset_delta <= _INT32_MAX:
            raise ValueError(
                f"offset delta {offset_delta} must exceed the previous one ({self._last_delta}) "
                "and fit an int32"
            )
        previous, self._last_delta = self._last_delta, offset_delta - 1
        if self.append_many(record) == 1:
            return True
        self._last_delta = previous
        return False

    def _append_many_c(self, records, start: int = 0) -> int:
        # append_many when the C extension is in use (use_native binds it).  The C loop
        # encodes the run into one chunk; it stops early, handled False, at a record it
        # leaves to the Python loop (a timestamp beyond int64, a key that is not bytes,
        # headers that are not (str, bytes | None) pairs): the rules for such records live
        # only there.
        try:
            stop, size, count, od, base_ts, max_ts, chunk, handled = _native.encode_records(  # type: ignore[union-attr]
                records, start, self.batch_size, self._size, self._count, self._last_delta,
                self._base_ts, self._max_ts,
            )
        except OverflowError:  # a state beyond int64 (a first timestamp the header refuses)
            return self._append_many_py(records, start)
        if chunk is not None:
            self._parts.append(chunk)
            self._size, self._count, self._last_delta = size, count, od
            self._base_ts, self._max_ts = base_ts, max_ts
            self._payload = None
        return stop if handled else self._append_many_py(records, stop)

    def append_many(self, records, start: int = 0) -> int:
        """Encode ``records[start:]`` (``(timestamp, key, value, headers)`` tuples, payloads
        bytes or None) until one does not fit (``batch_size``, or a timestamp delta beyond a
        varlong); returns the index of the first not appended (``len(records)`` when all
        were).  The one encoder: ``append`` is a run of one, and the producer's and the
        sidecar's bulk paths append whole runs in this single loop.  (With the C extension
        this name is bound to ``_append_many_c``, which falls back to this loop.)"""
        zz = ZIGZAG_BYTES
        limit = ZIGZAG_TABLE_SIZE
        parts = self._parts
        batch_size = self.batch_size
        size = self._size
        count = self._count
        od = self._last_delta
        base_ts, max_ts = self._base_ts, self._max_ts
        end = len(records)
        i = start
        while i < end:
            timestamp, key, value, headers = records[i]
            if count:
                if type(timestamp) is not int:
                    break  # append() raises the TypeError
                tsd = timestamp - base_ts
                if not -(2**63) <= tsd < 2**63:
                    break
            else:
                if type(timestamp) is not int:
                    break
                tsd = 0
            od += 1
            tsb = zz[tsd] if 0 <= tsd < limit else encode_zigzag(tsd)
            odb = zz[od] if od < limit else encode_zigzag(od)
            if key is None:
                kb, key = _NULL, b""
            else:
                n = len(key)
                kb = zz[n] if n < limit else encode_zigzag(n)
            if value is None:
                vb, value = _NULL, b""
            else:
                n = len(value)
                vb = zz[n] if n < limit else encode_zigzag(n)
            hb = _encode_headers(headers) if headers else _ZERO
            body = 1 + len(tsb) + len(odb) + len(kb) + len(key) + len(vb) + len(value) + len(hb)
            lb = zz[body] if body < limit else encode_zigzag(body)
            record_size = len(lb) + body
            if count:
                if size + record_size > batch_size:
                    od -= 1
                    break
                if timestamp > max_ts:
                    max_ts = timestamp
            else:
                base_ts = max_ts = timestamp
            parts += (lb, _ZERO, tsb, odb, kb, key, vb, value, hb)
            size += record_size
            count += 1
            i += 1
        if i > start:
            self._size, self._count, self._last_delta = size, count, od
            self._base_ts, self._max_ts = base_ts, max_ts
            self._payload = None
        if i < end and not count and type(records[i][0]) is not int:
            self.append(*records[i])  # raises the TypeError naming the problem
        return i

    _append_many_py = append_many  # the pure-Python loop, whichever append_many is bound

    def append_columns(self, buffers: list, row: int, stop: int, header_key: str,
                       prefix: bytes, skip_prefix: bytes) -> int:
        """Encode rows ``row..stop`` of column buffers (``columns.ColumnBuffers.buffers``) as
        records with one more header, ``header_key`` = ``prefix`` + the row's offset in
        decimal (the mirror's provenance), passing over rows that already carry
        ``header_key`` with a value starting with ``skip_prefix`` (the loop check), until
        one does not fit; returns the first row not taken (``stop`` when all were).  The
        mirror's copy: records go from the fetched columns to the target's batch with no
        Python object per record (C: ``_speedups.mirror_columns``; ``_append_columns_py``
        is its twin, held equal by tests/protocol/test_mirror_columns.py)."""
        mirror_columns = getattr(_native, "mirror_columns", None)  # None: an older build
        if mirror_columns is None:
            return self._append_columns_py(buffers, row, stop, header_key, prefix, skip_prefix)
        try:
            stop, size, count, od, base_ts, max_ts, chunk = mirror_columns(
                buffers, row, stop, self.batch_size, self._size, self._count, self._last_delta,
                self._base_ts, self._max_ts, header_key.encode(), prefix, skip_prefix)
        except OverflowError:  # a builder state beyond int64
            return self._append_columns_py(buffers, row, stop, header_key, prefix, skip_prefix)
        if chunk is not None:
            self._parts.append(chunk)
            self._size, self._count, self._last_delta = size, count, od
            self._base_ts, self._max_ts = base_ts, max_ts
            self._payload = None
        return stop

    def _append_columns_py(self, buffers, row, stop, header_key, prefix, skip_prefix) -> int:
        from .columns import ColumnBuffers, RecordColumns  # columns imports this module

        columns = ColumnBuffers.__new__(ColumnBuffers)
        columns.buffers = buffers
        view = RecordColumns("", 0, columns)
        offsets, timestamps = view.offsets, view.timestamps
        for i in range(row, stop):
            headers = view.headers(i)
            if _came_from(headers, header_key, skip_prefix):
                continue
            record = (timestamps[i], view.key(i), view.value(i),
                      (*headers, (header_key, prefix + str(offsets[i]).encode())))
            if self._append_many_py((record,)) != 1:
                return i
        return stop

    def build(self, last_offset_delta: int | None = None) -> bytes:
        """The finished batch.  ``last_offset_delta`` overrides the last record's (the
        compactor keeps a batch's original lastOffsetDelta when it drops trailing records)."""
        payload = self._payload
        if payload is None:
            payload = b"".join(self._parts)
            if self.codec != CODEC_NONE:
                payload = compress(self.codec, payload, self.compression_level)
            self._payload = payload
        if last_offset_delta is None:
            last_offset_delta = max(self._last_delta, 0)
        elif not self._last_delta <= last_offset_delta <= _INT32_MAX:
            raise ValueError(
                f"last_offset_delta {last_offset_delta} is below the last record's offset "
                f"delta {self._last_delta}"
            )
        attributes = self.codec
        if self.timestamp_type:
            attributes |= ATTR_TIMESTAMP_TYPE
        if self.transactional:
            attributes |= ATTR_TRANSACTIONAL
        if self.control:
            attributes |= ATTR_CONTROL
        tail = _TAIL.pack(
            attributes,
            last_offset_delta,
            self._base_ts,
            self._max_ts,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self._count,
        )
        crc = _crc32c.crc32c(payload, _crc32c.crc32c(tail))
        head = _HEAD.pack(
            self.base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(payload),
            self.partition_leader_epoch,
            MAGIC_V2,
            crc,
        )
        return b"".join((head, tail, payload))


def _came_from(headers, header_key: str, value_prefix: bytes) -> bool:
    return any(k == header_key and v is not None and v.startswith(value_prefix)
               for k, v in headers)


def scan_columns(buffers: list, row: int, stop: int, header_key: str, skip_prefix: bytes,
                 prefix_len: int, limit: int) -> tuple[list[int], int, int]:
    """Before ``BatchBuilder.append_columns``: the rows of ``row..stop`` it will pass over
    (the loop check), and the first other row whose record, with a ``header_key`` header of
    ``prefix_len`` bytes plus its offset in decimal, is larger than ``limit`` (key, value
    and header bytes + 64, the mirror's estimate; -1 when none), with that size."""
    native_scan = getattr(_native, "scan_columns", None)  # None: an older build
    if native_scan is not None:
        return native_scan(buffers, row, stop, header_key.encode(), skip_prefix, prefix_len,
                           limit)
    from .columns import ColumnBuffers, RecordColumns

    columns = ColumnBuffers.__new__(ColumnBuffers)
    columns.buffers = buffers
    view = RecordColumns("", 0, columns)
    skipped = []
    extra = len(header_key.encode()) + prefix_len
    for i in range(row, stop):
        headers = view.headers(i)
        if _came_from(headers, header_key, skip_prefix):
            skipped.append(i)
            continue
        key, value = view.key(i), view.value(i)
        size = (len(key) if key else 0) + (len(value) if value else 0) + extra
        size += len(str(view.offsets[i]))
        size += sum(len(k.encode()) + (len(v) if v else 0) for k, v in headers)
        if size + 64 > limit:
            return skipped, i, size
    return skipped, -1, 0


def _record_fields(item):
    """(offset or None, timestamp, key, value, headers) of a Record-like object or tuple."""
    if type(item) is Record:
        return item
    if isinstance(item, tuple) and not hasattr(item, "_fields"):
        if len(item) == 4:
            key, value, headers, timestamp = item
            return None, timestamp, key, value, headers
        if len(item) == 5:
            key, value, headers, timestamp, offset = item
            return offset, timestamp, key, value, headers
        raise ValueError(
            f"record tuples are (key, value, headers, timestamp[, offset]), got {len(item)} items"
        )
    try:
        return item.offset, item.timestamp, item.key, item.value, tuple(item.headers or ())
    except AttributeError:
        raise TypeError(
            f"cannot take a record from {type(item).__name__}: need offset, timestamp, key, "
            "value and headers, or a (key, value, headers, timestamp[, offset]) tuple"
        ) from None


def build_batch(
    records,
    *,
    base_offset: int = 0,
    codec: int = CODEC_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = -1,
    transactional: bool = False,
    control: bool = False,
    timestamp_type: int = 0,
    last_offset_delta: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode ``records`` as one RecordBatch v2 (no size limit).

    ``records``: Record-like objects (offset, timestamp, key, value, headers) or
    ``(key, value, headers, timestamp[, offset])`` tuples.  A record's offset None means
    one past the previous record's (base_offset + its index when no record has an explicit
    offset); an explicit absolute offset keeps its delta from base_offset,
    so a compacted batch keeps its records' original offsets.  An empty batch (allowed after
    compaction) has timestamps -1 and lastOffsetDelta 0 unless given.
    """
    builder = BatchBuilder(
        codec=codec,
        batch_size=2**62,  # build_batch has no size limit
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        transactional=transactional,
        control=control,
        timestamp_type=timestamp_type,
        compression_level=compression_level,
    )
    append = builder.append
    for item in records:
        offset, timestamp, key, value, headers = _record_fields(item)
        delta = None if offset is None else offset - base_offset
        # With no size limit the only refusal left is a timestamp too far from the batch's
        # first one for a varlong delta: that record cannot share this batch.
        if not append(timestamp, key, value, headers, delta):
            raise ValueError(
                f"record timestamp {timestamp} is too far from the batch's first timestamp "
                "for a RecordBatch v2 timestamp delta"
            )
    return builder.build(last_offset_delta)


def rebuild_batch(h: BatchHeader, records, *, codec: int | None = None,
                  compression_level: int | None = None) -> bytes:
    """``records`` (a subset of the batch's, or all of them) encoded as a batch with the
    header ``h``'s identity: base offset, producer id, epoch and base sequence, leader epoch,
    transactional and timestamp-type bits, lastOffsetDelta; in ``codec`` (default h's).
    The compactor drops records with it, the broker's topic-level compression.type changes
    the codec with it."""
    return build_batch(
        records, base_offset=h.base_offset, codec=h.codec if codec is None else codec,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence, partition_leader_epoch=h.partition_leader_epoch,
        transactional=h.is_transactional, control=h.is_control,
        timestamp_type=h.timestamp_type, last_offset_delta=h.last_offset_delta,
        compression_level=compression_level,
    )


def recompress_batch(buf, pos: int, codec: int, compression_level: int | None = None) -> bytes:
    """The batch at ``pos`` with its records compressed by ``codec`` instead (Kafka's
    LogValidator when a topic's compression.type differs from the producer's codec)."""
    h, records = decode_records(buf, pos, verify_crc=False)
    return rebuild_batch(h, records, codec=codec, compression_level=compression_level)


def _corrupt(batch_pos: int, detail: str) -> CorruptRecordError:
    return CorruptRecordError(f"batch at byte {batch_pos}: {detail}")


def _decode_payload_py(data: bytes, h: BatchHeader, batch_pos: int) -> list[Record]:
    # Each varint read is inlined (one-byte and two-byte forms, then the general decoder):
    # a function call per field would double the cost of decoding a record.
    one = ZIGZAG_ONE_BYTE
    two = ZIGZAG_TWO_BYTES
    slow = decode_zigzag
    new = _tuple_new
    record_cls = Record
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    log_append_ts = h.max_timestamp if h.attributes & ATTR_TIMESTAMP_TYPE else None
    end = len(data)
    pos = 0
    out: list[Record] = []
    append = out.append
    for index in range(h.records_count):
        b = data[pos]
        if b < 0x80:
            length = one[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            length = two[(data[pos + 1] << 7) | (b & 0x7F)]
            pos += 2
        else:
            length, pos = slow(data, pos)
        record_end = pos + length
        if length < 6 or record_end > end:
            raise _corrupt(batch_pos, f"record {index} has invalid length {length}")
        pos += 1  # attributes: unused
        b = data[pos]
        if b < 0x80:
            tsd = one[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            tsd = two[(data[pos + 1] << 7) | (b & 0x7F)]
            pos += 2
        else:
            tsd, pos = slow(data, pos)
        b = data[pos]
        if b < 0x80:
            od = one[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            od = two[(data[pos + 1] << 7) | (b & 0x7F)]
            pos += 2
        else:
            od, pos = slow(data, pos)
        b = data[pos]
        if b == 1:
            key = None
            pos += 1
        else:
            if b < 0x80:
                n = one[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                n = two[(data[pos + 1] << 7) | (b & 0x7F)]
                pos += 2
            else:
                n, pos = slow(data, pos)
            if n < 0:
                raise _corrupt(batch_pos, f"record {index} has key length {n}")
            key = data[pos : pos + n]
            pos += n
        b = data[pos]
        if b == 1:
            value = None
            pos += 1
        else:
            if b < 0x80:
                n = one[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                n = two[(data[pos + 1] << 7) | (b & 0x7F)]
                pos += 2
            else:
                n, pos = slow(data, pos)
            if n < 0:
                raise _corrupt(batch_pos, f"record {index} has value length {n}")
            value = data[pos : pos + n]
            pos += n
        if data[pos] == 0:
            headers = ()
            pos += 1
        else:
            headers, pos = _decode_headers(data, pos, batch_pos, index)
        if pos != record_end:
            raise _corrupt(
                batch_pos,
                f"record {index} declares {length} bytes but its fields take "
                f"{length + pos - record_end}",
            )
        append(
            new(
                record_cls,
                (
                    base_offset + od,
                    base_ts + tsd if log_append_ts is None else log_append_ts,
                    key,
                    value,
                    headers,
                ),
            )
        )
    if pos != end:
        raise _corrupt(batch_pos, f"{end - pos} bytes left after its {h.records_count} records")
    return out


def _decode_headers(data: bytes, pos: int, batch_pos: int, index: int):
    count, pos = decode_zigzag(data, pos)
    if count < 0:
        raise _corrupt(batch_pos, f"record {index} has header count {count}")
    headers = []
    for _ in range(count):
        n, pos = decode_zigzag(data, pos)
        if n < 0:
            raise _corrupt(batch_pos, f"record {index} has a header key of length {n}")
        if pos + n > len(data):
            raise _corrupt(batch_pos, f"record {index} has a header key past the batch end")
        try:
            name = data[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError:
            raise _corrupt(
                batch_pos, f"record {index} has a header key that is not UTF-8"
            ) from None
        pos += n
        n, pos = decode_zigzag(data, pos)
        if n >= 0:
            hvalue = data[pos : pos + n]
            pos += n
        elif n == -1:
            hvalue = None
        else:
            raise _corrupt(batch_pos, f"record {index} has a header value of length {n}")
        headers.append((name, hvalue))
    return tuple(headers), pos


def decode_records(
    buf, pos: int = 0, *, verify_crc: bool = True, max_decompressed: int | None = None
) -> tuple[BatchHeader, list[Record]]:
    """Decode the batch at ``pos``: its header and all its records, decompressed.

    The batch is validated first (length, magic and, unless ``verify_crc`` is False,
    CRC-32C); any malformation, including a payload its codec cannot decompress, raises
    CorruptRecordError naming the batch position and the problem.  Records of a
    LogAppendTime batch carry the batch's maxTimestamp, as Kafka's consumers report.
    ``max_decompressed`` bounds what a compressed payload may inflate to (codecs.py); a
    bigger one is a CorruptRecordError caused by DecompressedTooLargeError.
    """
    return _decode_batch(buf, pos, verify_crc, _decode_payload, max_decompressed)


def decode_records_at(
    buf, pos: int, offsets, *, verify_crc: bool = True, max_decompressed: int | None = None
) -> tuple[BatchHeader, list[Record]]:
    """Like ``decode_records``, but only the records whose offset is in ``offsets`` (a set)
    are decoded; the others are stepped over by their length (a lookup by offset in a big
    batch costs a varint or two per record, not a whole decode)."""
    return _decode_batch(buf, pos, verify_crc,
                         lambda data, h, batch_pos: _payload_at(data, h, batch_pos, offsets),
                         max_decompressed)


def _payload_at(data: bytes, h: BatchHeader, batch_pos: int, offsets) -> list[Record]:
    # The varint reads are inlined as in _decode_payload: this loop steps over every record
    # of a batch (thousands, in librdkafka's) to find one.
    one = ZIGZAG_ONE_BYTE
    two = ZIGZAG_TWO_BYTES
    one_record = h._replace(records_count=1)  # the base offset and timestamp stay
    wanted = {o - h.base_offset for o in offsets}
    end = len(data)
    pos = 0
    out: list[Record] = []
    for index in range(h.records_count):
        b = data[pos]
        if b < 0x80:
            length = one[b]
            start = pos + 1
        elif data[pos + 1] < 0x80:
            length = two[(data[pos + 1] << 7) | (b & 0x7F)]
            start = pos + 2
        else:
            length, start = decode_zigzag(data, pos)
        record_end = start + length
        if length < 6 or record_end > end:
            raise _corrupt(batch_pos, f"record {index} has invalid length {length}")
        at = start + 2  # after the attributes and the timestamp delta's first byte
        while data[at - 1] & 0x80:
            at += 1
        b = data[at]
        if b < 0x80:
            delta = one[b]
        elif data[at + 1] < 0x80:
            delta = two[(data[at + 1] << 7) | (b & 0x7F)]
        else:
            delta = decode_zigzag(data, at)[0]
        if delta in wanted:
            out += _decode_payload(data[pos:record_end], one_record, batch_pos)
        pos = record_end
    if pos != end:
        raise _corrupt(batch_pos, f"{end - pos} bytes left after its {h.records_count} records")
    return out
def _log_append_ts(h: BatchHeader) -> int | None:
    return h.max_timestamp if h.attributes & ATTR_TIMESTAMP_TYPE else None


def _decode_payload(data: bytes, h: BatchHeader, batch_pos: int) -> list[Record]:
    # _native is read per batch (not bound once) so that tests can run both implementations
    if _native is None:
        return _decode_payload_py(data, h, batch_pos)
    return _native.decode_records(
        data, h.base_offset, h.base_timestamp, _log_append_ts(h), h.records_count, batch_pos
    )


def decode_consumer_records(
    buf, pos: int, cls: type, topic: str, partition: int, min_offset: int, *,
    verify_crc: bool = True, max_decompressed: int | None = None,
) -> tuple[BatchHeader, list]:
    """The batch at ``pos`` as the consumer hands it out: its records at or after
    ``min_offset`` (all of a batch whose base offset is) as ``cls(topic, partition, offset, timestamp, timestamp_type, key, value,
    headers)`` tuples (``cls`` a tuple subclass, built without calling its ``__new__``).

    Checked and decompressed as ``decode_records``, with the same errors; one object per
    record instead of a Record and then the consumer's own.
    """
    def payload(data: bytes, h: BatchHeader, batch_pos: int) -> list:
        if _native is not None:
            return _native.decode_consumer(
                data, h.base_offset, h.base_timestamp, _log_append_ts(h), h.records_count,
                batch_pos, cls, topic, partition, h.timestamp_type,
                None if h.base_offset >= min_offset else min_offset,
            )
        ts_type = h.timestamp_type
        new = _tuple_new
        records = _decode_payload_py(data, h, batch_pos)
        if h.base_offset >= min_offset:  # all of them: no test per record
            return [new(cls, (topic, partition, r[0], r[1], ts_type, r[2], r[3], r[4]))
                    for r in records]
        return [
            new(cls, (topic, partition, r[0], r[1], ts_type, r[2], r[3], r[4]))
            for r in records if r[0] >= min_offset
        ]

    return _decode_batch(buf, pos, verify_crc, payload, max_decompressed)


def decode_columns(
    buf, pos: int, lo: int, hi: int, columns: tuple[list, list, list, list, list], *,
    verify_crc: bool = True,
) -> tuple[BatchHeader, int]:
    """Append the records of the batch at ``pos`` with ``lo <= offset < hi``, field by field,
    to ``columns`` (offsets, timestamps, keys, values, headers lists): records straight to
    the column lists an Arrow table is built from, with no object per record.

    Returns the header and how many records were appended.  Checked and decompressed as
    ``decode_records``, with the same errors; after an error the lists are as they were.
    """
    sizes = [len(column) for column in columns]

    def payload(data: bytes, h: BatchHeader, batch_pos: int) -> None:
        if _native is not None:
            _native.decode_columns(
                data, h.base_offset, h.base_timestamp, _log_append_ts(h), h.records_count,
                batch_pos, lo, hi, *columns,
            )
            return
        records = [r for r in _decode_payload_py(data, h, batch_pos) if lo <= r[0] < hi]
        if records:
            for column, values in zip(columns, zip(*records)):
                column += values

    try:
        h, _ = _decode_batch(buf, pos, verify_crc, payload)
    except BaseException:
        for column, size in zip(columns, sizes):
            del column[size:]
        raise
    return h, len(columns[0]) - sizes[0]


def keyless_records(buf, pos: int = 0, *, verify_crc: bool = True) -> list[int]:
    """The indexes (in the batch) of the records without a key in the batch at ``pos``.

    Checked and decompressed like ``decode_records``, but only each record's length and key
    length are read (the record check of compacted topics, on the broker's append path).
    """
    return _decode_batch(buf, pos, verify_crc, _keyless_in_payload)[1]


def _keyless_in_payload(data: bytes, h: BatchHeader, batch_pos: int) -> list[int]:
    # The varint reads are inlined as in _decode_payload (this runs on every append to a
    # compacted topic); the two deltas are skipped, not decoded.
    one = ZIGZAG_ONE_BYTE
    two = ZIGZAG_TWO_BYTES
    end = len(data)
    pos = 0
    keyless = []
    for index in range(h.records_count):
        b = data[pos]
        if b < 0x80:
            length = one[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            length = two[(data[pos + 1] << 7) | (b & 0x7F)]
            pos += 2
        else:
            length, pos = decode_zigzag(data, pos)
        record_end = pos + length
        if length < 6 or record_end > end:
            raise _corrupt(batch_pos, f"record {index} has invalid length {length}")
        pos += 2  # attributes, and the timestamp delta's first byte
        while data[pos - 1] & 0x80:  # the rest of the timestamp delta
            pos += 1
        pos += 1  # the offset delta's first byte
        while data[pos - 1] & 0x80:
            pos += 1
        if data[pos] == 1:  # key length -1 (zigzag 1): null key
            keyless.append(index)
        pos = record_end
    if pos != end:
        raise _corrupt(batch_pos, f"{end - pos} bytes left after its {h.records_count} records")
    return keyless


def _decode_batch(buf, pos: int, verify_crc: bool, decode_payload, max_decompressed=None):
    if verify_crc:
        h = validate_batch(buf, pos)
    else:
        h = parse_header(buf, pos)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > len(buf):
            raise _corrupt(
                pos, f"length {h.batch_length} does not fit the {len(buf) - pos} bytes left"
            )
        if h.magic != MAGIC_V2:
            raise _corrupt(pos, f"magic {h.magic}, only 2 is supported")
        if h.records_count < 0:
            raise _corrupt(pos, f"negative record count {h.records_count}")
    data = buf[pos + HEADER_SIZE : pos + h.size]
    if type(data) is not bytes:
        data = bytes(data)
    try:
        codec = h.attributes & ATTR_CODEC_MASK
        if codec:
            data = decompress(codec, data, max_decompressed)
        return h, decode_payload(data, h, pos)
    except CorruptRecordError:
        raise
    except CodecError as exc:
        raise _corrupt(pos, str(exc)) from exc
    except IndexError:
        raise _corrupt(pos, "a record runs past the end of the batch") from None
    except ValueError as exc:  # varints longer than 64 bits
        raise _corrupt(pos, str(exc)) from exc


def decode_batches(
    buf, pos: int = 0, end: int | None = None
) -> list[tuple[BatchHeader, list[Record]]]:
    """Decode every complete batch in buf[pos:end] (a fetch response's records field).

    A trailing partial batch is ignored, as Kafka's consumers do (the broker may cut the
    last batch at the fetch size); a complete but corrupt batch raises CorruptRecordError.
    """
    end = len(buf) if end is None else end
    view = buf if end == len(buf) else memoryview(buf)[:end]
    out = []
    for batch_pos, _h in iter_headers(view, pos, end):
        out.append(decode_records(view, batch_pos))
    return out


def control_record_type(key: bytes | None) -> int:
    """CONTROL_ABORT or CONTROL_COMMIT from a control record's key (version, type int16s)."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError("control record key must hold a version and a type (4 bytes)")
    _version, kind = _CONTROL_KEY.unpack_from(key)
    return kind


def control_type_name(kind: int) -> str:
    return _CONTROL_TYPE_NAMES.get(kind, f"UNKNOWN({kind})")


_CONTROL_VALUE = struct.Struct(">hi")  # EndTransactionMarker: version, coordinator epoch


def control_coordinator_epoch(value: bytes | None) -> int | None:
    """The coordinator epoch of a transaction marker's value; None when the value is too
    short to hold one."""
    if value is None or len(value) < _CONTROL_VALUE.size:
        return None
    return _CONTROL_VALUE.unpack_from(value)[1]


def build_control_batch(producer_id: int, producer_epoch: int, kind: int, *,
                        coordinator_epoch: int = 0, timestamp: int = 0) -> bytes:
    """A transaction marker (Kafka's EndTransactionMarker): one control record, transactional
    and control bits set, key = (version 0, type), value = (version 0, coordinator epoch)."""
    key = _CONTROL_KEY.pack(0, kind)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return build_batch([(key, value, (), timestamp)], producer_id=producer_id,
                       producer_epoch=producer_epoch, transactional=True, control=True)


def control_batch_type(buf, pos: int = 0) -> int:
    """CONTROL_ABORT or CONTROL_COMMIT of the (valid) control batch at ``pos``: the type of
    its first record.  Markers are never compressed, so this is one small decode."""
    _header, records = decode_records(buf, pos, verify_crc=False)
    if not records:
        raise CorruptRecordError(f"control batch at byte {pos} has no record")
    return control_record_type(records[0].key)
def _append_record_py(builder: BatchBuilder, timestamp: int, key: bytes | None,
                      value: bytes | None, headers=()) -> int:
    """Encode one record into ``builder`` (Producer.send's path, once per record): its new
    record count, or 0 when the record does not fit (as ``append_many``, whose loop this is;
    the C twin, bound as ``append_record`` with the extension, writes into the builder's
    slots in place and hands inputs it does not handle to this function)."""
    return builder._count if builder._append_many_py(((timestamp, key, value, headers),)) else 0


append_record = _append_record_py


def use_native(module) -> None:
    """Run the record kernels on ``module`` (the C extension, speedups.native) or on the
    pure-Python code (None).  Chosen once at import; tests call it to run both."""
    global _native, append_record
    _native = module
    if module is not None:
        module.configure(Record, CorruptRecordError, VarintError)
        module.configure_builder(BatchBuilder, _append_record_py)
    append_record = _append_record_py if module is None else module.append_record
    # bound on the class: no per-call test of which implementation runs
    BatchBuilder.append_many = (  # type: ignore[method-assign]
        BatchBuilder._append_many_py if module is None else BatchBuilder._append_many_c
    )


use_native(_native)
