"""A file of fixed-size big-endian entries kept in memory: the common part of the ``.index``
and ``.timeindex`` files.

Entries are appended to the file as they are created (never preallocated), so the file always
holds exactly the valid entries and a Kafka tool can read it after any clean close.  The
in-memory copy is two parallel ``array`` columns that ``bisect`` searches directly.  Every
file operation raises ``OSError``; the caller (the segment) decides what that means.
"""

from __future__ import annotations

import os
import struct
from array import array


class IndexFile:
    """Base of OffsetIndex and TimeIndex: ``entry`` packs (key, value) columns."""

    entry: struct.Struct
    key_type: str
    value_type: str

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.keys = array(self.key_type)
        self.values = array(self.value_type)
        self._fd = -1

    # -- file lifecycle ---------------------------------------------------------------------

    def open(self, *, create: bool = False) -> None:
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self._fd = os.open(self.path, flags, 0o644)

    def read_entries(self) -> str | None:
        """Load the file's entries; a description of the problem if its size is not whole."""
        with open(self.path, "rb") as f:
            data = f.read()
        problem = None
        whole = len(data) - len(data) % self.entry.size
        if whole != len(data):
            problem = f"size {len(data)} is not a multiple of {self.entry.size}"
        self.keys = array(self.key_type)
        self.values = array(self.value_type)
        for key, value in self.entry.iter_unpack(data[:whole]):
            self.keys.append(key)
            self.values.append(value)
        return problem

    def reset(self) -> None:
        """Forget every entry, in memory and in the file (before a rebuild)."""
        self.keys = array(self.key_type)
        self.values = array(self.value_type)
        os.ftruncate(self._fd, 0)

    @property
    def file_size(self) -> int:
        return len(self.keys) * self.entry.size

    def __len__(self) -> int:
        return len(self.keys)

    def write(self, entries: list[tuple[int, int]]) -> None:
        """Append entries to the file and memory; on OSError the file is cut back first."""
        if not entries:
            return
        start = self.file_size
        data = b"".join(self.entry.pack(k, v) for k, v in entries)
        try:
            _pwrite_all(self._fd, data, start)
        except OSError:
            _truncate_quietly(self._fd, start)
            raise
        for k, v in entries:
            self.keys.append(k)
            self.values.append(v)

    def truncate_entries(self, count: int) -> None:
        """Keep the first ``count`` entries."""
        if count >= len(self.keys):
            return
        del self.keys[count:]
        del self.values[count:]
        os.ftruncate(self._fd, self.file_size)

    def rewrite(self, entries: list[tuple[int, int]]) -> None:
        self.reset()
        self.write(entries)

    def fileno(self) -> int:
        return self._fd

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _pwrite_all(fd: int, data, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        position += written
        view = view[written:]


def _truncate_quietly(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass  # the caller reports the original error; recovery trims the rest


pwrite_all = _pwrite_all
truncate_quietly = _truncate_quietly
