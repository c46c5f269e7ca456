"""What the sidecar's group services (delay.py, halfmsg.py) share: started with
``await nursery.start(service.run)``, stopped with ``await service.stop()``."""

from __future__ import annotations

import trio


class BackgroundService:
    """Subclasses write ``_run`` and return from it once ``self._stop`` is set (handing on
    what is ready, committing, leaving the group, so the others take over)."""

    def __init__(self) -> None:
        self._closing = False
        self._stop = trio.Event()
        self._done = trio.Event()

    async def stop(self) -> None:
        self._stop.set()
        await self._done.wait()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        # Started at once: clients and their nurseries are opened inside this task only
        # after it has moved to its final nursery (as the sinks runtime does).
        task_status.started(self)
        try:
            await self._run()
        finally:
            self._done.set()

    async def _run(self) -> None:
        raise NotImplementedError
