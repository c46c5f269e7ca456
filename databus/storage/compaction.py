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
3. swaps each changed segment in: the new log is written as ``<base>.log.cleaned`` and
   fsynced, the old index files are removed, then the ``.cleaned`` file is renamed over the
   ``.log`` (atomic) and the indexes are rebuilt.  A crash at any point leaves either the old
   or the new log whole; recovery deletes a leftover ``.cleaned`` and rebuilds missing indexes.

A log is recleaned when the segments that became cleanable since its last run (the dirty
part; everything after a restart) make up at least ``min.cleanable.dirty.ratio`` of the
cleanable bytes, or its oldest dirty segment is older than ``max.compaction.lag.ms``, or a
kept tombstone's ``delete.retention.ms`` has passed.  Tombstone expiry departs from Kafka
(which stamps a delete horizon into the batch): it is measured from the tombstone's own
timestamp, which is deterministic and survives restarts.
"""

from __future__ import annotations

import os

from databus.protocol.records import build_batch, decode_records

from .checkpoints import fsync_dir
from .partition_log import PartitionLog
from .segment import Segment

_READ_CHUNK = 4 << 20


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


def compact_log(plog: PartitionLog, now_ms: int) -> list[str]:
    """Compact one log if it is due; one line per rewritten or dropped segment."""
    config = plog.config
    if not config.compact:
        return []
    segments = cleanable_segments(plog, now_ms)
    if not segments:
        return []
    if not _due(plog, segments, now_ms):
        return []
    latest: dict[bytes, int] = {}
    for seg in segments:
        for raw, h in _iter_batches(seg):
            if h.is_control:
                continue
            for record in decode_records(raw)[1]:
                if record.key is not None:
                    latest[record.key] = record.offset
    actions = []
    expiry: int | None = None
    for seg in segments:
        kept_parts: list[bytes] = []
        removed = 0
        for raw, h in _iter_batches(seg):
            if h.is_control:
                kept_parts.append(raw)
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
                kept_parts.append(raw)
            elif keep:
                kept_parts.append(build_batch(
                    keep, base_offset=h.base_offset, codec=h.codec,
                    producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                    base_sequence=h.base_sequence,
                    partition_leader_epoch=h.partition_leader_epoch,
                    transactional=h.is_transactional, timestamp_type=h.timestamp_type,
                    last_offset_delta=h.last_offset_delta,
                ))
        if not removed:
            continue
        actions.append(_swap(plog, seg, b"".join(kept_parts), removed))
    plog.first_dirty_offset = segments[-1].next_offset
    plog.tombstone_expiry_ms = expiry
    return actions


def _swap(plog: PartitionLog, seg: Segment, data: bytes, removed: int) -> str:
    name = os.path.basename(seg.log_path)
    cleaned = seg.log_path + ".cleaned"
    fd = os.open(cleaned, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    if not data:
        plog.replace_segment(seg, None)
        seg.delete_files()
        os.unlink(cleaned)
        fsync_dir(plog.directory)
        return (f"{plog.name}: compaction removed all {removed} records of {name} "
                f"(offsets {seg.base_offset}..{seg.next_offset - 1}); segment deleted")
    for path in (seg.index.path, seg.time_index.path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    os.replace(cleaned, seg.log_path)
    fsync_dir(plog.directory)
    new = Segment.open_existing(plog.directory, seg.base_offset,
                                index_interval_bytes=plog.config.index_interval_bytes,
                                segment_index_bytes=plog.config.segment_index_bytes,
                                now_ms=seg.created_ms)
    new.rebuild(validate=False)
    new.next_offset = max(new.next_offset, seg.next_offset)
    new.seal()
    new.index.sync()
    new.time_index.sync()
    plog.replace_segment(seg, new)
    return (f"{plog.name}: compacted {name}: removed {removed} records, "
            f"{seg.size} -> {new.size} bytes")
