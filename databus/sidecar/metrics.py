"""The sidecar's metrics and the tiny HTTP server for ``/metrics`` and ``/healthz``.

The hot path only bumps plain integers on a StreamStats (a prometheus-client Counter takes
a lock per increment, too slow per message); a custom collector turns them into Prometheus
families at scrape time.  Delivery latency goes into a fixed-bucket histogram the same way.
Producer figures (batch size, compression ratio, ...) are read from each upstream producer's
``statistics()`` at scrape time.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Any

import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from databus.protocol.sidecar_wire import error_name

log = logging.getLogger("databus.sidecar.metrics")

LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0
)


class StreamStats:
    __slots__ = ("messages_in", "bytes_in", "messages_out", "bytes_out", "dropped")

    def __init__(self) -> None:
        self.messages_in = self.bytes_in = self.messages_out = self.bytes_out = 0
        self.dropped = 0


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

    def buckets(self) -> list[tuple[str, int]]:
        out, running = [], 0
        for bound, n in zip(LATENCY_BUCKETS, self.counts):
            running += n
            out.append((repr(bound), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


class SidecarMetrics:
    """All counters of one sidecar; ``registry`` is what /metrics renders."""

    def __init__(self) -> None:
        self.streams: dict[str, StreamStats] = {}
        self.errors: dict[int, int] = {}
        self.latency = LatencyHistogram()
        self.connections = 0
        self.reloads_ok = 0
        self.reloads_failed = 0
        self.buffer_bytes: Callable[[], int] = lambda: 0
        self.buffer_limit = 0
        # (labels, a ProducerStatistics) per upstream producer
        self.producer_stats: Callable[[], Iterable[tuple[dict[str, str], Any]]] = lambda: ()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))

    def stream(self, name: str) -> StreamStats:
        stats = self.streams.get(name)
        if stats is None:
            stats = self.streams[name] = StreamStats()
        return stats

    def error(self, code: int, n: int = 1) -> None:
        self.errors[code] = self.errors.get(code, 0) + n

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Collector:
    def __init__(self, metrics: SidecarMetrics) -> None:
        self.m = metrics

    def describe(self):
        return []

    def collect(self):
        m = self.m
        families = {
            "messages_in": ("databus_sidecar_messages_in", "Messages accepted from apps"),
            "bytes_in": ("databus_sidecar_bytes_in", "Key+value+header bytes accepted"),
            "messages_out": ("databus_sidecar_messages_out", "Messages acknowledged upstream"),
            "bytes_out": ("databus_sidecar_bytes_out", "Bytes acknowledged upstream"),
            "dropped": ("databus_sidecar_messages_dropped", "Messages dropped by route plugins"),
        }
        for attr, (name, doc) in families.items():
            fam = CounterMetricFamily(name, doc, labels=["stream"])
            for stream, stats in sorted(m.streams.items()):
                fam.add_metric([stream], getattr(stats, attr))
            yield fam
        errors = CounterMetricFamily(
            "databus_sidecar_errors", "Messages answered with an error, by code",
            labels=["code", "name"],
        )
        for code, n in sorted(m.errors.items()):
            errors.add_metric([str(code), error_name(code)], n)
        yield errors
        hist = HistogramMetricFamily(
            "databus_sidecar_delivery_latency_seconds",
            "From a message's arrival at the sidecar to its upstream acknowledgement",
        )
        hist.add_metric([], m.latency.buckets(), m.latency.total)
        yield hist
        yield GaugeMetricFamily(
            "databus_sidecar_buffer_bytes", "Bytes held awaiting upstream acks",
            value=m.buffer_bytes(),
        )
        yield GaugeMetricFamily(
            "databus_sidecar_buffer_limit_bytes", "buffer.memory", value=m.buffer_limit
        )
        yield GaugeMetricFamily(
            "databus_sidecar_connections", "Open app connections", value=m.connections
        )
        reloads = CounterMetricFamily(
            "databus_sidecar_config_reloads", "Config reloads by result", labels=["result"]
        )
        reloads.add_metric(["applied"], m.reloads_ok)
        reloads.add_metric(["rejected"], m.reloads_failed)
        yield reloads
        yield from self._producer_families()

    def _producer_families(self):
        families: dict[str, GaugeMetricFamily] = {}
        for labels, stats in m_producer_stats(self.m):
            for key, value in dataclasses.asdict(stats).items():
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                name = "databus_sidecar_producer_" + "".join(
                    c if c.isalnum() else "_" for c in key
                )
                fam = families.get(name)
                if fam is None:
                    fam = families[name] = GaugeMetricFamily(
                        name, f"Upstream producer statistic {key!r}", labels=list(labels)
                    )
                fam.add_metric(list(labels.values()), value)
        yield from families.values()


def m_producer_stats(m: SidecarMetrics):
    try:
        return list(m.producer_stats())
    except Exception:
        log.exception("reading producer statistics failed")
        return []


async def serve_http(
    metrics: SidecarMetrics,
    listeners: list[trio.SocketListener],
    healthy: Callable[[], tuple[bool, str]],
) -> None:
    """Answer ``GET /metrics`` and ``GET /healthz`` on ``listeners`` (bound by the caller,
    closed on return); anything else is 404.  One request per connection (``Connection:
    close``), which is all Prometheus and probes need."""
    try:
        await trio.serve_listeners(
            lambda stream: _handle(stream, metrics, healthy), listeners
        )
    finally:
        for listener in listeners:
            await listener.aclose()


async def _handle(stream, metrics: SidecarMetrics, healthy) -> None:
    try:
        with trio.move_on_after(10):
            request = b""
            while b"\r\n\r\n" not in request and len(request) < 8192:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                request += chunk
            line = request.split(b"\r\n", 1)[0].decode("latin-1").split()
            path = line[1].split("?", 1)[0] if len(line) >= 2 else ""
            method = line[0] if line else ""
            if method not in ("GET", "HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path == "/metrics":
                status, ctype = "200 OK", "text/plain; version=0.0.4; charset=utf-8"
                body = metrics.render()
            elif path == "/healthz":
                ok, detail = healthy()
                status = "200 OK" if ok else "503 Service Unavailable"
                ctype, body = "text/plain", (detail + "\n").encode()
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
