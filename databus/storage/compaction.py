"""Log compaction (``cleanup.policy=compact``): keep the latest record of every key.

For each compacted log, the cleanable range is the inactive segments whose newest batch is
older than ``min.compaction.lag.ms`` (the active segment is never touched).  A run:

1. reads every record of the cleanable range and maps key -> offset of its latest record;
2. rewrites each cleanable segment keeping, per batch, the records that are the latest of
   their key; a tombstone (null value) is kept until its timestamp is more than
   ``delete.retention.ms`` old, then removed.  Records without a key are kept: appends to a
   compacted log refuse them (as Kafka does), but a topic whose cleanup.policy became
   compact later may hold some, and dropping them silently would lose data.  Control
   batches are kept as they are.
   A batch that lost records is rebuilt with its original base offset, lastOffsetDelta,
   producer id/epoch/base sequence, codec and timestamp type, so every kept record keeps
   its offset and consumers see the same offsets with gaps;
3. swaps each changed segment in: the new segment is written whole (log and both indexes)
   as ``<base>.log.cleaned`` / ``.index.cleaned`` / ``.timeindex.cleaned`` and fsynced; then
   the old index files are removed, the ``.log.cleaned`` is renamed over the ``.log``
   (atomic), the new indexes are renamed into place, and the directory is fsynced.  A crash
   at any point leaves either the old or the new log whole; recovery deletes leftover
   ``.cleaned`` files and rebuilds missing indexes.

Threading (see partition_log.py): steps 1-2 and the writing of step 3 are the expensive
part and run off the owner thread; the swap itself runs on the owner thread.
``compaction_steps`` is a generator that runs on the owner thread and yields each expensive
part as a callable, to be run on a worker thread (the broker) or inline (``run_steps``).  It
reads the segments through duplicated descriptors (``Segment.reader``), so the owner may
close or delete the log meanwhile; the swap then notices and discards the cleaned files.

A log is recleaned when the segments that became cleanable since its last run (the dirty
part; everything after a restart) make up at least ``min.cleanable.dirty.ratio`` of the
cleanable bytes, or its oldest dirty segment is older than ``max.compaction.lag.ms``, or a
kept tombstone's ``delete.retention.ms`` has passed.  Tombstone expiry departs from Kafka
(which stamps a delete horizon into the batch): it is measured from the tombstone's own
timestamp, which is deterministic and survives restarts.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os

from databus.protocol.records import BatchHeader, decode_records, parse_header, rebuild_batch

from .durable import fsync_dir
from .partition_log import PartitionLog
from .segment import PlannedBatch, Segment, segment_name
from .steps import Steps

log = logging.getLogger(__name__)

_READ_CHUNK = 4 << 20
CLEANED = ".cleaned"


def _iter_batches(seg: Segment):
    """(raw batch bytes, header) for every batch of a segment, reading in large chunks."""
    pos = 0
    end = seg.size
    while pos < end:
        data = seg.read_range(pos, min(_READ_CHUNK, end - pos))
        offset = 0
        advanced = False
        for bpos, h in seg.iter_headers(pos, end):
            rel = bpos - pos
            size = h.size
            if rel + size > len(data):
                if not advanced:  # one batch bigger than the chunk
                    data = seg.read_range(bpos, size)
                    yield data, h
                    offset = rel + size
                break
            yield data[rel: rel + size], h
            offset = rel + size
            advanced = True
        pos += offset


def cleanable_segments(plog: PartitionLog, now_ms: int) -> list[Segment]:
    lag = plog.config.min_compaction_lag_ms
    out = []
    for seg in plog.segments[:-1]:
        if seg.max_timestamp >= 0 and now_ms - seg.max_timestamp < lag:
            break
        out.append(seg)
    return out


def _due(plog: PartitionLog, segments: list[Segment], now_ms: int) -> bool:
    config = plog.config
    if plog.tombstone_expiry_ms is not None and now_ms >= plog.tombstone_expiry_ms:
        return True
    dirty = [seg for seg in segments if seg.next_offset > plog.first_dirty_offset]
    if not dirty:
        return False
    total = sum(seg.size for seg in segments)
    if total and sum(seg.size for seg in dirty) / total >= config.min_cleanable_dirty_ratio:
        return True
    oldest = dirty[0].max_timestamp
    return oldest >= 0 and now_ms - oldest >= config.max_compaction_lag_ms


def compaction_steps(plog: PartitionLog, now_ms: int) -> Steps:
    """Compact one log if it is due (a generator of worker-thread steps, see the module
    docstring); returns one line per rewritten or dropped segment."""
    config = plog.config
    if not config.compact:
        return []
    segments = cleanable_segments(plog, now_ms)
    if not segments or not _due(plog, segments, now_ms):
        return []
    log.info("compaction: cleaning %s: %d segments, %d bytes (offsets %d..%d)", plog.name,
             len(segments), sum(seg.size for seg in segments), segments[0].base_offset,
             segments[-1].next_offset - 1)
    sources = [seg.reader() for seg in segments]
    try:
        cleaned, expiry = yield functools.partial(_clean, sources, config, now_ms)
    finally:
        for source in sources:
            source.close()
    if plog.closed:  # the log was deleted or closed while we cleaned: drop our work
        yield functools.partial(_discard, [new for _, new, _ in cleaned if new is not None])
        return []
    actions = []
    doomed: list[Segment] = []
    for i, new, removed in cleaned:
        seg = segments[i]
        if seg not in plog.segments:  # cannot happen while one task runs retention and
            if new is not None:       # compaction; checked so that no caller loses data
                doomed.append(new)
            continue
        actions.append(_swap(plog, seg, new, removed))
        if new is None:
            doomed.append(seg)
    plog.first_dirty_offset = segments[-1].next_offset
    plog.tombstone_expiry_ms = expiry
    if actions:
        yield functools.partial(_finish, plog.directory, doomed)
    return actions


def _clean(sources: list[Segment], config, now_ms: int):
    """Worker thread: build the cleaned version of each source segment.

    Returns ([(index in ``sources``, cleaned segment or None when nothing is left, records
    removed)] for each source that lost records, the earliest expiry of a kept tombstone)."""
    latest: dict[bytes, int] = {}
    for seg in sources:
        for raw, h in _iter_batches(seg):
            if h.is_control:
                continue
            for record in decode_records(raw)[1]:
                if record.key is not None:
                    latest[record.key] = record.offset
    out = []
    expiry: int | None = None
    try:
        for i, seg in enumerate(sources):
            kept: list[tuple[bytes, BatchHeader]] = []
            removed = 0
            for raw, h in _iter_batches(seg):
                if h.is_control:
                    kept.append((raw, h))
                    continue
                records = decode_records(raw)[1]
                keep = []
                for r in records:
                    if r.key is not None and latest[r.key] != r.offset:
                        continue
                    if r.value is None and r.key is not None:
                        horizon = r.timestamp + config.delete_retention_ms
                        if now_ms >= horizon:
                            continue
                        expiry = horizon if expiry is None else min(expiry, horizon)
                    keep.append(r)
                removed += len(records) - len(keep)
                if len(keep) == len(records):
                    kept.append((raw, h))
                elif keep:
                    rebuilt = rebuild_batch(h, keep)
                    kept.append((rebuilt, parse_header(rebuilt)))
            if removed:
                out.append((i, _write_cleaned(seg, kept, config) if kept else None, removed))
    except BaseException:
        _discard([new for _, new, _ in out if new is not None])
        raise
    return out, expiry


def _write_cleaned(seg: Segment, kept: list[tuple[bytes, BatchHeader]], config) -> Segment:
    """Worker thread: the kept batches as a new segment under ``.cleaned`` names, its indexes
    built as appends build them, sealed and fsynced."""
    with contextlib.suppress(FileNotFoundError):  # a leftover of an interrupted run
        os.unlink(os.path.join(seg.directory, segment_name(seg.base_offset) + ".log" + CLEANED))
    new = Segment.create(seg.directory, seg.base_offset,
                         index_interval_bytes=config.index_interval_bytes,
                         segment_index_bytes=config.segment_index_bytes,
                         now_ms=seg.created_ms, suffix=CLEANED)
    try:
        planned = []
        position = 0
        for raw, h in kept:
            planned.append(PlannedBatch(position, len(raw), h.base_offset,
                                        h.base_offset + h.last_offset_delta, h.max_timestamp))
            position += len(raw)
        new.append(b"".join(raw for raw, _ in kept), planned)
        # offsets removed at the end of the segment stay a gap: the next segment starts where
        # this one always ended
        new.next_offset = max(new.next_offset, seg.next_offset)
        new.seal()
        new.sync()
    except BaseException:
        new.delete_files()
        raise
    return new


def _swap(plog: PartitionLog, seg: Segment, new: Segment | None, removed: int) -> str:
    """Owner thread: put ``new`` in ``seg``'s place (renames only; ``_finish`` makes them
    durable), or drop ``seg`` when nothing of it is left."""
    name = os.path.basename(seg.log_path)
    if new is None:
        plog.replace_segment(seg, None)
        return (f"{plog.name}: compaction removed all {removed} records of {name} "
                f"(offsets {seg.base_offset}..{seg.next_offset - 1}); segment deleted")
    # Old indexes first, then the log, then the new indexes: whatever the crash point, the
    # .log on disk is whole and its indexes are either its own or missing (then rebuilt).
    for path in (seg.index.path, seg.time_index.path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    os.replace(new.log_path, seg.log_path)
    os.replace(new.index.path, seg.index.path)
    os.replace(new.time_index.path, seg.time_index.path)
    new.take_names_of(seg)
    plog.replace_segment(seg, new)
    return (f"{plog.name}: compacted {name}: removed {removed} records, "
            f"{seg.size} -> {new.size} bytes")


def _finish(directory: str, doomed: list[Segment]) -> None:
    """Worker thread: unlink the dropped segments, make the renames and unlinks durable."""
    for seg in doomed:
        seg.delete_files()
    fsync_dir(directory)


def _discard(cleaned: list[Segment]) -> None:
    for new in cleaned:
        new.delete_files()
