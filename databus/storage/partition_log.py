"""One partition's log: an ordered list of segments, the offsets, durability, and the
idempotent-producer state.  This module owns the segment lifecycle (create, roll, seal,
delete, swap after compaction) and the recovery point.

Public surface (the broker codes against it):

* ``append(batches, *, now_ms=None, assign_offsets=True) -> AppendInfo``: validates every
  batch first (length, magic 2, CRC-32C, ``max.message.bytes``, record count vs offsets,
  producer sequence/epoch; on a ``cleanup.policy=compact`` log also that every record has a
  key, ``RecordValidationError`` listing the keyless ones); on any problem raises and
  appends nothing.  Then it rewrites base offsets in place (records are parsed only for the
  key check of compacted logs) and writes the request's bytes with one ``pwrite``.
  A duplicate idempotent batch returns its ORIGINAL offsets with ``duplicate=True``.
  ``message.timestamp.type=LogAppendTime`` sets each batch's maxTimestamp and timestamp-type
  bit and recomputes its CRC (header only).  Disk errors raise ``KafkaStorageError`` after
  cutting the files back: nothing half-written is ever visible.
* ``read(offset, max_bytes, *, max_offset=None) -> bytes``: whole batches from the one holding
  ``offset`` (at least one, even above max_bytes), from a single segment; b"" at the log end
  or when ``max_offset`` excludes the first batch; ``OffsetOutOfRangeError`` outside
  [log_start_offset, log_end_offset].
* ``offset_for_timestamp(ts) -> (offset, timestamp) | None``: the first batch whose max
  timestamp >= ts (its base offset, or the log start offset if greater; and that max).
* ``delete_records_before(offset) -> log start offset``: DeleteRecords; moves the log start
  offset forward (never back), -1 meaning the log end; the caller makes it durable (the
  ``log-start-offset-checkpoint``, see LogManager.delete_records).
* ``flush() -> recovery point``: group commit.  Safe against ONE concurrent appender thread:
  the lock is held only to snapshot which files to fsync (dup'ed descriptors) and the log end
  offset; the fsyncs run without it, all at once (``durable.fsync_all``).  ``needs_flush(now_ms)`` applies ``flush.messages`` /
  ``flush.ms``; ``is_durable(offset)``; ``recovery_point`` (every offset below it is on disk).
* ``check_producer(batches) -> BatchMetadata | None``: the idempotence rule alone (see
  producer_state), for callers that want to know before appending.
* Transactions: ``last_stable_offset`` (the first offset of the oldest open transaction, or
  the log end) and ``aborted_transactions(start, upper)`` for read_committed fetches; both
  come from producer_state, fed by every batch header and, for control batches (markers),
  the marker type.  Only the broker writes markers: ``append(..., allow_control=True)``; a
  control batch from a client is INVALID_RECORD.

Threading: everything except ``flush`` runs on one thread (the broker's trio thread), which
alone changes the segment list (appends, rolls, ``remove_oldest_segments``,
``replace_segment``), so reads take no lock.  Retention and compaction do their expensive
work on other threads through ``Segment.reader()`` copies and their own files, and call
the segment-list methods back on this thread (see steps.py, compaction.py).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass, field

from databus.protocol.records import (
    BatchHeader,
    control_batch_type,
    iter_headers,
    keyless_records,
    recompress_batch,
    set_base_offset,
    set_log_append_time,
    validate_batch,
)

from .config import LogConfig
from .durable import atomic_write, fsync_all, fsync_dir
from .errors import (
    DamagedSegmentError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RecordValidationError,
    UnknownTopicError,
)
from .producer_state import BatchMetadata, ProducerEntry, ProducerStateManager
from .recovery import load_segments
from .segment import PlannedBatch, Segment, segment_name

log = logging.getLogger(__name__)

_SNAPSHOT = re.compile(r"^(\d{20})\.snapshot$")
_SNAPSHOTS_KEPT = 2


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int = -1
    log_start_offset: int = 0
    batches: list[tuple[int, BatchHeader]] = field(default_factory=list)
    records_count: int = 0
    duplicate: bool = False


def _check_keys(buf, headers, name: str) -> None:
    """Kafka's LogValidator rule for compacted topics: every record needs a key, or the whole
    append is refused with INVALID_RECORD and the offending records' indexes.  This is the
    only place an append reads records (their lengths and key lengths; CRCs were checked
    already), and only for compacted topics: other topics' batches are never parsed."""
    message = f"Compacted topic cannot accept message without key in topic partition {name}."
    errors: list[tuple[int, str]] = []
    index = 0
    for pos, h in headers:
        errors += [(index + i, message) for i in keyless_records(buf, pos, verify_crc=False)]
        index += h.records_count
    if errors:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        raise RecordValidationError(
            f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]", errors)


