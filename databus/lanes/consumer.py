"""``LaneConsumer``: our Consumer reading one lane of some topics, or their main lane.

::

    config = {"group.id": "billing-test", "lane": "feature-x", "lane.consume.main": True}
    async with LaneConsumer("127.0.0.1:9092", ["orders"], config) as consumer:
        for record in await consumer.poll(1.0):
            ...

The lane settings ride in the consumer's config beside Kafka's keys (taken out before the
rest goes to the Consumer):

* ``lane``: the lane to read (absent or empty: the main lane).
* ``lane.consume.main`` (false): a lane consumer also reads the main topics.
* ``main.consume.orphans`` (false): a main consumer also takes the messages of live lanes
  that have no live consumer, and gives them back when one appears.
* ``lanes.check.interval.ms`` (1000): how often the registry's state is applied to the
  subscription (orphans found or gone, a lane expired).
* ``lane.heartbeat.interval.ms`` (1000): how often a lane consumer writes its heartbeat;
  it counts as live for three intervals after the last.
* ``lanes.registry.topic`` (databus-lanes), ``lanes.topic`` ({topic}.lane.{lane}): as the
  sidecar's ``lanes:`` settings.

Under asyncio (``asyncio.run``) it works the same: as ``databus.AsyncClient`` does, the
consumer then lives in a trio thread of its own and each call is awaited from a worker
thread (``asyncio.to_thread``); under trio it runs in the caller's trio run.

The registry is followed in the background (model.subscription decides the topics); a lane
consumer creates its lane's topics if no message created them yet, so that it is subscribed
from its start.  Closing writes the heartbeat's tombstone: the main consumers take the lane
over at their next check instead of after the heartbeat times out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import sniffio
import trio

from databus.client import Admin, Consumer

from . import model
from .registry import (
    DEFAULT_REGISTRY_TOPIC,
    RegistryFollower,
    RegistryWriter,
    ensure_lane_topics,
    now_ms,
)

if TYPE_CHECKING:
    from databus.client.sync import _TrioThread

log = logging.getLogger("databus.lanes")

LANE_KEYS = {
    "lane": "", "lane.consume.main": False, "main.consume.orphans": False,
    "lanes.check.interval.ms": 1000, "lane.heartbeat.interval.ms": 1000,
    "lanes.registry.topic": DEFAULT_REGISTRY_TOPIC, "lanes.topic": model.DEFAULT_TEMPLATE,
}


def _split(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(lane settings, Kafka consumer settings) of ``config``; bad lane values raise
    ValueError naming the key."""
    lane: dict[str, Any] = dict(LANE_KEYS)
    kafka = {}
    for key, value in config.items():
        if key not in LANE_KEYS:
            kafka[key] = value
            continue
        default = LANE_KEYS[key]
        if isinstance(default, bool):
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise ValueError(f"{key} must be true or false, got {value!r}")
        elif isinstance(default, int):
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"{key} must be a number of ms, got {value!r}") from None
            if value <= 0:
                raise ValueError(f"{key} must be positive, got {value}")
        lane[key] = value
    if lane["lane"]:
        model.check_lane_name(lane["lane"])
    model.check_template(lane["lanes.topic"])
    if lane["lane"] and lane["main.consume.orphans"]:
        raise ValueError("main.consume.orphans is for main-lane consumers (no `lane`)")
    return lane, kafka


