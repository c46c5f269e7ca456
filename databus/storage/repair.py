"""Find and cut out damaged ranges of a partition's segments (``databus repair-log``).

A damaged range starts where a batch fails its checks (length, magic, CRC-32C) and ends at
the next position holding a whole valid batch whose offsets come after the last good one
(found by trying each byte where magic 2 could sit), or at the end of the segment.  Its lost
offsets are those between the last good batch and that next batch (or the next segment's
base offset; for the last segment, everything from the last good batch on is gone).

``repair`` rewrites each damaged segment without its damaged ranges (a new file renamed over
the old one, fsynced) and deletes its ``.index`` / ``.timeindex``, which the broker's
recovery rebuilds at the next start.  The broker must not be running: the caller holds the
data directory's lock.  No network, no trio: plain files in, a report out.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from databus.protocol.records import (
    HEADER_SIZE,
    MAGIC_V2,
    CorruptRecordError,
    validate_batch,
)

from .durable import atomic_writer, fsync_dir

_SEGMENT_LOG = re.compile(r"^(\d{20})\.log$")
_MAGIC_AT = 16  # the magic byte's place in a batch header


@dataclass(frozen=True)
class Damage:
    log_path: str
    start: int  # byte position of the first damaged byte
    end: int  # first byte after the damage (a good batch, or the file's end)
    first_lost: int  # first offset lost
    last_lost: int | None  # last offset lost; None: every offset from first_lost on
    reason: str

    def describe(self) -> str:
        lost = (f"offsets {self.first_lost}..{self.last_lost} lost"
                if self.last_lost is not None and self.last_lost >= self.first_lost
                else "no offsets lost" if self.last_lost is not None
                else f"offsets from {self.first_lost} on lost")
        return (f"{self.log_path}: bytes {self.start}..{self.end - 1} damaged "
                f"({self.reason}); {lost}")


def segment_files(partition_dir: str) -> list[tuple[int, str]]:
    """(base offset, path) of each ``.log`` file, in offset order."""
    found = [(int(m.group(1)), os.path.join(partition_dir, name))
             for name in os.listdir(partition_dir) if (m := _SEGMENT_LOG.match(name))]
    return sorted(found)


def _valid_batch_at(data: bytes, pos: int, floor: int):
    try:
        h = validate_batch(data, pos)
    except CorruptRecordError:
        return None
    return h if h.base_offset >= floor else None


def find_damage(partition_dir: str) -> list[Damage]:
    """Every damaged range in the partition's segments (empty: the partition is whole)."""
    damages = []
    segments = segment_files(partition_dir)
    next_offset = segments[0][0] if segments else 0
    for i, (base, path) in enumerate(segments):
        next_base = segments[i + 1][0] if i + 1 < len(segments) else None
        with open(path, "rb") as f:
            data = f.read()
        next_offset = max(next_offset, base)
        pos = 0
        while pos < len(data):
            try:
                h = validate_batch(data, pos)
                if h.base_offset < next_offset:
                    raise CorruptRecordError(
                        f"batch at byte {pos} has offset {h.base_offset}, expected "
                        f">= {next_offset}")
            except CorruptRecordError as exc:
                resume = _resync(data, pos + 1, next_offset)
                if resume is None:
                    last = None if next_base is None else next_base - 1
                    damages.append(Damage(path, pos, len(data), next_offset, last, str(exc)))
                    break
                good, h_next = resume
                damages.append(Damage(path, pos, good, next_offset, h_next.base_offset - 1,
                                      str(exc)))
                pos = good
                continue
            next_offset = h.base_offset + h.last_offset_delta + 1
            pos += h.size
    return damages


def _resync(data: bytes, start: int, floor: int):
    """(position, header) of the first whole valid batch at or after ``start``."""
    pos = data.find(bytes([MAGIC_V2]), start + _MAGIC_AT)
    while pos >= 0:
        candidate = pos - _MAGIC_AT
        if candidate + HEADER_SIZE <= len(data):
            h = _valid_batch_at(data, candidate, floor)
            if h is not None:
                return candidate, h
        pos = data.find(bytes([MAGIC_V2]), pos + 1)
    return None


def repair(damages: list[Damage]) -> None:
    """Rewrite each damaged segment without its damaged ranges; drop its indexes."""
    by_file: dict[str, list[Damage]] = {}
    for damage in damages:
        by_file.setdefault(damage.log_path, []).append(damage)
    for path, ranges in by_file.items():
        with open(path, "rb") as f:
            data = f.read()
        kept, pos = [], 0
        for damage in sorted(ranges, key=lambda d: d.start):
            kept.append(data[pos:damage.start])
            pos = damage.end
        kept.append(data[pos:])
        with atomic_writer(path, temporary=path + ".repaired") as f:
            for part in kept:
                f.write(part)
        stem = path[: -len(".log")]
        for suffix in (".index", ".timeindex"):
            try:
                os.unlink(stem + suffix)
            except FileNotFoundError:
                pass
        fsync_dir(os.path.dirname(path))
