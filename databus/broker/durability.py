"""Group commit: acks=all requests wait here until an fsync covers their batches.

One flusher task owns all fsyncs of the running broker.  A produce (or an offset commit)
appends on the trio thread and at once ``register``s a waiter per partition it appended to
(all of a request's partitions before awaiting any, so one round covers them all), then
awaits them.  The flusher wakes, takes every log with waiters (plus the logs whose
``flush.messages`` / ``flush.ms`` are due), fsyncs them all at the same time (a worker thread
per log, each log's files together: ``storage.durable.fsync_all``, so the round costs about
one journal commit), and releases each waiter whose offset is now below its log's recovery
point.  Appends that arrive during an fsync are covered by the next round, which starts as
soon as this one ends, so one fsync serves every request that came in meanwhile: under load
the cost of durability is amortised across requests and connections.

A waiter is released only by a completed fsync (or an error): a torn write is never
acknowledged.  The worker-thread hops are not abandoned on cancellation, so shutdown waits
for an fsync in progress.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable

import trio

from databus.storage.health import StorageHealth

log = logging.getLogger(__name__)


class DurabilityError(RuntimeError):
    """The fsync that should have covered a batch failed (KAFKA_STORAGE_ERROR to clients)."""


class _Waiter:
    __slots__ = ("error", "event", "log", "offset", "round_end", "round_start")

    def __init__(self, partition_log, offset: int) -> None:
        self.log = partition_log
        self.offset = offset
        self.event = trio.Event()
        self.error: BaseException | None = None
        # the fsync round that released it (perf_counter s): the latency trace's stamps
        self.round_start = self.round_end = 0.0

    async def wait(self) -> None:
        await self.event.wait()
        if self.error is not None:
            raise DurabilityError(str(self.error)) from self.error


class GroupCommit:
    def __init__(
        self,
        due_logs: Callable[[int], Iterable] = lambda now_ms: (),
        check_interval_s: float = 1.0,
        health: StorageHealth | None = None,
    ) -> None:
        """``due_logs(now_ms)`` yields logs whose periodic flush (flush.ms/messages) is due."""
        self._due_logs = due_logs
        self._check_interval_s = check_interval_s
        self._health = health  # fsync failures are counted there, logged once an episode
        self._waiters: list[_Waiter] = []
        self._kick = trio.Event()
        # The round's threads are its own: retention and compaction hops cannot delay it.
        self._threads = trio.CapacityLimiter(16)
        self.rounds = 0

    def register(self, partition_log, last_offset: int) -> _Waiter | None:
        """Ask for ``last_offset`` of ``partition_log`` to be fsynced; ``await
        waiter.wait()`` returns once it is (None: it already is).  Register every partition
        of a request before awaiting any: a waiter registered later may miss the round."""
        if partition_log.recovery_point > last_offset:
            return None
        waiter = _Waiter(partition_log, last_offset)
        self._waiters.append(waiter)
        self._kick.set()
        return waiter

    async def wait_durable(self, partition_log, last_offset: int) -> None:
        """Return once ``last_offset`` of ``partition_log`` is on disk (fsynced)."""
        waiter = self.register(partition_log, last_offset)
        if waiter is not None:
            await waiter.wait()

    def kick(self) -> None:
        """Ask for a round now (a log reached its flush.messages)."""
        self._kick.set()

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                with trio.move_on_after(self._check_interval_s):
                    await self._kick.wait()
                self._kick = trio.Event()
                await self.flush_round()
        finally:
            for waiter in self._waiters:
                waiter.error = RuntimeError("broker shutting down")
                waiter.event.set()
            self._waiters = []

    async def flush_round(self) -> None:
        waiters, self._waiters = self._waiters, []
        logs = {id(w.log): w.log for w in waiters}
        for due in self._due_logs(int(time.time() * 1000)):
            logs.setdefault(id(due), due)
        if not logs:
            return
        errors: dict[int, BaseException] = {}
        started = time.perf_counter()

        def flush(key: int, partition_log) -> None:
            try:
                partition_log.flush()
            except BaseException as exc:  # report per log; others still get flushed
                errors[key] = exc

        if len(logs) == 1:
            await trio.to_thread.run_sync(flush, *next(iter(logs.items())),
                                          limiter=self._threads)
        else:  # every log's fsyncs at the same time: they share the journal commit
            async with trio.open_nursery() as nursery:
                for key, partition_log in logs.items():
                    nursery.start_soon(functools.partial(
                        trio.to_thread.run_sync, flush, key, partition_log,
                        limiter=self._threads))
        self.rounds += 1
        ended = time.perf_counter()
        for waiter in waiters:
            waiter.round_start, waiter.round_end = started, ended
            error = errors.get(id(waiter.log))
            if error is not None:
                if self._health is not None:
                    self._health.failed(error)  # one ERROR per episode, not per waiter
                else:
                    log.error("fsync failed: %s", error)
                waiter.error = error
                waiter.event.set()
            elif waiter.log.recovery_point > waiter.offset:
                waiter.event.set()
            else:  # appended after our flush started its log; next round covers it
                self._waiters.append(waiter)
        if self._waiters:
            self._kick.set()