def _storage_error(action: str, path: str, exc: OSError) -> KafkaStorageError:
    where = os.path.dirname(path) or path
    if exc.errno == errno.ENOSPC:
        what = f"no space left on the device holding {where}"
    else:
        what = f"{exc.strerror or exc} ({where})"
    err = KafkaStorageError(f"cannot {action} {os.path.basename(path)}: {what}")
    err.errno = exc.errno
    return err


class PartitionLog:
    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig,
                 *, clock=time.time) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self._clock = clock
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.recovery_point = 0
        self.producer_state = ProducerStateManager()
        self._lock = threading.Lock()  # appender vs flusher: held only to snapshot
        # Flushes run one at a time: a later flush finishing first must not publish a
        # recovery point that covers files an earlier one is still syncing.
        self._flush_lock = threading.Lock()
        self._unflushed: dict[int, Segment] = {}
        self._unflushed_messages = 0
        self._dir_dirty = False
        self._last_flush_ms = self._now_ms()
        self.closed = False
        self.deleted = False
        # damage met by reads (metrics): (log file, position) of damaged batches, logged
        # once each; damaged .index entries rebuilt
        self.damage_found: set[tuple[str, int]] = set()
        self.index_repairs = 0
        # compaction bookkeeping (see compaction.py)
        self.first_dirty_offset = 0
        self.tombstone_expiry_ms: int | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(seg.size for seg in self.segments)

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str, topic: str, partition: int, config: LogConfig, *,
             recovery_point: int = 0, log_start_offset: int = 0, clean: bool = False,
             clock=time.time) -> tuple[PartitionLog, list[str]]:
        """Load (recovering if needed) or create the partition's log; returns the log and the
        recovery actions taken."""
        self = cls(directory, topic, partition, config, clock=clock)
        os.makedirs(directory, exist_ok=True)
        now = self._now_ms()
        result = load_segments(directory, self.name,
                               index_interval_bytes=config.index_interval_bytes,
                               segment_index_bytes=config.segment_index_bytes,
                               recovery_point=recovery_point, clean=clean, now_ms=now)
        actions = result.actions
        segments = result.segments
        if not segments:
            segments = [self._new_segment(max(log_start_offset, 0), now)]
            self._dir_dirty = True
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_end_offset = segments[-1].next_offset
        self.log_start_offset = min(max(log_start_offset, segments[0].base_offset),
                                    self.log_end_offset)
        self.first_dirty_offset = self.log_start_offset
        if clean:
            self.recovery_point = self.log_end_offset
        else:
            self.recovery_point = min(recovery_point, self.log_end_offset)
        if result.recovered:
            for seg in segments:
                if seg.next_offset > self.recovery_point:
                    self._unflushed[id(seg)] = seg
            self.flush()  # the re-validated tail becomes the new recovery point
        actions += self._load_producer_state()
        return self, actions

    def _new_segment(self, base_offset: int, now_ms: int) -> Segment:
        return Segment.create(self.directory, base_offset,
                              index_interval_bytes=self.config.index_interval_bytes,
                              segment_index_bytes=self.config.segment_index_bytes, now_ms=now_ms)

    # -- producer state snapshots -----------------------------------------------------------

    def _snapshot_offsets(self) -> list[int]:
        return sorted(int(m.group(1)) for f in os.listdir(self.directory)
                      if (m := _SNAPSHOT.match(f)))

    def _snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, segment_name(offset) + ".snapshot")

    def _load_producer_state(self) -> list[str]:
        actions = []
        start = self.log_start_offset
        for offset in reversed(self._snapshot_offsets()):
            path = self._snapshot_path(offset)
            if offset > self.log_end_offset:
                os.unlink(path)
                actions.append(f"{self.name}: deleted producer snapshot {os.path.basename(path)}"
                               " beyond the log end")
                continue
            try:
                with open(path, "rb") as f:
                    self.producer_state = ProducerStateManager.load_snapshot(f.read())
                start = offset
                break
            except (OSError, ValueError) as exc:
                os.unlink(path)
                actions.append(f"{self.name}: ignored damaged producer snapshot "
                               f"{os.path.basename(path)} ({exc})")
        if start < self.log_end_offset:
            replayed = 0
            for seg, pos, h in self._headers_from(start):
                if h.producer_id >= 0:
                    kind = (control_batch_type(seg.read_range(pos, h.size)) if h.is_control
                            else None)
                    self.producer_state.update_from_header(h, kind)
                    replayed += 1
            if replayed:
                actions.append(f"{self.name}: rebuilt producer state from {replayed} batch "
                               f"headers after offset {start}")
        for line in actions:
            log.info("recovery: %s", line)
        return actions

    def _headers_from(self, offset: int):
        i = max(bisect_right(self._bases, offset) - 1, 0)
        for seg in self.segments[i:]:
            start = seg.index.lookup(offset)[1] if seg.base_offset <= offset else 0
            for pos, h in seg.iter_headers(start, seg.size):
                if h.base_offset + h.last_offset_delta >= offset:
                    yield seg, pos, h

    def take_producer_snapshot(self, offset: int | None = None) -> None:
        """Write ``<offset>.snapshot`` (state of every batch below ``offset``, default the log
        end) and keep only the newest few.  Not fsynced: a torn one fails its CRC and the
        headers after an older one are replayed instead."""
        offset = self.log_end_offset if offset is None else offset
        atomic_write(self._snapshot_path(offset), self.producer_state.snapshot_bytes(),
                     sync=False)
        for old in self._snapshot_offsets()[:-_SNAPSHOTS_KEPT]:
            os.unlink(self._snapshot_path(old))

    # -- appending --------------------------------------------------------------------------

    def check_producer(self, batches) -> BatchMetadata | None:
        """The idempotence rule for each batch of ``batches`` (headers only, in order, as if
        the earlier ones were appended): the first duplicate's metadata, or None."""
        for _pos, h in iter_headers(batches):
            dup = self.producer_state.check(h)
            if dup is not None:
                return dup
        return None

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.producer_state.first_unstable_offset()
        end = self.log_end_offset
        return end if first_unstable is None else min(first_unstable, end)

    def aborted_transactions(self, start: int, upper: int) -> list:
        """The AbortedTxns a read_committed read of [start, upper) must be told about."""
        return self.producer_state.aborted_in_range(start, upper)

    def append(self, batches, *, now_ms: int | None = None,
               assign_offsets: bool = True, allow_control: bool = False) -> AppendInfo:
        if self.deleted:
            raise UnknownTopicError(f"{self.name} was deleted")
        if self.closed:
            raise KafkaStorageError(f"{self.name} is closed")
        now_ms = self._now_ms() if now_ms is None else now_ms
        buf = bytearray(batches)
        total = len(buf)
        if total == 0:
            raise InvalidRecordError(f"{self.name}: an append needs at least one record batch")
        max_size = self.config.max_message_bytes
        headers: list[tuple[int, BatchHeader]] = []
        control_types: dict[int, int] = {}
        pos = 0
        while pos < total:
            h = validate_batch(buf, pos, max_size)
            if h.is_control:
                if not allow_control:
                    raise InvalidRecordError(
                        f"{self.name}: control batches (transaction markers) are written by "
                        "the broker only")
                control_types[pos] = control_batch_type(buf, pos)
            if assign_offsets and (h.records_count <= 0
                                   or h.records_count != h.last_offset_delta + 1):
                raise InvalidRecordError(
                    f"batch at byte {pos} has {h.records_count} records but lastOffsetDelta "
                    f"{h.last_offset_delta}"
                )
            headers.append((pos, h))
            pos += h.size
        if assign_offsets and self.config.compact:
            _check_keys(buf, headers, self.name)
        if assign_offsets:
            dup = self._check_producers(headers)
            if dup is not None:
                return AppendInfo(dup.first_offset, dup.last_offset, -1, self.log_start_offset,
                                  duplicate=True)
        codec = self.config.compression_codec
        if assign_offsets and codec is not None and any(
                h.codec != codec and not h.is_control for _, h in headers):
            buf, headers = self._recompressed(buf, headers, codec)
            total = len(buf)
        log_append_time = -1
        if self.config.log_append_time:
            log_append_time = now_ms
            for pos, h in headers:
                set_log_append_time(buf, pos, h, now_ms)
        with self._lock:
            planned: list[PlannedBatch] = []
            assigned: list[tuple[int, BatchHeader, int | None]] = []
            next_offset = self.log_end_offset
            records = 0
            for pos, h in headers:
                if assign_offsets:
                    base = next_offset
                    set_base_offset(buf, pos, base)
                else:
                    base = h.base_offset
                    if base < next_offset:
                        raise InvalidRecordError(
                            f"{self.name}: batch at byte {pos} has offset {base}, below the "
                            f"log end offset {next_offset}"
                        )
                max_ts = log_append_time if log_append_time >= 0 else h.max_timestamp
                h = h._replace(base_offset=base, max_timestamp=max_ts)
                assigned.append((base, h, control_types.get(pos)))
                planned.append(PlannedBatch(pos, h.size, base, base + h.last_offset_delta, max_ts))
                next_offset = base + h.last_offset_delta + 1
                records += h.records_count
            first_offset, last_offset = planned[0].base_offset, planned[-1].last_offset
            seg = self._maybe_roll(total, first_offset, last_offset,
                                   max(p.max_timestamp for p in planned), now_ms)
            try:
                seg.append(buf, planned)
            except OSError as exc:
                raise _storage_error("append to", seg.log_path, exc) from exc
            self.log_end_offset = next_offset
            self._unflushed[id(seg)] = seg
            self._unflushed_messages += records
        for _base, h, kind in assigned:
            if h.producer_id >= 0:
                self.producer_state.update_from_header(h, kind)
        return AppendInfo(first_offset, last_offset, log_append_time, self.log_start_offset,
                          [(base, h) for base, h, _kind in assigned], records)

    def _recompressed(self, buf, headers, codec: int):
        """The request's batches with every (data) batch in another codec recompressed to
        ``codec`` (the topic's compression.type), and their new headers.  The only place an
        append decompresses, and only on topics that ask for it."""
        out = bytearray()
        new_headers: list[tuple[int, BatchHeader]] = []
        max_size = self.config.max_message_bytes
        for pos, h in headers:
            if h.codec == codec or h.is_control:
                data = buf[pos:pos + h.size]
            else:
                data = recompress_batch(buf, pos, codec)
            new_headers.append((len(out), validate_batch(data, 0, max_size)))
            out += data
        return out, new_headers

    def _check_producers(self, headers) -> BatchMetadata | None:
        # Check each batch as if the previous ones of this request were appended: on a
        # scratch copy of the entries involved, so a rejected request changes nothing.
        pids = {h.producer_id for _, h in headers if h.producer_id >= 0}
        if not pids:
            return None
        if len(headers) == 1:
            return self.producer_state.check(headers[0][1])
        scratch = ProducerStateManager()
        for pid in pids:
            entry = self.producer_state.entry(pid)
            if entry is not None:
                scratch.producers[pid] = _copy_entry(entry)
        fake = self.log_end_offset
        for _pos, h in headers:
            dup = scratch.check(h)
            if dup is not None:
                return dup
            scratch.update_from_header(h._replace(base_offset=fake))
            fake += h.last_offset_delta + 1
        return None

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int,
                    max_timestamp: int, now_ms: int) -> Segment:
        seg = self.segments[-1]
        if seg.size == 0:
            return seg
        config = self.config
        reason = None
        if seg.size + size > config.segment_bytes:
            reason = f"segment.bytes {config.segment_bytes} reached"
        elif seg.time_waited_for_roll(now_ms, max_timestamp) > config.segment_ms:
            reason = f"segment.ms {config.segment_ms} elapsed"
        elif seg.indexes_full:
            reason = f"segment.index.bytes {config.segment_index_bytes} reached"
        elif not seg.can_hold_offset(last_offset):
            reason = "relative offsets would overflow"
        if reason is None:
            return seg
        return self._roll(first_offset, now_ms, reason)

    def _roll(self, base_offset: int, now_ms: int, reason: str) -> Segment:
        old = self.segments[-1]
        try:
            old.seal()
            new = self._new_segment(base_offset, now_ms)
        except OSError as exc:
            raise _storage_error("roll", old.log_path, exc) from exc
        self.segments.append(new)
        self._bases.append(base_offset)
        self._unflushed[id(old)] = old
        self._dir_dirty = True
        log.debug("%s: rolled new segment at offset %d (%s)", self.name, base_offset, reason)
        try:
            self.take_producer_snapshot(base_offset)
        except OSError as exc:  # a snapshot only saves replay time on recovery
            log.warning("%s: could not write producer snapshot: %s", self.name, exc)
        return new

    def roll(self, now_ms: int | None = None) -> Segment:
        """Force a new active segment at the log end (no-op if the active one is empty)."""
        with self._lock:
            if self.segments[-1].size == 0:
                return self.segments[-1]
            return self._roll(self.log_end_offset, self._now_ms() if now_ms is None else now_ms,
                              "requested")

    # -- reading ----------------------------------------------------------------------------

    def _check_range(self, offset: int) -> None:
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside {self.name}'s range "
                f"[{self.log_start_offset}, {self.log_end_offset}]"
            )

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> bytes:
        self._check_range(offset)
        if offset == self.log_end_offset or (max_offset is not None and offset >= max_offset):
            return b""
        i = max(bisect_right(self._bases, offset) - 1, 0)
        segments = self.segments
        for seg in segments[i:]:
            repairs = seg.index_repairs
            try:
                data = seg.read(offset, max_bytes, max_offset)
            except DamagedSegmentError as damage:
                place = (damage.path, damage.position)
                if place not in self.damage_found:  # once per segment and position
                    self.damage_found.add(place)
                    log.error(
                        "%s: %s (met by a read at offset %d); the records before it are "
                        "served, reads that reach it get CORRUPT_MESSAGE until "
                        "`databus repair-log` cuts it out",
                        self.name, damage, offset,
                    )
                raise
            finally:
                self.index_repairs += seg.index_repairs - repairs
            if data is not None:
                return data
        return b""

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        for seg in self.segments:
            if seg.max_timestamp < timestamp or seg.next_offset <= self.log_start_offset:
                continue
            start_offset = max(seg.time_index.lookup(timestamp), self.log_start_offset)
            _, pos = seg.index.lookup(start_offset)
            for _pos, h in seg.iter_headers(pos, seg.size):
                if h.max_timestamp >= timestamp and h.last_offset >= self.log_start_offset:
                    return max(h.base_offset, self.log_start_offset), h.max_timestamp
        return None

    def max_timestamp_batch(self) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch holding the partition's largest
        timestamp (ListOffsets' MAX_TIMESTAMP, KIP-734), or None when the log is empty."""
        live = [seg for seg in self.segments
                if seg.next_offset > self.log_start_offset and seg.size]
        if not live:
            return None
        top = max(seg.max_timestamp for seg in live)
        for seg in live:
            if seg.max_timestamp != top:
                continue
            for _pos, h in seg.iter_headers(0, seg.size):
                if h.max_timestamp == top and h.last_offset >= self.log_start_offset:
                    return max(h.base_offset, self.log_start_offset), top
        return None

    def legacy_offsets_before(self, timestamp: int, max_offsets: int) -> list[int]:
        """ListOffsets v0's answer (Kafka's legacyFetchOffsetsBefore): segment boundaries,
        newest first, at most ``max_offsets`` of them.  Each segment counts with its base
        offset (the log start offset for the first) and its file's last modification; a
        non-empty active segment adds the log end offset, "modified" now.  Latest (-1) starts
        from the newest of them, earliest (-2) from the oldest, a timestamp from the newest
        modified at or before it."""
        points = [(max(seg.base_offset, self.log_start_offset), _modified_ms(seg))
                  for seg in self.segments]
        if self.active_segment.size > 0:
            points.append((self.log_end_offset, self._now_ms()))
        if timestamp == -1:
            start = len(points) - 1
        elif timestamp == -2:
            start = 0
        else:
            start = len(points) - 1
            while start >= 0 and points[start][1] > timestamp:
                start -= 1
        count = max(0, min(max_offsets, start + 1))
        return [points[start - i][0] for i in range(count)]

    # -- DeleteRecords ----------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Make ``offset`` the log start offset (-1: the log end), as Kafka's DeleteRecords:
        records below it are no longer readable; segments wholly below it are removed by the
        next retention run.  An offset at or below the current start changes nothing.  The new
        log start offset (the "low watermark") is returned."""
        if not self.config.delete:
            raise PolicyViolationError(
                f"Records of partition {self.name} can not be deleted due to the configured "
                f"policy (cleanup.policy={self.config.cleanup_policy})")
        if offset == -1:
            offset = self.log_end_offset
        if not 0 <= offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.name} before offset {offset}: it is outside "
                f"[0, {self.log_end_offset}] (the high watermark is {self.log_end_offset})")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.first_dirty_offset = max(self.first_dirty_offset, offset)
        return self.log_start_offset

    # -- durability -------------------------------------------------------------------------

    def is_dirty(self) -> bool:
        return bool(self._unflushed) or self._dir_dirty

    def is_durable(self, offset: int) -> bool:
        return offset < self.recovery_point

    def needs_flush(self, now_ms: int | None = None) -> bool:
        if not self._unflushed:
            return False
        if self._unflushed_messages >= self.config.flush_interval_messages:
            return True
        now_ms = self._now_ms() if now_ms is None else now_ms
        return now_ms - self._last_flush_ms >= self.config.flush_interval_ms

    def flush(self) -> int:
        """fsync everything appended so far; returns the new recovery point."""
        with self._flush_lock:
            return self._flush()

    def _flush(self) -> int:
        with self._lock:
            if self.deleted:
                # a waiter for durability must fail, not wait forever for a recovery point
                raise UnknownTopicError(f"{self.name} was deleted before it was flushed")
            if self.closed or not (self._unflushed or self._dir_dirty):
                return self.recovery_point
            target = self.log_end_offset
            segments = list(self._unflushed.values())
            self._unflushed.clear()
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            messages, self._unflushed_messages = self._unflushed_messages, 0
            fds = [(os.dup(fd), seg.log_path) for seg in segments
                   for fd in seg.file_descriptors() if fd >= 0]
        try:
            try:
                fsync_all(fds)  # concurrently: they share one journal commit
            except OSError as exc:
                raise _storage_error("fsync", exc.filename or self.directory, exc) from exc
            if dir_dirty:
                try:
                    fsync_dir(self.directory)
                except OSError as exc:
                    raise _storage_error("fsync", self.directory, exc) from exc
        except KafkaStorageError:
            with self._lock:
                for seg in segments:
                    if seg.fd >= 0:
                        self._unflushed[id(seg)] = seg
                self._dir_dirty |= dir_dirty
                self._unflushed_messages += messages
            raise
        finally:
            for fd, _ in fds:
                os.close(fd)
        with self._lock:
            self.recovery_point = max(self.recovery_point, target)
            self._last_flush_ms = self._now_ms()
            return self.recovery_point

    def flush_to(self, offset: int) -> int:
        """Make ``offset`` durable (fsync only if it is not yet)."""
        if offset < self.recovery_point:
            return self.recovery_point
        return self.flush()

    # -- segment removal and replacement (retention, compaction) -----------------------------

    def remove_oldest_segments(self, count: int) -> list[Segment]:
        """Remove the ``count`` oldest segments (never the active one) from the log and close
        them; the log start offset moves to the first remaining segment.  The caller deletes
        their files (``Segment.delete_files``, on any thread)."""
        count = min(count, len(self.segments) - 1)
        if count <= 0:
            return []
        with self._lock:
            doomed = self.segments[:count]
            del self.segments[:count]
            del self._bases[:count]
            for seg in doomed:
                self._unflushed.pop(id(seg), None)
                seg.close()
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.producer_state.drop_aborted_before(self.log_start_offset)
        return doomed

    def replace_segment(self, old: Segment, new: Segment | None) -> None:
        """Swap ``old`` for ``new`` (already on disk under old's names), or drop it."""
        with self._lock:
            i = self.segments.index(old)
            self._unflushed.pop(id(old), None)
            old.close()
            if new is None:
                del self.segments[i]
                del self._bases[i]
            else:
                self.segments[i] = new
            self._dir_dirty = True

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Seal the active segment's time index, flush, snapshot producer state, close."""
        if self.closed:
            return
        try:
            self.segments[-1].seal()
            with self._lock:
                self._unflushed[id(self.segments[-1])] = self.segments[-1]
            self.flush()
            self.take_producer_snapshot()
        finally:
            with self._lock:
                self.closed = True
                for seg in self.segments:
                    seg.close()
                self._unflushed.clear()

    def delete(self) -> None:
        """Close without flushing (the directory is about to be removed); a later ``flush``
        raises UnknownTopicError."""
        with self._lock:
            self.closed = True
            self.deleted = True
            for seg in self.segments:
                seg.close()
            self._unflushed.clear()


def _copy_entry(entry: ProducerEntry) -> ProducerEntry:
    copy = ProducerEntry(epoch=entry.epoch, last_timestamp=entry.last_timestamp)
    copy.batches.extend(entry.batches)
    return copy


def _modified_ms(segment: Segment) -> int:
    try:
        return int(os.stat(segment.log_path).st_mtime * 1000)
    except OSError:  # removed by retention meanwhile: as old as can be
        return -1
