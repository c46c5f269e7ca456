"""The per-message route function of the ``lanes`` plugin (hookspecs.databus_route)."""

from __future__ import annotations

import time

import trio

from databus.hookspecs import Rejected, RoutedMessage
from databus.lanes import model
from databus.lanes.config import LanesConfig
from databus.protocol.sidecar_wire import ErrorCode

from .service import LOAD_TIMEOUT_S, LaneService, start

CACHE_LIMIT = 1000


def make_route(service: LaneService, stream: str, settings: LanesConfig):
    header = settings.header
    template = settings.topic
    reject = settings.unknown == "reject"
    registry = service.follower  # .state is read per message: a retry may replace it
    topics = service.topics

    # Per lane header value: (lane name, its counters); per (topic, lane): the lane topic.
    # Bounded: header values come from apps, and a typo per message must not grow memory.
    names: dict[bytes, tuple[str, object]] = {}
    lane_topics: dict[tuple[str, str], str] = {}

    def route(msg: RoutedMessage):
        name = None
        for h in msg.headers or ():
            if h[0] == header:
                name = h[1]
                break
        if not name:
            return msg  # the main lane
        if not service.ready.is_set():
            start(service)  # the routing table is live: its service runs (once)
            return _after_load(msg)
        known = names.get(name)
        if known is None:
            lane_name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
            known = (lane_name, service.stat(stream, lane_name))
            if len(names) < CACHE_LIMIT:
                names[name] = known
        lane_name, stats = known
        lane = registry.state.live_lane(lane_name, int(time.time() * 1000))
        if lane is None:
            if reject:
                stats.rejected += 1
                raise Rejected(
                    ErrorCode.PLUGIN_ERROR,
                    f"lanes: lane {lane_name!r} is not live (unknown or expired) and "
                    "lanes.unknown is reject; create it with `databus lanes create "
                    f"{lane_name}`",
                )
            stats.fallback += 1
            return msg  # to the main topic, the header kept
        stats.routed += 1
        topic = lane_topics.get((msg.topic, lane_name))
        if topic is None:
            topic = model.lane_topic(template, msg.topic, lane_name)
            if len(lane_topics) < CACHE_LIMIT:
                lane_topics[(msg.topic, lane_name)] = topic
        msg.topic = topic
        if topic in topics:
            return msg
        return _created(msg, topic, lane)

    async def _created(msg: RoutedMessage, topic: str, lane: model.Lane) -> RoutedMessage:
        await service.ensure_topic(topic, lane)
        return msg

    async def _after_load(msg: RoutedMessage):
        with trio.move_on_after(LOAD_TIMEOUT_S):
            await service.ready.wait()
        if not service.ready.is_set():
            raise Rejected(
                ErrorCode.REQUEST_TIMED_OUT,
                f"lanes: the lane registry {settings.registry_topic} on {service.bootstrap} "
                f"could not be read within {LOAD_TIMEOUT_S:.0f}s",
            )
        out = route(msg)
        return await out if out is not None and type(out) is not RoutedMessage else out

    route.needs_headers = True  # a message without headers is in the main lane
    return route
