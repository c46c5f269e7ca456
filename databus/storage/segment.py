"""One log segment: the ``.log`` file of RecordBatch v2 bytes and its two indexes.

A Segment owns its three files and the state derived from them: size, next offset, largest
timestamp, and the index-entry cadence (``index.interval.bytes``).  It appends batches whose
offsets were already assigned, reads whole batches, scans batch headers (optionally
re-validating them), and truncates.  It never parses records and knows nothing of other
segments; ``PartitionLog`` decides when to roll, ``recovery`` when to trust or rebuild.

Files: ``<dir>/<20-digit base offset>.log`` / ``.index`` / ``.timeindex`` (Kafka's names).
I/O is plain ``os.pread`` / ``os.pwrite`` on file descriptors (no mmap): a batch append is one
``pwrite`` of the request's bytes, and reads copy exactly the bytes returned.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from databus.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    CorruptRecordError,
    parse_header,
    validate_batch,
)

from .errors import DamagedSegmentError
from .index_file import pwrite_all, truncate_quietly
from .offset_index import OffsetIndex
from .time_index import TimeIndex

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
_SCAN_CHUNK = 64 * 1024
_VALIDATE_CHUNK = 1 << 20
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_FIRST_FIELDS = struct.Struct(">qi")  # baseOffset, batchLength


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def base_offset_of(path: str) -> int | None:
    """The base offset a segment file's name (``.log``, ``.index``, ``.timeindex``...) gives,
    None for a name that is not a segment's."""
    stem = os.path.basename(path).split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


@dataclass
class PlannedBatch:
    """A batch about to be written: its position in the append buffer and its offsets."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class ScanStop(Exception):
    """Where and why a header scan stopped before the end of the file."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(reason)
        self.position = position
        self.reason = reason


