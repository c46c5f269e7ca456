"""The index builder the sinks runtime drives (hookspecs.databus_sink).

Its durable offsets are its own: ``open`` returns the partition's next offset from the
database (the runtime reads from there); each batch's entries are committed with that
offset in one SQLite transaction, and ``flush`` reports the offsets committed so far so the
group follows (for ``databus index status`` and the sinks' lag metrics).  Records handed
again (before an offset already taken) are skipped.  ``trim`` (called by the runtime every
few seconds with the partitions' log start offsets) drops the entries of records the
cluster's retention removed.  After ``databus index rebuild`` (store.py) ``flush`` or
``write`` raises, and the runtime starts the builder again from the beginning.

Pipelined: ``write`` extracts the batch's entries in a worker thread, then hands them to the
index's writer thread and returns; SQLite inserts while the next batch is fetched and
extracted (SQLite's own work runs without the GIL).  At most ``QUEUED`` batches wait; a
forced ``flush``, ``open``, ``close`` and ``aclose`` wait until every batch handed is
committed; batches that wait are committed in one transaction (fewer page writes).  Runs
merge in the store's own merge thread (store.py), so the build goes on meanwhile.  A
failure in the writer (a rebuild under it, a full disk) stops it taking
batches and is raised by the next call.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

import trio

from .fields import Extractor
from .store import RECENT_MAX, IndexStore

log = logging.getLogger("databus_plugins.index")

# Batches (a poll's records of one partition) waiting for the writer: enough that fetching
# and extracting go on while the writer moves ``recent`` to a run (a second or more).
QUEUED = 32


class IndexSink:
    def __init__(self, name: str, path: str, extractor: Extractor, *,
                 recent_max: int = RECENT_MAX, registry: Any = None) -> None:
        self.name = name
        self.registry = registry  # format registry: registry_values.RegistryValues
        self.path = path
        self.extractor = extractor
        self.recent_max = recent_max
        self.store: IndexStore | None = None
        self.next: dict[tuple[str, int], int] = {}  # after the last record taken
        self.durable: dict[tuple[str, int], int] = {}  # after the last record committed
        self.start: dict[tuple[str, int], int] = {}  # log start offsets trimmed to
        self.generation = 0
        self._jobs: queue.Queue = queue.Queue(QUEUED)
        self._writer: threading.Thread | None = None
        self._failed: BaseException | None = None

    # -- the runtime's calls (trio) -------------------------------------------------------

    async def open(self, tp, committed):
        await self._drain()
        if self.registry is not None:
            paths = {name: source.path for name, source in self.extractor.fields.items()
                     if source.kind == "value"}
            await trio.to_thread.run_sync(self.registry.check_paths, self.name, tp[0], paths)
        return await trio.to_thread.run_sync(self._open, tuple(tp), committed)

    async def write(self, tp, records):
        self._raise()
        tp = tuple(tp)
        known = self.next.get(tp)
        if known is not None and records[0].offset < known:
            records = [r for r in records if r.offset >= known]
            if not records:
                return None
        entries, skipped = await trio.to_thread.run_sync(self.extractor.entries, records)
        next_offset = records[-1].offset + 1
        await self._submit(("add", tp, records[0].offset, next_offset, entries, skipped))
        self.next[tp] = next_offset
        return None  # a field that is missing or undecodable is counted, never rejected

    async def flush(self, partitions, force):
        if force:
            await self._drain()
        self._raise()
        if self.store is not None and self._jobs.unfinished_tasks == 0:
            # An idle builder notices a rebuild too.
            await trio.to_thread.run_sync(self.store.check, self.generation)
        durable = dict(self.durable)
        return {tp: durable[tp] for tp in map(tuple, partitions) if tp in durable}

    async def trim(self, starts):
        if self.store is not None:
            await self._submit(("trim", {tuple(tp): n for tp, n in starts.items()}))

    async def close(self, partitions):
        await self._drain()
        for tp in map(tuple, partitions):
            self.next.pop(tp, None)
            self.durable.pop(tp, None)

    async def aclose(self):
        if self._writer is not None:
            await trio.to_thread.run_sync(self._jobs.put, None)
            await trio.to_thread.run_sync(self._writer.join)
            self._writer = None
        if self.store is not None:
            await trio.to_thread.run_sync(self.store.close)
            self.store = None

    # -- the writer thread ----------------------------------------------------------------

    async def _submit(self, job) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._run_writer, daemon=True,
                                            name=f"index-{self.name}")
            self._writer.start()
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            await trio.to_thread.run_sync(self._jobs.put, job)

    async def _drain(self) -> None:
        if self._jobs.unfinished_tasks:
            await trio.to_thread.run_sync(self._jobs.join)

    def _raise(self) -> None:
        if self._failed is not None:
            raise self._failed

    def _run_writer(self) -> None:
        while True:
            jobs = [self._jobs.get()]
            # Batches waiting meanwhile go in the same transaction (group commit).
            while jobs[-1] is not None and jobs[-1][0] == "add":
                try:
                    jobs.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            adds = [job[1:] for job in jobs if job is not None and job[0] == "add"]
            try:
                if self._failed is None:  # after a failure, nothing more is written
                    if adds:
                        self.store.add_many(adds, self.generation)
                        for tp, _first, next_offset, _entries, _skipped in adds:
                            self.durable[tp] = next_offset
                    for job in jobs:
                        if job is not None and job[0] == "trim":
                            self._trim(job[1])
            except BaseException as exc:  # raised to the runtime by the next call
                self._failed = exc
            finally:
                for _job in jobs:
                    self._jobs.task_done()
            if jobs[-1] is None:
                return

    def _open(self, tp, committed):
        if self.store is None:
            # Merges run beside the builder (their own thread and connection), so the
            # build does not pause while a big one copies millions of entries.
            self.store = IndexStore(self.path, recent_max=self.recent_max,
                                    background_merges=True)
            self.generation = self.store.generation()
        stored = self.store.offsets().get(tp)
        if stored is None:
            # Nothing of this partition indexed: from the beginning, even if the group has
            # committed offsets (the database was removed to rebuild it).
            start = 0 if committed else None
        else:
            start = stored
            self.next[tp] = self.durable[tp] = stored
        if start != committed:
            log.info("index %r: %s-%d from offset %s (the index's own; the group has %s)",
                     self.name, tp[0], tp[1], start, committed)
        return start

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
