"""The index builder the sinks runtime drives (hookspecs.databus_sink).

Its durable offsets are its own: ``open`` returns the partition's next offset from the
database (the runtime reads from there), each ``write`` commits the batch's entries with that
offset in one SQLite transaction, and ``flush`` reports those offsets so the group follows
(for ``databus index status`` and the sinks' lag metrics).  Records handed again (before an
offset the database already has) are skipped.  ``trim`` (called by the runtime every few
seconds with the partitions' log start offsets) drops the entries of records the cluster's
retention removed.  After ``databus index rebuild`` (store.py)
``flush`` or ``write`` raises, and the runtime starts the builder again from the beginning.  Blocking work runs in a worker thread.
"""

from __future__ import annotations

import logging

import trio

from .fields import Extractor
from .store import IndexStore

log = logging.getLogger("databus_plugins.index")


class IndexSink:
    def __init__(self, name: str, path: str, extractor: Extractor) -> None:
        self.name = name
        self.path = path
        self.extractor = extractor
        self.store: IndexStore | None = None
        self.next: dict[tuple[str, int], int] = {}
        self.start: dict[tuple[str, int], int] = {}  # log start offsets trimmed to
        self.generation = 0

    async def open(self, tp, committed):
        return await trio.to_thread.run_sync(self._open, tuple(tp), committed)

    async def write(self, tp, records):
        await trio.to_thread.run_sync(self._write, tuple(tp), records)
        return None  # a field that is missing or undecodable is counted, never rejected

    async def flush(self, partitions, force):
        if self.store is not None:  # an idle builder notices a rebuild too
            await trio.to_thread.run_sync(self.store.check, self.generation)
        return {tp: self.next[tp] for tp in map(tuple, partitions) if tp in self.next}

    async def trim(self, starts):
        if self.store is not None:
            await trio.to_thread.run_sync(self._trim, {tuple(tp): n for tp, n in starts.items()})

    async def close(self, partitions):
        for tp in partitions:
            self.next.pop(tuple(tp), None)

    async def aclose(self):
        if self.store is not None:
            await trio.to_thread.run_sync(self.store.close)
            self.store = None

    def _open(self, tp, committed):
        if self.store is None:
            self.store = IndexStore(self.path)
            self.generation = self.store.generation()
        stored = self.store.offsets().get(tp)
        if stored is None:
            # Nothing of this partition indexed: from the beginning, even if the group has
            # committed offsets (the database was removed to rebuild it).
            start = 0 if committed else None
        else:
            start = stored
            self.next[tp] = stored
        if start != committed:
            log.info("index %r: %s-%d from offset %s (the index's own; the group has %s)",
                     self.name, tp[0], tp[1], start, committed)
        return start

    def _write(self, tp, records):
        known = self.next.get(tp)
        if known is not None and records[0].offset < known:
            records = [r for r in records if r.offset >= known]
            if not records:
                return
        entries, skipped = self.extractor.entries(records)
        next_offset = records[-1].offset + 1
        self.store.add(tp, records[0].offset, next_offset, entries, skipped, self.generation)
        self.next[tp] = next_offset

    def _trim(self, starts):
        starts = {tp: start for tp, start in starts.items() if start > self.start.get(tp, 0)}
        if not starts:
            return
        dropped = self.store.trim(starts, self.generation)
        self.start.update(starts)
        if dropped:
            log.info("index %r: %d entries dropped, their records removed by retention (%s)",
                     self.name, dropped, ", ".join(f"{t}-{p} before {n}"
                                                   for (t, p), n in sorted(starts.items())))
