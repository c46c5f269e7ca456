"""Record batches decoded straight into column buffers: no Python object per record.

``ColumnBuffers`` holds one partition's records as Arrow's buffers: offsets and timestamps
(int64), keys and values (binary: int32 end offsets, data, validity bitmap) and headers
(list<struct<key: string, value: binary>>: list offsets, then the entries' keys and values).
``append_batch`` decodes a RecordBatch's records into them (``_speedups.decode_buffers`` in
C; the pure-Python twin fills the same bytes from ``records._decode_payload``'s records,
and the tests hold the two equal).

``RecordColumns`` is the view handed to applications (Consumer.getmany_columns): rows
``start..start+len`` of a ColumnBuffers, with ``to_arrow()`` (a ``pyarrow.RecordBatch`` over
the same memory, when pyarrow is installed) and plain accessors when it is not.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from . import records as _records
from .records import BatchHeader

# the buffers, in _speedups.c's order (B_*)
(OFFSET, TIMESTAMP, KEY_OFFSETS, KEY_DATA, KEY_VALID, VALUE_OFFSETS, VALUE_DATA, VALUE_VALID,
 HEADER_OFFSETS, HKEY_OFFSETS, HKEY_DATA, HVALUE_OFFSETS, HVALUE_DATA, HVALUE_VALID) = range(14)
_OFFSET_ARRAYS = (KEY_OFFSETS, VALUE_OFFSETS, HEADER_OFFSETS, HKEY_OFFSETS, HVALUE_OFFSETS)
_I64 = struct.Struct("<q")
_I32 = struct.Struct("<i")
_ZERO32 = _I32.pack(0)


class ColumnBuffers:
    """One partition's records as column buffers (bytearrays, appended to)."""

    __slots__ = ("buffers",)

    def __init__(self) -> None:
        self.buffers = [bytearray() for _ in range(14)]
        for i in _OFFSET_ARRAYS:
            self.buffers[i] += _ZERO32

    def __len__(self) -> int:
        return len(self.buffers[OFFSET]) // 8

    @property
    def header_entries(self) -> int:
        return len(self.buffers[HKEY_OFFSETS]) // 4 - 1

    def _sizes(self) -> list[int]:
        return [len(b) for b in self.buffers]

    def _restore(self, sizes: list[int], rows: int, entries: int) -> None:
        """Back to ``sizes``; the bits of later rows/entries in a shared last byte cleared."""
        for b, size in zip(self.buffers, sizes):
            del b[size:]
        for i, bit in ((KEY_VALID, rows), (VALUE_VALID, rows), (HVALUE_VALID, entries)):
            if bit & 7 and bit >> 3 < len(self.buffers[i]):
                self.buffers[i][bit >> 3] &= (1 << (bit & 7)) - 1

    def append_batch(self, buf, pos: int, lo: int, hi: int, *, verify_crc: bool = True,
                     max_decompressed: int | None = None) -> tuple[BatchHeader, int]:
        """Decode the batch at ``pos`` and append its records with ``lo <= offset < hi``:
        its header and how many were appended.  Checked and decompressed as
        ``records.decode_records``, with the same errors; after one, the buffers are as
        they were."""
        sizes, rows, entries = self._sizes(), len(self), self.header_entries

        def payload(data: bytes, h: BatchHeader, batch_pos: int) -> int:
            native = _records._native  # read per batch: tests run both implementations
            if native is not None:
                return native.decode_buffers(
                    data, h.base_offset, h.base_timestamp, _records._log_append_ts(h),
                    h.records_count, batch_pos, lo, hi, self.buffers)
            return self._append_py(_records._decode_payload_py(data, h, batch_pos), lo, hi)

        try:
            return _records._decode_batch(buf, pos, verify_crc, payload, max_decompressed)
        except BaseException:
            self._restore(sizes, rows, entries)
            raise

    def _append_py(self, records, lo: int, hi: int) -> int:
        """decode_buffers' twin: the same bytes from decoded Record tuples."""
        b = self.buffers
        appended = 0
        for offset, timestamp, key, value, headers in records:
            if not lo <= offset < hi:
                continue
            row = len(b[OFFSET]) // 8
            for field, offsets, data, valid in ((key, KEY_OFFSETS, KEY_DATA, KEY_VALID),
                                                (value, VALUE_OFFSETS, VALUE_DATA, VALUE_VALID)):
                _set_bit(b[valid], row, field is not None)
                if field is not None:
                    b[data] += field
                b[offsets] += _I32.pack(len(b[data]))
            for name, hvalue in headers:
                b[HKEY_DATA] += name.encode()
                b[HKEY_OFFSETS] += _I32.pack(len(b[HKEY_DATA]))
                _set_bit(b[HVALUE_VALID], len(b[HVALUE_OFFSETS]) // 4 - 1, hvalue is not None)
                if hvalue is not None:
                    b[HVALUE_DATA] += hvalue
                b[HVALUE_OFFSETS] += _I32.pack(len(b[HVALUE_DATA]))
            b[OFFSET] += _I64.pack(offset)
            b[TIMESTAMP] += _I64.pack(timestamp)
            b[HEADER_OFFSETS] += _I32.pack(len(b[HKEY_OFFSETS]) // 4 - 1)
            appended += 1
        return appended


def _set_bit(bitmap: bytearray, index: int, valid: bool) -> None:
    if index & 7 == 0:
        bitmap.append(0)
    if valid:
        bitmap[index >> 3] |= 1 << (index & 7)


class RecordColumns:
    """Rows ``start..start+len`` of one partition's ColumnBuffers: what
    ``Consumer.getmany_columns()`` hands out per partition.

    ``to_arrow()``: a ``pyarrow.RecordBatch`` (topic, partition, offset, timestamp, key,
    value, headers) over the same memory.  Without pyarrow: ``offsets`` and ``timestamps``
    (int64 memoryviews), ``key(i)``, ``value(i)``, ``headers(i)``, ``rows()``."""

    __slots__ = ("topic", "partition", "_columns", "_start", "_length")

    def __init__(self, topic: str, partition: int, columns: ColumnBuffers, start: int = 0,
                 length: int | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self._columns = columns
        self._start = start
        self._length = len(columns) - start if length is None else length

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        first = self.offsets[0] if self._length else None
        return (f"RecordColumns({self.topic!r}, {self.partition}, {self._length} records"
                f"{'' if first is None else f' from offset {first}'})")

    def slice(self, start: int, stop: int) -> RecordColumns:
        """Rows ``start..stop`` of this view (no copy)."""
        start = max(0, min(start, self._length))
        stop = max(start, min(stop, self._length))
        return RecordColumns(self.topic, self.partition, self._columns, self._start + start,
                             stop - start)

    @property
    def buffers(self) -> list[bytearray]:
        """The underlying ColumnBuffers' buffers (shared by every view of them); this view's
        rows are ``row_range`` of them (Producer.send_columns takes both)."""
        return self._columns.buffers

    @property
    def row_range(self) -> tuple[int, int]:
        return self._start, self._start + self._length

    def _int64(self, index: int) -> memoryview:
        view = memoryview(self._columns.buffers[index]).cast("q")
        return view[self._start : self._start + self._length]

    @property
    def offsets(self) -> memoryview:
        return self._int64(OFFSET)

    @property
    def timestamps(self) -> memoryview:
        return self._int64(TIMESTAMP)

    def _binary(self, row: int, offsets: int, data: int, valid: int) -> bytes | None:
        b = self._columns.buffers
        if not b[valid][row >> 3] >> (row & 7) & 1:
            return None
        start, end = struct.unpack_from("<ii", b[offsets], row * 4)
        return bytes(b[data][start:end])

    def key(self, i: int) -> bytes | None:
        return self._binary(self._start + i, KEY_OFFSETS, KEY_DATA, KEY_VALID)

    def value(self, i: int) -> bytes | None:
        return self._binary(self._start + i, VALUE_OFFSETS, VALUE_DATA, VALUE_VALID)

    def headers(self, i: int) -> tuple[tuple[str, bytes | None], ...]:
        b = self._columns.buffers
        first, last = struct.unpack_from("<ii", b[HEADER_OFFSETS], (self._start + i) * 4)
        out = []
        for e in range(first, last):
            k0, k1 = struct.unpack_from("<ii", b[HKEY_OFFSETS], e * 4)
            out.append((bytes(b[HKEY_DATA][k0:k1]).decode(),
                        self._binary(e, HVALUE_OFFSETS, HVALUE_DATA, HVALUE_VALID)))
        return tuple(out)

    def rows(self) -> Iterator[tuple[int, int, bytes | None, bytes | None, tuple]]:
        """(offset, timestamp, key, value, headers) per record: the slow way out, one tuple
        per record (for code that wants records after all)."""
        offsets, timestamps = self.offsets, self.timestamps
        for i in range(self._length):
            yield offsets[i], timestamps[i], self.key(i), self.value(i), self.headers(i)

    def to_arrow(self):
        """A ``pyarrow.RecordBatch`` over these rows, sharing the buffers' memory."""
        import pyarrow as pa

        b = [pa.py_buffer(buf) for buf in self._columns.buffers]
        n, start = self._length, self._start
        entries = self._columns.header_entries
        names = pa.Array.from_buffers(pa.string(), entries, [None, b[HKEY_OFFSETS], b[HKEY_DATA]])
        hvalues = pa.Array.from_buffers(pa.binary(), entries,
                                        [b[HVALUE_VALID], b[HVALUE_OFFSETS], b[HVALUE_DATA]])
        entry_type = pa.struct([("key", pa.string()), ("value", pa.binary())])
        entry = pa.StructArray.from_arrays([names, hvalues], fields=list(entry_type))
        all_rows = len(self._columns)
        headers = pa.ListArray.from_buffers(pa.list_(entry_type), all_rows,
                                            [None, b[HEADER_OFFSETS]], children=[entry])
        return pa.RecordBatch.from_arrays([
            pa.DictionaryArray.from_arrays(  # the topic: index 0 of a one-entry dictionary
                pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(bytes(4 * n))]),
                pa.array([self.topic])),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(_I32.pack(self.partition) * n)]),
            pa.Array.from_buffers(pa.int64(), n, [None, b[OFFSET]], offset=start),
            pa.Array.from_buffers(pa.int64(), n, [None, b[TIMESTAMP]], offset=start),
            pa.Array.from_buffers(pa.binary(), n, [b[KEY_VALID], b[KEY_OFFSETS], b[KEY_DATA]],
                                  offset=start),
            pa.Array.from_buffers(pa.binary(), n,
                                  [b[VALUE_VALID], b[VALUE_OFFSETS], b[VALUE_DATA]], offset=start),
            headers.slice(start, n),
        ], names=list(ARROW_COLUMNS))


ARROW_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")


def arrow_table(batches):
    """One ``pyarrow.Table`` of many RecordColumns (e.g. getmany_columns().values()),
    without copying their buffers."""
    import pyarrow as pa

    arrow = [c.to_arrow() for c in batches if len(c)]
    if not arrow:
        return pa.Table.from_batches([], schema=arrow_schema())
    return pa.Table.from_batches(arrow, schema=arrow[0].schema)


def arrow_schema():
    import pyarrow as pa

    entry = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.schema([("topic", pa.dictionary(pa.int32(), pa.string())), ("partition", pa.int32()),
                      ("offset", pa.int64()), ("timestamp", pa.int64()), ("key", pa.binary()),
                      ("value", pa.binary()), ("headers", pa.list_(entry))])