class LaneConsumer:
    def __init__(self, bootstrap_servers: str, topics: list[str] | str,
                 config: Mapping[str, Any]) -> None:
        self.bootstrap = bootstrap_servers
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        settings, kafka = _split(config)
        self.lane: str | None = settings["lane"] or None
        self.consume_main = settings["lane.consume.main"]
        self.consume_orphans = settings["main.consume.orphans"]
        self.check_interval = settings["lanes.check.interval.ms"] / 1000
        self.heartbeat_ms = settings["lane.heartbeat.interval.ms"]
        self.template = settings["lanes.topic"]
        self.registry_topic = settings["lanes.registry.topic"]
        self.consumer = Consumer(bootstrap_servers, kafka)
        self.group = kafka.get("group.id", "")
        self.id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.follower = RegistryFollower(bootstrap_servers, self.registry_topic)
        self._stack: contextlib.AsyncExitStack | None = None
        self._subscribed: list[str] | None = None
        self._thread: _TrioThread | None = None  # under asyncio: the trio thread the consumer lives in

    def _from_asyncio(self) -> bool:
        """Called from asyncio code (not from the consumer's own trio thread)?"""
        try:
            return sniffio.current_async_library() == "asyncio"
        except sniffio.AsyncLibraryNotFoundError:
            return False

    async def _in_thread(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` run (awaited) in the trio thread, awaited from asyncio."""
        import asyncio

        if self._thread is None:
            raise RuntimeError("LaneConsumer is not open: use `async with LaneConsumer(...)`")
        return await asyncio.to_thread(self._thread.call, fn, *args, **kwargs)

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> LaneConsumer:
        if self._from_asyncio():
            import asyncio

            from databus.client.sync import _TrioThread

            # The thread's trio run enters this same object (there sniffio says trio).
            self._thread = await asyncio.to_thread(
                lambda: _TrioThread(lambda: self, "databus-lane-consumer"))
            return self
        return await self._open()

    async def _open(self) -> LaneConsumer:
        # Closing runs in reverse: the background tasks stop, the heartbeat's tombstone is
        # written, the consumer leaves its group, then the clients and the follower close.
        async with contextlib.AsyncExitStack() as stack:
            following = await stack.enter_async_context(trio.open_nursery())
            stack.callback(following.cancel_scope.cancel)
            await following.start(self.follower.run)
            admin = await stack.enter_async_context(Admin(self.bootstrap))
            writer = await stack.enter_async_context(
                RegistryWriter(self.bootstrap, self.registry_topic))
            await stack.enter_async_context(self.consumer)
            if self.lane is not None:
                lane = self.follower.state.live_lane(self.lane, now_ms())
                if lane is None:
                    raise ValueError(f"lane {self.lane!r} is not live (unknown or expired; "
                                     "see `databus lanes list`)")
                await ensure_lane_topics(
                    admin, [model.lane_topic(self.template, t, self.lane) for t in self.topics],
                    lane)
                await self._beat(writer, self.lane)
                stack.push_async_callback(self._farewell, writer, self.lane)
            await self._apply(admin)
            tasks = await stack.enter_async_context(trio.open_nursery())
            stack.callback(tasks.cancel_scope.cancel)
            if self.lane is not None:
                tasks.start_soon(self._heartbeats, writer, self.lane)
            tasks.start_soon(self._checks, admin)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc) -> bool:
        await self.aclose()
        return False

    async def aclose(self) -> None:
        if self._from_asyncio():
            import asyncio

            thread, self._thread = self._thread, None
            if thread is not None:
                await asyncio.to_thread(thread.close)
            return
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    # -- consuming: the Consumer's ------------------------------------------------------------

    async def poll(self, timeout: float = 1.0, max_records: int | None = None):
        if self._from_asyncio():
            return await self._in_thread(self.consumer.poll, timeout, max_records)
        return await self.consumer.poll(timeout, max_records)

    async def getmany(self, *partitions, timeout: float = 0.0, max_records: int | None = None):
        if self._from_asyncio():
            return await self._in_thread(self.consumer.getmany, *partitions, timeout=timeout,
                                         max_records=max_records)
        return await self.consumer.getmany(*partitions, timeout=timeout, max_records=max_records)

    async def commit(self, offsets=None) -> None:
        if self._from_asyncio():
            await self._in_thread(self.consumer.commit, offsets)
            return
        await self.consumer.commit(offsets)

    def subscription(self) -> tuple[str, ...]:
        """The topics read now (the main ones, the lane's, orphans taken over)."""
        return tuple(self._subscribed or ())

    # -- the background ------------------------------------------------------------------------

    async def _apply(self, admin: Admin) -> None:
        existing: set[str] | frozenset[str] = frozenset()
        if self.consume_orphans:
            existing = set(await admin.list_topics())
        wanted = model.subscription(
            self.follower.state, self.topics, self.template, now_ms(), lane=self.lane,
            consume_main=self.consume_main, consume_orphans=self.consume_orphans,
            existing=existing)
        if wanted == self._subscribed:
            return
        if self._subscribed is not None:
            log.info("lanes: %s now reads %s", self.lane or "main lane",
                     ", ".join(wanted) or "nothing")
        self._subscribed = wanted
        if wanted:
            self.consumer.subscribe(wanted)
        else:
            self.consumer.unsubscribe()

    async def _checks(self, admin: Admin) -> None:
        while True:
            await trio.sleep(self.check_interval)
            await self._apply(admin)

    async def _beat(self, writer: RegistryWriter, lane: str) -> None:
        record = model.LaneConsumer(lane, self.id, now_ms(), self.heartbeat_ms,
                                    socket.gethostname(), os.getpid(), self.group)
        await writer.put(model.consumer_key(lane, self.id), record)

    async def _heartbeats(self, writer: RegistryWriter, lane: str) -> None:
        while True:
            await trio.sleep(self.heartbeat_ms / 1000)
            await self._beat(writer, lane)

    async def _farewell(self, writer: RegistryWriter, lane: str) -> None:
        with trio.move_on_after(5), contextlib.suppress(Exception):
            await writer.put(model.consumer_key(lane, self.id), None)
