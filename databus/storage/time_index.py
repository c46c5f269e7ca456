"""The ``.timeindex`` file of a segment: sparse, monotonic map from timestamp to offset.

Kafka's format: 12-byte entries ``(timestamp i64, relative offset u32)``.  An entry
``(T, O)`` says "the largest timestamp of every batch up to offset O is T"; entries are added
together with offset-index entries, only when the segment's max timestamp grew, plus a last
one when the segment stops being active, so timestamps strictly increase and the last entry
of an inactive segment is its largest timestamp.
"""

from __future__ import annotations

import struct
from bisect import bisect_left

from .index_file import IndexFile


class TimeIndex(IndexFile):
    entry = struct.Struct(">qI")
    key_type = "q"  # timestamp
    value_type = "I"  # relative offset

    def lookup(self, timestamp: int) -> int:
        """An offset from which to scan for the first batch whose max timestamp >= timestamp:
        the offset of the last entry whose timestamp is strictly smaller (every batch up to
        it is older), else the segment's base offset."""
        i = bisect_left(self.keys, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self.base_offset + self.values[i]

    def last(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry."""
        if not self.keys:
            return None
        return self.keys[-1], self.base_offset + self.values[-1]

    def maybe_entry(self, timestamp: int, offset: int) -> tuple[int, int] | None:
        """The entry to append for (max timestamp so far, its offset), or None if not newer."""
        if self.keys and timestamp <= self.keys[-1]:
            return None
        return timestamp, offset - self.base_offset

    def check(self, last_offset: int) -> str | None:
        keys, values = self.keys, self.values
        for i in range(1, len(keys)):
            if keys[i] <= keys[i - 1] or values[i] < values[i - 1]:
                return f"entry {i} is not monotonic (timestamp {keys[i]}, offset {values[i]})"
        if values and self.base_offset + values[-1] > last_offset:
            return (
                f"last entry names offset {self.base_offset + values[-1]}, beyond the "
                f"segment's last offset {last_offset}"
            )
        return None

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries naming offsets >= ``offset``."""
        rel = offset - self.base_offset
        count = len(self.values)
        while count and self.values[count - 1] >= rel:
            count -= 1
        self.truncate_entries(count)
