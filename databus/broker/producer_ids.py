"""Producer id allocation that never hands out the same id twice, across restarts.

The storage engine remembers idempotent producers by (producer id, epoch) and rebuilds that
state from the log after a restart; an id reused for a new producer would collide with an
old producer's sequence numbers.  Like Kafka's ProducerIdManager we reserve ids in blocks:
the end of the current block is written durably (storage's ``atomic_write``) before any id
of it is handed out, so after a crash allocation resumes past everything possibly used.
The file is read on the first allocation, not when the allocator is built, so building a
broker touches nothing on disk.
"""

from __future__ import annotations

import os
from pathlib import Path

from databus.storage.durable import atomic_write

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"


class ProducerIdAllocator:
    def __init__(self, data_dir: str | os.PathLike, block_size: int = BLOCK_SIZE) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self.block_size = block_size
        self._next: int | None = None
        self._block_end = 0

    def _read_reserved(self) -> int:
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return 0
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{self.path} is damaged: {text[:40]!r} is not an integer") from None

    def _reserve(self, end: int) -> None:
        atomic_write(self.path, f"{end}\n".encode())
        self._block_end = end

    def next_id(self) -> int:
        if self._next is None:
            self._next = self._block_end = self._read_reserved()
        if self._next >= self._block_end:
            self._reserve(self._next + self.block_size)
        producer_id = self._next
        self._next += 1
        return producer_id
