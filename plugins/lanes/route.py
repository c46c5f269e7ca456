"""The per-message route function of the ``lanes`` plugin (hookspecs.databus_route)."""

from __future__ import annotations

import trio

from databus.config import LanesConfig
from databus.lanes import model
from databus.lanes.registry import now_ms
from databus.protocol.sidecar_wire import ErrorCode
from databus.sidecar.router import Rejected, RoutedMessage

from .service import LOAD_TIMEOUT_S, LaneService


def make_route(service: LaneService, stream: str, settings: LanesConfig):
    header = settings.header
    template = settings.topic
    reject = settings.unknown == "reject"
    registry = service.follower  # .state is read per message: a retry may replace it
    topics = service.topics

    def route(msg: RoutedMessage):
        name = None
        for h in msg.headers or ():
            if h[0] == header:
                name = h[1]
                break
        if not name:
            return msg  # the main lane
        if not service.ready.is_set():
            return _after_load(msg)
        lane_name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        lane = registry.state.live_lane(lane_name, now_ms())
        if lane is None:
            stats = service.stat(stream, lane_name)
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
        topic = model.lane_topic(template, msg.topic, lane_name)
        service.stat(stream, lane_name).routed += 1
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

    return route
