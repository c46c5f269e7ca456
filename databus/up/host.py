"""The sidecar of a host, with the services ``databus up`` runs beside its ingress.

The sidecar (databus/sidecar/app.py) knows only the Companion shape; here the sinks runtime
and the mirrors become companions: started in the sidecar's root nursery, checked and applied
on each reload with its routing table, stopped gracefully when it drains.
"""

from __future__ import annotations

from typing import Any

import trio

from databus.config import DatabusConfig
from databus.mirror.supervisor import MirrorSupervisor
from databus.sidecar.app import Sidecar
from databus.sinks.metrics import SinkCollector
from databus.sinks.runtime import SinkSupervisor


class SinksCompanion:
    """Consumer-side plugins (databus.sinks), with the sidecar's clusters."""

    def __init__(self, sidecar: Sidecar) -> None:
        self.supervisor = SinkSupervisor(
            sidecar.pm, sidecar.bootstrap_map,
            stop_timeout=sidecar.config.sidecar.shutdown_timeout_ms / 1000,
        )
        self.collector = SinkCollector(self.supervisor)

    @property
    def runners(self) -> dict:
        return self.supervisor.runners

    async def serve(self, config: DatabusConfig, *, task_status=trio.TASK_STATUS_IGNORED):
        await self.supervisor.serve(self.supervisor.prepare(config), task_status=task_status)

    def prepare(self, config: DatabusConfig) -> Any:
        return self.supervisor.prepare(config)

    async def apply(self, prepared: Any) -> None:
        await self.supervisor.apply(prepared)

    async def aclose(self) -> None:
        await self.supervisor.aclose()


class MirrorsCompanion:
    """The config's mirrors (none: an idle supervisor that a reload adding mirrors starts
    them in)."""

    def __init__(self, sidecar: Sidecar) -> None:
        self.supervisor = MirrorSupervisor(sidecar.config)
        self.collector = self.supervisor.metrics.collector

    @property
    def running(self) -> list[str]:
        return self.supervisor.running

    async def serve(self, config: DatabusConfig, *, task_status=trio.TASK_STATUS_IGNORED):
        self.supervisor.config = config
        await self.supervisor.serve(task_status=task_status)

    def prepare(self, config: DatabusConfig) -> DatabusConfig:
        return config

    async def apply(self, prepared: DatabusConfig) -> None:
        self.supervisor.apply(prepared)  # adds, removes, restarts only the changed mirrors

    async def aclose(self) -> None:
        pass  # mirrors stop with the sidecar's nursery


def host_sidecar(config: DatabusConfig, **kwargs: Any) -> Sidecar:
    """The sidecar ``databus up`` and ``databus sidecar`` run: mirrors and sinks beside it."""
    return Sidecar(config, companions=(MirrorsCompanion, SinksCompanion), **kwargs)


def companion(sidecar: Sidecar, kind: type) -> Any:
    """The sidecar's companion of ``kind`` (tests and status pages look at them)."""
    return next(c for c in sidecar.companions if isinstance(c, kind))
