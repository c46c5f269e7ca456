"""What every long-running databus process serves to operators: latency histograms and the
tiny HTTP server for ``/metrics`` and ``/healthz`` (the sidecar, ``databus mirror``, sinks).

Hot paths bump plain integers (a prometheus-client Counter takes a lock per increment, too
slow per message); each process's collector turns them into Prometheus families at scrape
time and hands the text to ``serve_http`` through ``render()``.
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol
from urllib.parse import parse_qs

import trio


class Rendered(Protocol):
    def render(self) -> bytes:
        """The Prometheus text exposition of every family."""
        ...


LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0
)


class LatencyHistogram:
    __slots__ = ("counts", "total", "count")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float, n: int = 1) -> None:
        """``n`` messages that each took ``seconds`` (a batch is answered at once)."""
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += n
        self.total += seconds * n
        self.count += n

    def observe_ages(self, now_ms: float, timestamps_ms) -> None:
        """One observation per timestamp: ``now_ms - timestamp`` (ms, none below 0) in
        seconds, as ``observe`` of each would count them (up to float rounding at a bucket's
        edge with a fractional ``now_ms``), without a Python step per value
        (a sort and a search per bucket: the mirror counts whole chunks this way)."""
        ts = sorted(timestamps_ms)
        n = len(ts)
        if not n:
            return
        past = bisect.bisect_right(ts, now_ms)  # ts[:past] are at or before now_ms
        below = 0  # values in the buckets so far: latency <= bound <=> ts >= now - bound
        for i, bound in enumerate(LATENCY_BUCKETS):
            within = n - bisect.bisect_left(ts, now_ms - bound * 1000)
            self.counts[i] += within - below
            below = within
        self.counts[-1] += n - below
        self.total += (now_ms * past - sum(ts[:past])) / 1000
        self.count += n

    def buckets(self) -> list[tuple[str, int]]:
        out, running = [], 0
        for bound, n in zip(LATENCY_BUCKETS, self.counts):
            running += n
            out.append((repr(bound), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


async def serve_http(
    metrics: Rendered,
    listeners: list[trio.SocketListener],
    healthy: Callable[[], tuple[bool, str]],
    routes: Mapping[str, Route] | None = None,
) -> None:
    """Answer ``GET /metrics`` and ``GET /healthz`` on ``listeners`` (bound by the caller,
    closed on return), and a path starting with a key of ``routes`` by that route; anything
    else is 404.  One request per connection (``Connection: close``), which is all
    Prometheus and probes need."""
    try:
        await trio.serve_listeners(
            lambda stream: _handle(stream, metrics, healthy, routes or {}), listeners
        )
    finally:
        for listener in listeners:
            await listener.aclose()


ROUTE_TIMEOUT_S = 60.0

# A route: (path, {name: [values]} of the query string) -> (status, content type, body).
Route = Callable[[str, dict[str, list[str]]], Awaitable[tuple[str, str, bytes]]]


async def _handle(stream, metrics: Rendered, healthy, routes: Mapping[str, Route]) -> None:
    try:
        # A route may fetch from a cluster (an index query): the deadline is its own.
        with trio.move_on_after(ROUTE_TIMEOUT_S if routes else 10):
            request = b""
            while b"\r\n\r\n" not in request and len(request) < 8192:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                request += chunk
            line = request.split(b"\r\n", 1)[0].decode("latin-1").split()
            path, _, query = (line[1] if len(line) >= 2 else "").partition("?")
            method = line[0] if line else ""
            route = next((r for prefix, r in routes.items() if path.startswith(prefix)), None)
            if method not in ("GET", "HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path == "/metrics":
                status, ctype = "200 OK", "text/plain; version=0.0.4; charset=utf-8"
                body = metrics.render()
            elif path == "/healthz":
                ok, detail = healthy()
                status = "200 OK" if ok else "503 Service Unavailable"
                ctype, body = "text/plain", (detail + "\n").encode()
            elif route is not None:
                status, ctype, body = await route(path, parse_qs(query, keep_blank_values=True))
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"try /metrics or /healthz\n"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode()
            await stream.send_all(head + (b"" if method == "HEAD" else body))
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        await stream.aclose()
