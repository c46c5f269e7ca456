"""The broker's retention and compaction runs, off the trio thread.

Every ``log.retention.check.interval.ms`` the service runs retention then compaction over
every log.  Storage writes both as steps (databus/storage/steps.py): the parts that change
a log's segment list run here on the trio thread, where every append and fetch runs, and are
short (list changes and renames); the expensive parts (reading and rewriting segments,
fsyncs, unlinking files) are handed to a worker thread with ``trio.to_thread.run_sync``.  So
a compaction of gigabytes does not stall connections: heartbeats, produces and fetches keep
being answered while it runs.

A run in progress is not abandoned on shutdown: the broker waits for the current step
before closing the logs.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from databus.storage.steps import Steps

log = logging.getLogger(__name__)


async def run_steps_in_thread(steps: Steps) -> list[str]:
    """Drive ``steps`` from the trio thread, running each step on a worker thread."""
    result: Any = None
    error: Exception | None = None
    try:
        while True:
            try:
                work = steps.throw(error) if error is not None else steps.send(result)
            except StopIteration as done:
                return done.value
            try:
                result, error = await trio.to_thread.run_sync(work), None
            except Exception as exc:  # noqa: BLE001  (handed to the generator, which decides)
                result, error = None, exc
    finally:
        steps.close()


class RetentionService:
    """``await nursery.start(service.serve)``: retention then compaction every interval."""

    def __init__(self, log_manager, interval_s: float, on_change=None) -> None:
        self.log_manager = log_manager
        self.interval_s = interval_s
        # called after a run that did something (log start offsets moved): fetch sessions
        # must look at every partition again
        self.on_change = on_change
        self.runs = 0

    async def run_once(self) -> list[str]:
        """One retention and one compaction run over every log; the actions taken."""
        actions = await run_steps_in_thread(self.log_manager.retention_steps())
        actions += await run_steps_in_thread(self.log_manager.compaction_steps())
        self.runs += 1
        if actions and self.on_change is not None:
            self.on_change()
        return actions

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await trio.sleep(self.interval_s)
            try:
                await self.run_once()
            except Exception:
                log.exception("retention/compaction failed; will retry next interval")
