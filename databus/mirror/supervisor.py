"""Run every mirror of a config, each in its own cancel scope, and apply new configs.

``apply(config)`` compares mirrors by name: a mirror whose settings (or whose source or
target cluster's settings) changed is restarted, a removed one is cancelled, a new one is
started; the others keep running untouched.  A mirror that fails unexpectedly is logged and
started again after a backoff, forever: a mirror never gives up on its own.
"""

from __future__ import annotations

import logging

import trio

from databus.client.backoff import ExponentialBackoff
from databus.config import DatabusConfig
from databus.mirror.config import MirrorConfig

from .engine import RETRY_BACKOFF, MirrorEngine
from .metrics import MirrorMetrics

log = logging.getLogger("databus.mirror")


def _identity(config: DatabusConfig, mirror: MirrorConfig) -> tuple:
    return (mirror, config.clusters[mirror.source], config.clusters[mirror.target])


class MirrorSupervisor:
    def __init__(self, config: DatabusConfig, metrics: MirrorMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or MirrorMetrics()
        self.engines: dict[str, MirrorEngine] = {}
        self._running: dict[str, tuple[tuple, trio.CancelScope]] = {}
        self._nursery: trio.Nursery | None = None

    @property
    def running(self) -> list[str]:
        """Names of the mirrors being run (started, or restarting after a failure)."""
        return sorted(self._running)

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.apply(self.config)
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._nursery = None

    def apply(self, config: DatabusConfig) -> None:
        """Start, stop and restart mirrors so that exactly ``config``'s mirrors run."""
        assert self._nursery is not None, "serve() first"
        self.config = config
        wanted = {m.name: m for m in config.mirrors}
        for name in list(self._running):
            identity, scope = self._running[name]
            if name not in wanted or _identity(config, wanted[name]) != identity:
                log.info("mirror %s: %s", name, "removed" if name not in wanted else "changed, restarting")
                scope.cancel()
                del self._running[name]
                self.engines.pop(name, None)
                if name not in wanted:
                    self.metrics.remove(name)
        for name, mirror in wanted.items():
            if name not in self._running:
                scope = trio.CancelScope()
                self._running[name] = (_identity(config, mirror), scope)
                self._nursery.start_soon(self._keep_running, config, mirror, scope)

    async def _keep_running(self, config: DatabusConfig, mirror: MirrorConfig,
                            scope: trio.CancelScope) -> None:
        backoff = ExponentialBackoff(*(int(s * 1000) for s in RETRY_BACKOFF))
        failures = 0
        with scope:
            while True:
                engine = MirrorEngine(mirror, config.clusters, self.metrics)
                self.engines[mirror.name] = engine
                try:
                    await engine.run()
                except Exception:
                    log.exception("mirror %s failed; starting it again", mirror.name)
                    await trio.sleep(backoff.backoff_ms(failures) / 1000)
                    failures += 1
