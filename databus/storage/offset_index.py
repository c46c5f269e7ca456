"""The ``.index`` file of a segment: sparse map from offset to file position.

Kafka's format: 8-byte entries ``(relative offset u32, position u32)``.  As in Kafka's
LogSegment, the relative offset is the LAST offset of the batch that starts at ``position``,
and an entry is added before a batch once more than ``index.interval.bytes`` were written
since the previous entry (so the first batch of a segment is never indexed: it is at 0).
``lookup(offset)`` answers the position from which to scan for the batch holding ``offset``.
"""

from __future__ import annotations

import struct
from bisect import bisect_right

from .index_file import IndexFile


class OffsetIndex(IndexFile):
    entry = struct.Struct(">II")
    key_type = "I"  # relative offset
    value_type = "I"  # position

    def lookup(self, offset: int) -> tuple[int, int]:
        """(index of the entry used or -1, position): the last entry whose batch ends at or
        before ``offset``; every batch holding an offset >= ``offset`` starts at or after it."""
        i = bisect_right(self.keys, offset - self.base_offset) - 1
        if i < 0:
            return -1, 0
        return i, self.values[i]

    def last(self) -> tuple[int, int] | None:
        """(absolute offset, position) of the last entry."""
        if not self.keys:
            return None
        return self.base_offset + self.keys[-1], self.values[-1]

    def check(self, log_size: int) -> str | None:
        """Why these entries cannot describe a log of ``log_size`` bytes, or None."""
        keys, values = self.keys, self.values
        for i in range(1, len(keys)):
            if keys[i] <= keys[i - 1] or values[i] <= values[i - 1]:
                return f"entry {i} does not increase (offset {keys[i]}, position {values[i]})"
        if values and values[-1] >= log_size:
            return f"last entry points at position {values[-1]}, beyond the log's {log_size} bytes"
        return None

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches ending at or after ``offset`` (the log is cut there)."""
        self.truncate_entries(bisect_right(self.keys, offset - 1 - self.base_offset))
