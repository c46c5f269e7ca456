"""The Parquet sink object the runtime drives (hookspecs.databus_sink): per partition an
open group of Arrow tables (one list per Hive directory), written as files when the group
rolls (layout.cut_points / schedule_due) or when the runtime forces a flush.

Replays: ``open`` lists the partition's files whose first offset is at or past the committed
offset — written by an earlier owner after its last commit — as *stale*.  The replay writes
the same names when the roll points are the same (count, bytes, record time), replacing them
by rename; a stale file the replay cuts differently (a wall-clock roll, changed options) is
deleted once the group that covers its first offset is written.  Hidden temporary files of
the partition left by a crash are deleted at ``open``.  So after any number of crashes every
record is in exactly one file.  Blocking work runs in a worker thread.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import trio

from databus.client import ConsumerRecord

from . import layout
from .decode import Decoder, declared_schema
from .target import Target

log = logging.getLogger("databus_plugins.parquet")


@dataclass
class _Partition:
    group: layout.OpenGroup = field(default_factory=layout.OpenGroup)
    chunks: dict[str, list[pa.Table]] = field(default_factory=dict)
    taken: int | None = None  # offset after the last record handed over
    durable: int | None = None  # offset after the last record in a written file
    last_row: int | None = None  # offset of the last row in ``chunks``
    stale: list[tuple[int, str]] = field(default_factory=list)  # (first offset, path)


class ParquetSink:
    def __init__(self, options: layout.Options) -> None:
        self.options = options
        self.schema = declared_schema(options.schema) if options.schema else None
        self.target: Target | None = None
        self.decoders: dict[str, Decoder] = {}
        self.parts: dict[tuple[str, int], _Partition] = {}
        self.files_written = 0

    # -- the sink methods ------------------------------------------------------------------

    async def open(self, tp, committed):
        await trio.to_thread.run_sync(self._open, tp, committed)

    async def write(self, tp, records):
        return await trio.to_thread.run_sync(self._write, tp, records)

    async def write_columns(self, tp, columns):
        return await trio.to_thread.run_sync(self._write_columns, tp, columns)

    async def flush(self, partitions, force):
        return await trio.to_thread.run_sync(self._flush, partitions, force)

    async def close(self, partitions):
        for tp in partitions:
            self.parts.pop(tuple(tp), None)

    async def aclose(self):
        self.parts.clear()

    # -- the work (worker thread) --------------------------------------------------------------

    def _open(self, tp, committed) -> None:
        if self.target is None:
            self.target = Target(self.options.path)
        topic, partition = tp
        part = self.parts[tp] = _Partition(durable=committed)
        start = committed or 0
        for path in self.target.files_under(f"topic={topic}"):
            name = path.rsplit("/", 1)[-1]
            if layout.is_temp_for(name, topic, partition):
                self.target.delete(path)
                continue
            parsed = layout.parse_file_name(name)
            if parsed and parsed[:2] == (topic, partition) and parsed[2] >= start:
                part.stale.append((parsed[2], path))
        part.stale.sort()
        if part.stale:
            log.info("%s-%d: %d file(s) past the committed offset %d will be rewritten",
                     topic, partition, len(part.stale), start)

    def _decoder(self, topic: str) -> Decoder:
        decoder = self.decoders.get(topic)
        if decoder is None:
            if self.options.registry_url:
                from .registry import RegistryDecoder, has_subject

                decoder = RegistryDecoder(self.options.registry_url, topic)
                if self.options.registry_is_default and not has_subject(
                        self.options.registry_url, decoder.subject):
                    # The file's registry has no schema for this topic: plain values.
                    decoder = Decoder(self.options.format, self.schema, topic)
            else:
                decoder = Decoder(self.options.format, self.schema, topic)
            self.decoders[topic] = decoder
        return decoder

    def _write(self, tp, records):
        part = self.parts[tp]
        table, rejected = self._decoder(tp[0]).table(records)
        part.taken = records[-1].offset + 1
        if not table.num_rows:
            return rejected
        if rejected:
            bad = {record.offset for record, _ in rejected}
            records = [r for r in records if r.offset not in bad]
        # Columns by transposition (C speed); per-row Python work only when a cut is near.
        _t, _p, offsets, timestamps, _tt, keys, values, _h = zip(*records)
        sizes = None
        try:
            total = sum(map(len, values)) + sum(map(len, filter(None, keys)))
        except TypeError:  # tombstones (None values)
            sizes = _sizes(keys, values)
            total = sum(sizes)
        now = time.monotonic()
        n = table.num_rows
        if layout.no_cut(self.options, part.group, n, total, timestamps[0], max(timestamps), now):
            cuts = []
        else:
            sizes = sizes or _sizes(keys, values)
            cuts = layout.cut_points(self.options, part.group, sizes, timestamps, now)
        self._place(tp, part, table, timestamps, offsets, cuts)
        return rejected

    def _write_columns(self, tp, columns):
        """``_write`` for a columnar batch (RecordColumns): Arrow straight through, the
        values decoded by Arrow's reader in one call.  A batch with a value that does not
        decode that way goes the per-record way (which finds and rejects the bad ones):
        returns ``[(row, reason)]``."""
        batch = columns.to_arrow()
        table = self._decoder(tp[0]).table_of_columns(batch)
        if table is None:
            rows = list(columns.rows())
            records = [ConsumerRecord(columns.topic, columns.partition, o, ts, 0, k, v, h)
                       for o, ts, k, v, h in rows]
            index = {r.offset: i for i, r in enumerate(records)}
            return [(index[r.offset], reason) for r, reason in self._write(tp, records) or ()]
        part = self.parts[tp]
        offsets, timestamps = columns.offsets, columns.timestamps
        n = len(offsets)
        part.taken = offsets[-1] + 1
        keys, values = batch.column("key"), batch.column("value")
        total = _bytes(values) + _bytes(keys)
        now = time.monotonic()
        if layout.no_cut(self.options, part.group, n, total, timestamps[0], max(timestamps),
                         now):
            cuts = []
        else:
            sizes = pc.add(pc.fill_null(pc.binary_length(keys), 0),
                           pc.fill_null(pc.binary_length(values), 0)).to_pylist()
            cuts = layout.cut_points(self.options, part.group, sizes, timestamps, now)
        self._place(tp, part, table, timestamps, offsets, cuts)
        return None

    def _place(self, tp, part: _Partition, table: pa.Table, timestamps, offsets,
               cuts: list[int]) -> None:
        """Add ``table``'s rows to the partition's open file, rolling it at each cut."""
        n = table.num_rows
        start = 0
        for end in cuts if cuts and cuts[-1] == n else [*cuts, n]:
            if end > start:
                self._add(tp, part, table.slice(start, end - start), timestamps[start:end],
                          offsets[end - 1])
            if end in cuts:
                self._roll(tp, part)
            start = end

    def _add(self, tp, part: _Partition, rows: pa.Table, timestamps, last_offset: int) -> None:
        by = self.options.partition_by
        low = layout.bucket(min(timestamps), by)
        if low == layout.bucket(max(timestamps), by):
            groups = {low: None}  # the common case: one directory, no per-row work
        else:
            groups: dict[int, list[int]] = {}
            for i, ts in enumerate(timestamps):
                groups.setdefault(layout.bucket(ts, by), []).append(i)
        for b, rows_of in groups.items():
            chunk = rows if rows_of is None else rows.take(rows_of)
            part.chunks.setdefault(layout.hive_dir(tp[0], b, by), []).append(chunk)
        part.last_row = last_offset

    def _roll(self, tp, part: _Partition) -> None:
        """Write the open group's files; their records are durable then."""
        written = set()
        for directory, chunks in part.chunks.items():
            # An inferred schema may have grown within the group: earlier chunks get the
            # new columns null (promotion by name).
            table = pa.concat_tables(chunks, promote_options="default").combine_chunks()
            offsets = table.column("offset")
            name = layout.file_name(tp[0], tp[1], offsets[0].as_py(), offsets[-1].as_py())
            written.add(self.target.write(table, directory, name, self.options.codec))
            self.files_written += 1
        part.chunks.clear()
        part.durable = part.last_row + 1
        # Stale files this group replaces (a different cut of records now written).
        while part.stale and part.stale[0][0] <= part.last_row:
            _, path = part.stale.pop(0)
            if path not in written:
                self.target.delete(path)
                log.info("removed %s (its records were written again)", os.path.basename(path))

    def _flush(self, partitions, force: bool):
        out = {}
        now = time.monotonic()
        for tp in partitions:
            part = self.parts.get(tuple(tp))
            if part is None:
                continue
            if part.chunks and (force or layout.schedule_due(self.options, part.group, now)):
                self._roll(tp, part)
                part.group.reset()  # (a roll at a cut point leaves the counters to cut_points)
            if not part.chunks and part.taken is not None:
                part.durable = part.taken  # records rejected after the last row are done too
            if part.durable is not None:
                out[tp] = part.durable
        return out


def _sizes(keys, values) -> list[int]:
    """Key + value bytes per record (what ``rotate.size.bytes`` counts)."""
    return [(len(k) if k else 0) + (len(v) if v else 0) for k, v in zip(keys, values)]


def _bytes(array: pa.Array) -> int:
    """Bytes of a binary column's values (nulls count 0): its end offsets' span."""
    _, ends, _ = array.buffers()
    first = struct.unpack_from("<i", ends, array.offset * 4)[0]
    last = struct.unpack_from("<i", ends, (array.offset + len(array)) * 4)[0]
    return last - first
