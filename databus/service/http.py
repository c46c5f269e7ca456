"""The metrics listener of a process running sinks (``databus sinks``, ``databus up``):
/metrics and /healthz, plus ``GET /index/NAME`` (docs/index.md) when the index plugin is
installed; its queries keep one connection per cluster for the listener's life."""

from __future__ import annotations

from collections.abc import Callable

import trio

from databus.config import DatabusConfig
from databus.service.metrics import Rendered, serve_http


async def serve_metrics(metrics: Rendered, listeners: list[trio.SocketListener],
                        healthy: Callable[[], tuple[bool, str]],
                        current_config: Callable[[], DatabusConfig],
                        bootstrap: str | None) -> None:
    """``serve_http`` with the indexes' route; ``current_config()`` is the configuration in
    force, ``bootstrap`` the built-in broker's address (when the file names no clusters)."""
    try:
        from databus_plugins.index.http import PREFIX, index_route
        from databus_plugins.index.query import IndexQueries
    except ImportError:
        await serve_http(metrics, listeners, healthy)
        return
    queries = IndexQueries(current_config, bootstrap)
    async with trio.open_nursery() as nursery:
        await nursery.start(queries.serve)
        await serve_http(metrics, listeners, healthy, {PREFIX: index_route(queries)})
        nursery.cancel_scope.cancel()
