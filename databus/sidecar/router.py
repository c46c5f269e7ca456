"""Stream -> route: the topic, the upstream producer and the plugin callables for a stream.

A RoutingTable is built from one validated config, all at once, before it is applied: every
hook factory (``databus_route``, ``databus_partitioner`` through the producer pool) is called
here, once, so the hot path only looks a stream up in a dict and calls plain functions.  If
any factory fails the table is not built and the config is rejected.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from databus.config import DatabusConfig
from databus.plugins import PluginError, PluginManager

from .upstream import ProducerHandle, ProducerPool

log = logging.getLogger("databus.sidecar.router")

# Unlisted streams seen through the default route are remembered up to this many names;
# beyond it they are still served, just resolved again each time.
MAX_DYNAMIC_ROUTES = 10000


class RoutedMessage:
    """What a ``databus_route`` function receives and returns (see hookspecs.py)."""

    __slots__ = ("stream", "topic", "key", "value", "headers", "partition")

    def __init__(self, stream, topic, key, value, headers, partition) -> None:
        self.stream = stream
        self.topic = topic
        self.key = key
        self.value = value
        self.headers = headers
        self.partition = partition

    def __repr__(self) -> str:
        return (
            f"RoutedMessage(stream={self.stream!r}, topic={self.topic!r}, key={self.key!r}, "
            f"partition={self.partition!r}, headers={self.headers!r})"
        )


class Route:
    __slots__ = ("stream", "topic", "handle", "producer", "route_fns", "max_block", "stats")

    def __init__(
        self,
        stream: str,
        topic: str,
        handle: ProducerHandle,
        route_fns: tuple[tuple[str, Callable], ...],
        stats: Any,
    ) -> None:
        self.stream = stream
        self.topic = topic
        self.handle = handle
        self.producer = handle.producer
        self.route_fns = route_fns
        self.max_block = handle.max_block_ms / 1000.0
        self.stats = stats


class RoutingTable:
    def __init__(self, config: DatabusConfig, pm: PluginManager, metrics) -> None:
        self.config = config
        self._pm = pm
        self._metrics = metrics
        self.routes: dict[str, Route] = {}
        self.default_handle: ProducerHandle | None = None

    @classmethod
    async def build(
        cls,
        config: DatabusConfig,
        pm: PluginManager,
        pool: ProducerPool,
        bootstrap: dict[str, str],
        metrics,
    ) -> RoutingTable:
        """Make every route of ``config``; ``bootstrap`` maps cluster names to addresses
        (the embedded cluster's address is only known at run time)."""
        table = cls(config, pm, metrics)
        for name, _stream in config.streams.items():
            handle = await pool.get(config, name, bootstrap)
            table.routes[name] = table._make_route(name, config.route_topic(name), handle)
        if config.default_route is not None:
            table.default_handle = await pool.get(config, None, bootstrap)
        return table

    def _make_route(self, stream: str, topic: str, handle: ProducerHandle) -> Route:
        settings = MappingProxyType(dict(handle.settings))
        fns = tuple(
            self._pm.call_each("databus_route", stream=stream, topic=topic, settings=settings)
        )
        for plugin, fn in fns:
            if not callable(fn):
                raise PluginError(plugin, "databus_route", TypeError("did not return a callable"))
        return Route(stream, topic, handle, fns, self._metrics.stream(stream))

    def lookup(self, stream: str) -> Route | None:
        """The route for ``stream``, None for an unknown stream without a default route.
        Raises PluginError if a route factory fails for a new unlisted stream."""
        route = self.routes.get(stream)
        if route is not None or self.default_handle is None:
            return route
        route = self._make_route(stream, self.config.route_topic(stream), self.default_handle)
        if len(self.routes) < len(self.config.streams) + MAX_DYNAMIC_ROUTES:
            self.routes[stream] = route
        return route

    def handles(self) -> set[ProducerHandle]:
        out = {route.handle for route in self.routes.values()}
        if self.default_handle is not None:
            out.add(self.default_handle)
        return out
