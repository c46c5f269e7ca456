"""The metrics listener of a process (``databus up``, ``databus sidecar``, ``databus sinks``):
/metrics and /healthz, plus the routes plugins bring by the ``databus_http_routes`` hook
(the index plugin's ``GET /index/NAME``, docs/index.md), each with the service it runs for
the listener's life."""

from __future__ import annotations

from collections.abc import Callable

import trio

from databus.config import DatabusConfig
from databus.plugins import PluginManager
from databus.service.metrics import Rendered, serve_http


async def serve_metrics(metrics: Rendered, listeners: list[trio.SocketListener],
                        healthy: Callable[[], tuple[bool, str]],
                        current_config: Callable[[], DatabusConfig],
                        bootstrap: str | None, plugin_manager: PluginManager) -> None:
    """``serve_http`` with the plugins' routes; ``current_config()`` is the configuration in
    force, ``bootstrap`` the built-in broker's address (when the file names no clusters)."""
    routes = [route for found in plugin_manager.hook.databus_http_routes(
        current_config=current_config, bootstrap=bootstrap) for route in found or ()]
    async with trio.open_nursery() as nursery:
        for route in routes:
            if route.serve is not None:
                await nursery.start(route.serve)
        await serve_http(metrics, listeners, healthy,
                         {route.prefix: route.handler for route in routes})
        nursery.cancel_scope.cancel()
