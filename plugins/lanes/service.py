"""One sidecar's side of the lanes: the registry it follows, the lane topics it has made
sure of, expiry cleanup, and the per-lane counters.

A ``LaneService`` exists per (trio run, cluster, the ``lanes:`` settings it uses: registry
topic, topic template, expiry check): route factories are called while a routing table is
built (a start, a reload), so the first one starts the service as a trio system task and the
others find it.  A reload that changes only the policy or the header keeps the service; the
counters (``Counters``) belong to the trio run, so no reload resets them.  The service keeps
routing from the state it last read when the registry cannot be reached, and retries.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass

import trio

from databus.client import Admin
from databus.lanes import model
from databus.lanes.config import LanesConfig
from databus.lanes.registry import (
    RegistryFollower,
    RegistryWriter,
    delete_lane,
    ensure_lane_topics,
    now_ms,
)

log = logging.getLogger("databus.lanes")

RETRY_S = 1.0
# A lane message waits this long at most for the registry to be read at start.
LOAD_TIMEOUT_S = 30.0
# Metric series per sidecar before further (stream, lane) pairs share one.
MAX_LANE_SERIES = 1000
OTHER = "(other)"


@dataclass
class LaneStats:
    routed: int = 0  # to the lane's topic
    fallback: int = 0  # lane unknown or expired: sent to the main topic (policy main)
    rejected: int = 0  # lane unknown or expired: refused (policy reject)


class Counters:
    """The per-lane counters of one trio run (a sidecar), whatever services come and go."""

    def __init__(self) -> None:
        self.stats: dict[tuple[str, str], LaneStats] = {}
        self.cleaned = 0  # expired lanes this sidecar cleaned up
        self.enabled = False  # lanes are on in the configuration in use (the series shown)

    def stat(self, stream: str, lane: str) -> LaneStats:
        """The counters of (``stream``, ``lane``); past MAX_LANE_SERIES pairs (lane names
        come from apps' headers) new ones are counted under lane ``(other)``."""
        stats = self.stats.get((stream, lane))
        if stats is None:
            if len(self.stats) >= MAX_LANE_SERIES:
                lane = OTHER
                stats = self.stats.get((stream, lane))
            if stats is None:
                stats = self.stats[(stream, lane)] = LaneStats()
        return stats


_COUNTERS: dict[object, Counters] = {}


def counters() -> Counters:
    try:
        token = trio.lowlevel.current_trio_token()
    except RuntimeError:  # outside trio (databus bench lanes)
        token = None
    found = _COUNTERS.get(token)
    if found is None:
        found = _COUNTERS[token] = Counters()
    return found


class LaneService:
    def __init__(self, bootstrap: str, settings: LanesConfig) -> None:
        self.bootstrap = bootstrap
        self.settings = settings
        self.id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.follower = RegistryFollower(bootstrap, settings.registry_topic)
        self.ready = trio.Event()  # the registry is read, the admin client is up
        self.topics: set[str] = set()  # lane topics known to exist
        self._creating: dict[str, trio.Event] = {}
        self.counters = counters()
        self._admin: Admin | None = None
        self._writer: RegistryWriter | None = None
        self.scope = trio.CancelScope()  # stop(): the sidecar stops, or a reload replaced it
        self.key: tuple | None = None  # in _SERVICES (service_for's)
        self.started = False

    @property
    def registry(self) -> model.Registry:
        return self.follower.state

    def stat(self, stream: str, lane: str) -> LaneStats:
        return self.counters.stat(stream, lane)

    async def run(self) -> None:
        """Forever (a system task): follow the registry, clean expired lanes up."""
        while True:
            try:
                async with Admin(self.bootstrap) as admin, \
                        RegistryWriter(self.bootstrap, self.settings.registry_topic) as writer, \
                        trio.open_nursery() as nursery:
                    await nursery.start(self.follower.run)
                    self._admin, self._writer = admin, writer
                    self.ready.set()
                    await self._expiry_loop()
            except Exception as exc:
                # Routing goes on from the state read so far; the follower reads the topic
                # again from its start when it runs again.
                log.warning("lanes: registry %s on %s: %s; retrying",
                            self.settings.registry_topic, self.bootstrap, exc)
            finally:
                self._admin = self._writer = None
            await trio.sleep(RETRY_S)

    async def ensure_topic(self, topic: str, lane: model.Lane) -> None:
        """Create ``topic`` for ``lane`` unless it is known to exist (one creation at a
        time per topic; the others wait for it)."""
        while topic not in self.topics:
            pending = self._creating.get(topic)
            if pending is not None:
                await pending.wait()
                continue
            self._creating[topic] = done = trio.Event()
            try:
                await self.ready.wait()
                assert self._admin is not None
                if await ensure_lane_topics(self._admin, [topic], lane):
                    log.info("lanes: created %s (lane %s, %d partition(s))", topic, lane.name,
                             lane.partitions)
                self.topics.add(topic)
            finally:
                del self._creating[topic]
                done.set()

    async def _expiry_loop(self) -> None:
        period = self.settings.expiry_check_ms / 1000
        while True:
            await trio.sleep(period)
            for lane in self.registry.expired(now_ms()):
                await self._maybe_clean(lane)
            for claim in self.registry.stale_claims():
                if claim.claimant == self.id:
                    await self._writer.put(
                        model.claim_key(claim.lane, claim.created, claim.claimant), None)

    async def _maybe_clean(self, lane: model.Lane) -> None:
        """Claim ``lane``'s cleanup; the first claim in the log does it (model.py)."""
        state, writer = self.registry, self._writer
        winner = state.claim_winner(lane, now_ms())
        if winner is None:
            at = now_ms()
            offset = await writer.put(model.claim_key(lane.name, lane.created, self.id),
                                      model.Claim(lane.name, lane.created, self.id, at))
            await self.follower.wait_for(offset)
            winner = state.claim_winner(lane, now_ms())
        if winner is None or winner.claimant != self.id:
            return
        current = state.lanes.get(lane.name)
        if current is None or current.created != lane.created:
            # Another sidecar's claim won, cleaned the lane up and withdrew its claim while
            # ours was on its way: ours is now the only one, for a lane already gone.
            return
        deleted = await delete_lane(self._admin, writer, self.settings.topic, lane.name,
                                    state=state)
        self.topics.difference_update(deleted)
        self.counters.cleaned += 1
        log.info("lanes: lane %s expired; deleted its topics: %s", lane.name,
                 ", ".join(deleted) or "none")


_SERVICES: dict[tuple, LaneService] = {}


def _key(bootstrap: str, settings: LanesConfig) -> tuple:
    return (trio.lowlevel.current_trio_token(), bootstrap, settings.registry_topic,
            settings.topic, settings.expiry_check_ms)


def service_for(bootstrap: str, settings: LanesConfig) -> LaneService:
    """The service of this trio run for ``bootstrap`` and ``settings``, made if new but not
    started: a routing table is built before the configuration is known to be valid, and a
    refused reload must act on nothing (no registry topic created).  ``start_services``
    starts it once its configuration is live (or its first lane message does)."""
    key = _key(bootstrap, settings)
    service = _SERVICES.get(key)
    if service is None:
        service = _SERVICES[key] = LaneService(bootstrap, settings)
        service.key = key
    return service


def start(service: LaneService) -> None:
    if not service.started and service.key is not None:
        service.started = True
        trio.lowlevel.spawn_system_task(_run_then_forget, service.key, service)


def start_services() -> None:
    """Start this run's services not started yet (the configuration using them is live)."""
    for service in services():
        start(service)


async def _run_then_forget(key, service: LaneService) -> None:
    try:
        with service.scope:
            await service.run()
    finally:
        _SERVICES.pop(key, None)


def stop_services(keep: LanesConfig | None = None) -> None:
    """Stop this trio run's services, except those serving the ``keep`` settings (a reload
    that changed or removed ``lanes:``; the sidecar stopping)."""
    for key, service in list(_SERVICES.items()):
        if key[0] is trio.lowlevel.current_trio_token() and (
                keep is None or key != _key(service.bootstrap, keep)):
            service.scope.cancel()
            if not service.started:  # no task to forget it
                _SERVICES.pop(key, None)


def services() -> list[LaneService]:
    try:
        token = trio.lowlevel.current_trio_token()
    except RuntimeError:
        return list(_SERVICES.values())
    return [s for key, s in list(_SERVICES.items()) if key[0] is token]
