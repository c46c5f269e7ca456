"""What every long-running command (``databus up``, ``databus sinks``, ``databus mirror``)
does around its service: open the /metrics listener it is given, and stop on SIGINT or
SIGTERM (a graceful drain first where the service has one, a second signal stops at once).
Reloading is ``reload.watch_config``, started beside the service."""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Callable

import trio


async def open_metrics_listeners(listen: str | None, setting: str) -> list[trio.SocketListener]:
    """The listeners of ``listen`` (HOST:PORT, port 0 picks one; None or ``none``: no
    endpoint).  StartupError naming ``setting`` when the address cannot be bound."""
    from databus.protocol.addresses import parse_host_port
    from databus.startup import open_tcp_listeners

    if not listen or listen == "none":
        return []
    host, port = parse_host_port(listen, allow_port_zero=True, what=setting)
    return await open_tcp_listeners(host, port, setting=setting)


def log_metrics_address(log: logging.Logger, listeners: list[trio.SocketListener]) -> None:
    host, port = listeners[0].socket.getsockname()[:2]
    log.info("metrics on http://%s:%d/metrics", host, port)


async def stop_on_signals(signals: AsyncIterator[int], scope: trio.CancelScope,
                          log: logging.Logger, *, drain: Callable[[], None] | None = None,
                          draining: Callable[[], bool] | None = None,
                          what: str = "stopping") -> int:
    """Wait for a signal of ``signals`` (``trio.open_signal_receiver(SIGINT, SIGTERM)``,
    opened by the caller before start-up so none is missed), then stop: without ``drain``
    at once (``scope`` cancelled, 0); with one, the first signal starts the drain (logged
    as ``what``; the drain cancels ``scope`` when done) and a signal while it runs (or
    while ``draining()`` says a stop is under way) cancels ``scope`` at once: 130."""
    stopping = False
    async for signum in signals:
        name = signal.Signals(signum).name
        if drain is None:
            log.info("%s: %s", name, what)
            break
        if stopping or (draining is not None and draining()):
            scope.cancel()
            return 130
        stopping = True
        log.info("%s: %s (again to stop at once)", name, what)
        drain()
    scope.cancel()
    return 0