class Segment:
    """See the module docstring.  Attributes are read by PartitionLog; only methods mutate."""

    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int,
                 segment_index_bytes: int, created_ms: int, suffix: str = "") -> None:
        """``suffix`` is appended to the three file names (compaction builds a segment as
        ``.log.cleaned`` etc. before it takes the real names, see ``take_names_of``)."""
        self.directory = directory
        self.base_offset = base_offset
        name = os.path.join(directory, segment_name(base_offset))
        self.log_path = name + ".log" + suffix
        self.index = OffsetIndex(name + ".index" + suffix, base_offset)
        self.time_index = TimeIndex(name + ".timeindex" + suffix, base_offset)
        self.index_interval_bytes = index_interval_bytes
        self.max_index_entries = max(1, segment_index_bytes // OffsetIndex.entry.size)
        self.max_time_entries = max(1, segment_index_bytes // TimeIndex.entry.size)
        self.created_ms = created_ms
        self.fd = -1
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.rolling_base_ms = -1  # max timestamp of the first batch (Kafka's roll clock)
        self.bytes_since_index_entry = 0
        self.index_repairs = 0  # damaged .index entries found by reads (a metric)

    # -- lifecycle --------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: str, base_offset: int, *, index_interval_bytes: int,
               segment_index_bytes: int, now_ms: int, suffix: str = "") -> Segment:
        seg = cls(directory, base_offset, index_interval_bytes, segment_index_bytes, now_ms,
                  suffix)
        if os.path.exists(seg.log_path) and os.path.getsize(seg.log_path) > 0:
            raise FileExistsError(f"segment {seg.log_path} already exists and is not empty")
        try:
            seg.fd = os.open(seg.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            for idx in (seg.index, seg.time_index):
                idx.open(create=True)
                idx.reset()
        except OSError:
            seg.close()
            raise
        return seg

    @classmethod
    def open_existing(cls, directory: str, base_offset: int, *, index_interval_bytes: int,
                      segment_index_bytes: int, now_ms: int) -> Segment:
        """Open the files (creating missing indexes) without loading them: see recovery."""
        seg = cls(directory, base_offset, index_interval_bytes, segment_index_bytes, now_ms)
        seg.fd = os.open(seg.log_path, os.O_RDWR)
        seg.size = os.fstat(seg.fd).st_size
        return seg

    def reader(self) -> Segment:
        """A read-only copy of this segment's state on its own duplicate of the log's
        descriptor, for a worker thread (compaction) to scan while the owner thread may close,
        replace or delete this segment.  ``close()`` it after use."""
        view = Segment(self.directory, self.base_offset, self.index_interval_bytes,
                       self.max_index_entries * OffsetIndex.entry.size, self.created_ms)
        view.fd = os.dup(self.fd)
        view.size, view.next_offset = self.size, self.next_offset
        view.max_timestamp = self.max_timestamp
        return view

    def take_names_of(self, other: Segment) -> None:
        """This segment's files were renamed to ``other``'s names: use them from now on."""
        self.log_path = other.log_path
        self.index.path = other.index.path
        self.time_index.path = other.time_index.path

    def sync(self) -> None:
        """fsync the log and both indexes."""
        for fd in self.file_descriptors():
            if fd >= 0:
                os.fsync(fd)

    def file_descriptors(self) -> list[int]:
        return [self.fd, self.index.fileno(), self.time_index.fileno()]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.index.close()
        self.time_index.close()

    def delete_files(self) -> None:
        """Close and unlink the three files (missing ones are fine)."""
        self.close()
        for path in (self.log_path, self.index.path, self.time_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    # -- appending --------------------------------------------------------------------------

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    @property
    def indexes_full(self) -> bool:
        return (len(self.index) >= self.max_index_entries
                or len(self.time_index) >= self.max_time_entries)

    def can_hold_offset(self, offset: int) -> bool:
        return offset - self.base_offset <= INT32_MAX

    def time_waited_for_roll(self, now_ms: int, max_timestamp_in_append: int) -> int:
        """Kafka's roll clock: against the first batch's timestamp if it has one, else the
        segment's creation time."""
        if self.rolling_base_ms >= 0:
            return max_timestamp_in_append - self.rolling_base_ms
        return now_ms - self.created_ms

    def _plan_indexes(self, batches, start: int):
        """Index entries for ``batches`` written at ``start`` (Kafka's LogSegment cadence).

        Returns (offset entries, time entries, bytes_since, max_ts, offset_of_max_ts)."""
        interval = self.index_interval_bytes
        base = self.base_offset
        since = self.bytes_since_index_entry
        max_ts, max_ts_offset = self.max_timestamp, self.offset_of_max_timestamp
        last_time = self.time_index.keys[-1] if len(self.time_index) else None
        index_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        for position, size, last_offset, batch_max_ts in batches:
            if batch_max_ts > max_ts:
                max_ts, max_ts_offset = batch_max_ts, last_offset
            if since > interval:
                index_entries.append((last_offset - base, start + position))
                if last_time is None or max_ts > last_time:
                    time_entries.append((max_ts, max_ts_offset - base))
                    last_time = max_ts
                since = 0
            since += size
        return index_entries, time_entries, since, max_ts, max_ts_offset

    def append(self, buf, batches: list[PlannedBatch]) -> None:
        """Write ``buf`` (whose batches already carry their offsets) at the end of the log.

        All or nothing: on OSError the log and both indexes are cut back to where they were
        and the error propagates; no state changes.
        """
        start = self.size
        plan = self._plan_indexes(
            ((b.position, b.size, b.last_offset, b.max_timestamp) for b in batches), start
        )
        index_entries, time_entries, since, max_ts, max_ts_offset = plan
        index_count, time_count = len(self.index), len(self.time_index)
        try:
            pwrite_all(self.fd, buf, start)
            self.index.write(index_entries)
            self.time_index.write(time_entries)
        except OSError:
            truncate_quietly(self.fd, start)
            for idx, count in ((self.index, index_count), (self.time_index, time_count)):
                try:
                    idx.truncate_entries(count)
                except OSError:
                    pass  # recovery rebuilds an index that does not match its log
            raise
        if self.size == 0 and batches:
            self.rolling_base_ms = batches[0].max_timestamp
        self.size = start + len(buf)
        self.next_offset = batches[-1].last_offset + 1
        self.bytes_since_index_entry = since
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset

    def seal(self) -> None:
        """The segment stops being active: record its largest timestamp in the time index
        (Kafka does the same on roll and close) so the last entry is the segment's max."""
        if self.max_timestamp >= 0:
            entry = self.time_index.maybe_entry(self.max_timestamp, self.offset_of_max_timestamp)
            if entry is not None:
                self.time_index.write([entry])

    # -- reading ----------------------------------------------------------------------------

    def iter_headers(self, start: int = 0, end: int | None = None, *,
                     validate: bool = False) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch in [start, end); raises ScanStop at the first
        incomplete batch, or, with ``validate``, the first one failing its checks
        (length, magic, CRC-32C)."""
        end = self.size if end is None else end
        fd = self.fd
        pos = start
        buf = b""
        buf_start = start
        chunk = _VALIDATE_CHUNK if validate else _SCAN_CHUNK
        while pos < end:
            if end - pos < HEADER_SIZE:
                raise ScanStop(pos, f"{end - pos} trailing bytes are not a whole batch header")
            off = pos - buf_start
            if off + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(chunk, end - pos), pos)
                buf_start, off = pos, 0
            h = parse_header(buf, off)
            if h.batch_length < _MIN_BATCH_LENGTH:
                raise ScanStop(pos, f"batch at position {pos} has invalid length {h.batch_length}")
            size = h.batch_length + LOG_OVERHEAD
            if pos + size > end:
                raise ScanStop(
                    pos, f"batch at position {pos} claims {size} bytes but only {end - pos} remain"
                )
            if validate:
                if off + size > len(buf):
                    buf = os.pread(fd, max(min(chunk, end - pos), size), pos)
                    buf_start, off = pos, 0
                try:
                    validate_batch(buf, off)
                except CorruptRecordError as exc:
                    raise ScanStop(pos, f"position {pos}: {exc}") from None
            yield pos, h
            pos += size

    def find_position(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset >= ``offset`` (None: none in this segment).

        Raises DamagedSegmentError when the scan meets bytes that are not a batch before
        finding it (a damaged old segment: the batches before the damage stay readable)."""
        entry, start = self.index.lookup(offset)
        if entry >= 0 and not self._entry_matches(entry, start):
            start = self._repair_index(entry)
        try:
            for pos, h in self.iter_headers(start, self.size):
                if h.base_offset + h.last_offset_delta >= offset:
                    return pos, h
        except ScanStop as stop:
            raise DamagedSegmentError(self, stop.position, stop.reason) from None
        return None

    def _entry_matches(self, entry: int, position: int) -> bool:
        """Whether the index entry's position holds a batch header ending at its offset."""
        if position + HEADER_SIZE > self.size:
            return False
        h = parse_header(os.pread(self.fd, HEADER_SIZE, position))
        return (h.magic == MAGIC_V2 and h.batch_length >= _MIN_BATCH_LENGTH
                and h.base_offset + h.last_offset_delta == self.base_offset + self.index.keys[entry])

    def _repair_index(self, entry: int) -> int:
        """A damaged ``.index`` entry (a seek through it would land mid-batch): rewrite the
        offset index from a scan of the log and return where to scan from for ``entry``'s
        lookup (the last good entry before it, or the segment's start).  Logged once: the
        rewritten index matches the log, so the next lookup does not come here again."""
        bad_offset = self.base_offset + self.index.keys[entry]
        bad_position = self.index.values[entry]
        start = 0
        for i in range(entry - 1, -1, -1):
            if self._entry_matches(i, self.index.values[i]):
                start = self.index.values[i]
                break
        entries = []
        since = 0
        try:
            for pos, h in self.iter_headers(0, self.size):
                if since > self.index_interval_bytes:
                    entries.append((h.base_offset + h.last_offset_delta - self.base_offset, pos))
                    since = 0
                since += h.batch_length + LOG_OVERHEAD
        except ScanStop:
            pass  # damage in the log itself: index what comes before it, reads report the rest
        try:
            self.index.rewrite(entries)
        except OSError as exc:
            log.error("%s: cannot rewrite the damaged index: %s", self.index.path, exc)
            return start
        self.index_repairs += 1
        log.warning(
            "%s: entry %d (offset %d -> position %d) does not point at that offset's batch; "
            "answered from a scan and rebuilt the index (%d entries)",
            self.index.path, entry, bad_offset, bad_position, len(entries),
        )
        return start

    def read(self, offset: int, max_bytes: int, max_offset: int | None) -> bytes | None:
        """Whole batches from the one holding ``offset``: as many as fit ``max_bytes`` (at
        least one) whose last offset is below ``max_offset``.  None when no batch in this
        segment holds an offset >= ``offset``; b"" when ``max_offset`` excludes the first."""
        end = self.size
        found = self.find_position(offset)
        if found is None:
            return None
        pos, first = found
        if max_offset is not None and first.base_offset + first.last_offset_delta >= max_offset:
            return b""
        first_size = first.batch_length + LOG_OVERHEAD
        data = os.pread(self.fd, min(end - pos, max(max_bytes, first_size)), pos)
        cut = first_size
        while len(data) - cut >= 12:
            base, length = _FIRST_FIELDS.unpack_from(data, cut)
            size = length + LOG_OVERHEAD
            if cut + size > len(data):
                break
            if max_offset is not None:
                last_delta = struct.unpack_from(">i", data, cut + 23)[0]
                if base + last_delta >= max_offset:
                    break
            cut += size
        return data if cut == len(data) else data[:cut]

    def read_range(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    # -- loading and recovery ---------------------------------------------------------------

    def load_indexes(self, *, sealed: bool = True) -> str | None:
        """Load both index files and derive the segment's state from them plus a scan of the
        log's tail.  Returns why the indexes cannot be trusted (then call ``rebuild``).

        ``sealed``: the segment was sealed (rolled, or closed cleanly), so its time index
        must end with its largest timestamp."""
        for idx in (self.index, self.time_index):
            if not os.path.exists(idx.path):
                idx.open(create=True)
                return f"{os.path.basename(idx.path)} is missing"
            idx.open()
            problem = idx.read_entries()
            if problem:
                return f"{os.path.basename(idx.path)}: {problem}"
        problem = self.index.check(self.size)
        if problem:
            return f"{os.path.basename(self.index.path)}: {problem}"
        # Scan from the last indexed batch: it must be the batch the entry names, and the
        # scan must not find a place where an entry should have been written.
        last = self.index.last()
        start = last[1] if last else 0
        since = 0
        max_ts = -1
        max_ts_offset = self.base_offset
        next_offset = self.base_offset
        first = True
        try:
            for pos, h in self.iter_headers(start, self.size):
                last_offset = h.base_offset + h.last_offset_delta
                if first and last is not None and last_offset != last[0]:
                    return (f"{os.path.basename(self.index.path)}: last entry names offset "
                            f"{last[0]} but the batch at position {pos} ends at {last_offset}")
                if not first and since > self.index_interval_bytes:
                    return (f"{os.path.basename(self.index.path)} misses entries "
                            f"after position {start}")
                first = False
                if h.max_timestamp > max_ts:
                    max_ts, max_ts_offset = h.max_timestamp, last_offset
                since += h.batch_length + LOG_OVERHEAD
                next_offset = last_offset + 1
        except ScanStop as stop:
            return f"log: {stop.reason}"
        if last is not None and first:
            return f"{os.path.basename(self.index.path)}: last entry is past the log's end"
        problem = self.time_index.check(next_offset - 1)
        if problem:
            return f"{os.path.basename(self.time_index.path)}: {problem}"
        last_time = self.time_index.last()
        if sealed and max_ts >= 0 and (last_time is None or last_time[0] < max_ts):
            return (f"{os.path.basename(self.time_index.path)} misses the segment's largest "
                    f"timestamp {max_ts}")
        if last_time is not None and last_time[0] >= max_ts:
            max_ts, max_ts_offset = last_time
        self.next_offset = next_offset
        self.bytes_since_index_entry = since
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset
        self._load_rolling_base()
        return None

    def _load_rolling_base(self) -> None:
        self.rolling_base_ms = -1
        if self.size >= HEADER_SIZE:
            self.rolling_base_ms = parse_header(os.pread(self.fd, HEADER_SIZE, 0)).max_timestamp

    def rebuild(self, *, validate: bool, expected_base: int | None = None) -> tuple[int, str | None]:
        """Rescan the log from the start (re-validating every batch with ``validate``),
        truncate it after the last good batch, and rewrite both indexes.

        ``expected_base``: the smallest offset the first batch may have (the previous
        segment's next offset).  Returns (bytes cut off, why) — (0, None) when whole.
        """
        for idx in (self.index, self.time_index):
            if idx.fileno() < 0:
                idx.open(create=True)
            idx.reset()
        self.bytes_since_index_entry = 0
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.next_offset = self.base_offset
        floor = self.base_offset if expected_base is None else max(self.base_offset, expected_base)
        batches: list[tuple[int, int, int, int]] = []
        good_end = 0
        reason = None
        try:
            for pos, h in self.iter_headers(0, self.size, validate=validate):
                if h.base_offset < floor:
                    reason = (f"batch at position {pos} has offset {h.base_offset}, "
                              f"below the expected {floor}")
                    break
                last_offset = h.base_offset + h.last_offset_delta
                if last_offset - self.base_offset > INT32_MAX:
                    reason = f"batch at position {pos} overflows the segment's offset range"
                    break
                batches.append((pos, h.batch_length + LOG_OVERHEAD, last_offset, h.max_timestamp))
                floor = last_offset + 1
                good_end = pos + h.batch_length + LOG_OVERHEAD
        except ScanStop as stop:
            reason = stop.reason
        cut = self.size - good_end
        if cut:
            os.ftruncate(self.fd, good_end)
            self.size = good_end
        index_entries, time_entries, since, max_ts, max_ts_offset = self._plan_indexes(batches, 0)
        self.index.write(index_entries)
        self.time_index.write(time_entries)
        self.bytes_since_index_entry = since
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset
        if batches:
            self.next_offset = batches[-1][2] + 1
        self._load_rolling_base()
        return cut, reason

    def truncate_to(self, position: int, next_offset: int) -> None:
        """Cut the log at ``position`` (a batch boundary) holding offsets below next_offset."""
        os.ftruncate(self.fd, position)
        self.size = position
        self.index.truncate_to_offset(next_offset)
        self.time_index.truncate_to_offset(next_offset)
        self.next_offset = next_offset
