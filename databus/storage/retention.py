"""Retention: which whole segments of a log to delete, by ``retention.ms`` and
``retention.bytes`` (Kafka's rules), never the active segment.

* time: the oldest segments whose largest timestamp is more than ``retention.ms`` before now
  (a segment without timestamps uses its file's modification time), stopping at the first one
  still inside retention;
* size: then the oldest segments while the log stays at or above ``retention.bytes`` without
  them.

Segments wholly below the log start offset (moved by DeleteRecords) go first, whatever the
policy (Kafka's "log start offset breach").  Otherwise only logs whose ``cleanup.policy``
includes ``delete`` are touched.  ``retention_steps``
(a generator of worker-thread steps, see steps.py) removes the segments from the log on the
owner thread, then hands out their unlinking (and the directory fsync) as a step: reads copy
their bytes out synchronously on the owner thread, so no reader can hold a removed segment
(``file.delete.delay.ms`` exists for Kafka's memory-mapped readers; we keep the setting for
DescribeConfigs only).
"""

from __future__ import annotations

import functools
import os

from .durable import fsync_dir
from .partition_log import PartitionLog
from .segment import Segment
from .steps import Steps


def _largest_timestamp(seg: Segment) -> int:
    if seg.max_timestamp >= 0:
        return seg.max_timestamp
    try:
        return int(os.path.getmtime(seg.log_path) * 1000)
    except OSError:
        return 0


def deletable_segments(plog: PartitionLog, now_ms: int) -> list[tuple[Segment, str]]:
    """(segment, reason) for each segment retention would delete, oldest first."""
    config = plog.config
    candidates = plog.segments[:-1]
    out: list[tuple[Segment, str]] = []
    for seg in candidates:
        if seg.next_offset > plog.log_start_offset:
            break
        out.append((seg, f"it is below the log start offset {plog.log_start_offset}"))
    if not config.delete:
        return out
    if config.retention_ms >= 0:
        for seg in candidates[len(out):]:
            age = now_ms - _largest_timestamp(seg)
            if age <= config.retention_ms:
                break
            out.append((seg, f"its newest batch is {age} ms old > retention.ms={config.retention_ms}"))
    if config.retention_bytes >= 0:
        size = plog.size_in_bytes - sum(seg.size for seg, _ in out)
        for seg in candidates[len(out):]:
            if size - seg.size < config.retention_bytes:
                break
            size -= seg.size
            reason = f"the log is {size + seg.size} bytes > retention.bytes={config.retention_bytes}"
            out.append((seg, reason))
    return out


def retention_steps(plog: PartitionLog, now_ms: int) -> Steps:
    """Delete what ``deletable_segments`` names; one line per deleted segment."""
    doomed = deletable_segments(plog, now_ms)
    if not doomed:
        return []
    removed = plog.remove_oldest_segments(len(doomed))
    yield functools.partial(_delete_files, plog.directory, removed)
    return [f"{plog.name}: deleted segment {os.path.basename(seg.log_path)} "
            f"(offsets {seg.base_offset}..{seg.next_offset - 1}): {reason}; "
            f"log start offset is now {plog.log_start_offset}"
            for seg, reason in doomed]


def _delete_files(directory: str, segments: list[Segment]) -> None:
    for seg in segments:
        seg.delete_files()
    fsync_dir(directory)
