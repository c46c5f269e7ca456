"""Group commit: acks=all requests wait here until an fsync covers their batches.

One flusher task owns all fsyncs of the running broker.  A produce (or an offset commit)
appends on the trio thread, then ``wait_durable(log, last_offset)`` parks it.  The flusher
wakes, takes every log with parked waiters (plus the logs whose ``flush.messages`` /
``flush.ms`` are due), fsyncs them all in ONE worker-thread hop, and releases each waiter
whose offset is now below its log's recovery point.  Appends that arrive during an fsync are
covered by the next round, so one fsync serves every request that came in meanwhile: under
load the cost of durability is amortised across requests and connections.

A waiter is released only by a completed fsync (or an error): a torn write is never
acknowledged.  The worker-thread hop is not abandoned on cancellation, so shutdown waits for
an fsync in progress.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import trio

from databus.storage.health import StorageHealth

log = logging.getLogger(__name__)


class DurabilityError(RuntimeError):
    """The fsync that should have covered a batch failed (KAFKA_STORAGE_ERROR to clients)."""


class _Waiter:
    __slots__ = ("error", "event", "log", "offset")

    def __init__(self, partition_log, offset: int) -> None:
        self.log = partition_log
        self.offset = offset
        self.event = trio.Event()
        self.error: BaseException | None = None


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
        self.rounds = 0

    async def wait_durable(self, partition_log, last_offset: int) -> None:
        """Return once ``last_offset`` of ``partition_log`` is on disk (fsynced)."""
        if partition_log.recovery_point > last_offset:
            return
        waiter = _Waiter(partition_log, last_offset)
        self._waiters.append(waiter)
        self._kick.set()
        await waiter.event.wait()
        if waiter.error is not None:
            raise DurabilityError(str(waiter.error)) from waiter.error

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

        def fsync_all() -> None:
            for key, partition_log in logs.items():
                try:
                    partition_log.flush()
                except BaseException as exc:  # report per log; others still get flushed
                    errors[key] = exc

        await trio.to_thread.run_sync(fsync_all)
        self.rounds += 1
        for waiter in waiters:
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
