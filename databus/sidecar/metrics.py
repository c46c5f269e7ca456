"""The sidecar's metrics (served on ``/metrics`` by databus.service.metrics.serve_http).

The hot path only bumps plain integers on a StreamStats (a prometheus-client Counter takes
a lock per increment, too slow per message); a custom collector turns them into Prometheus
families at scrape time.  Delivery latency goes into a fixed-bucket histogram the same way.
Producer figures (batch size, compression ratio, ...) are read from each upstream producer's
``statistics()`` at scrape time.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from databus.protocol.sidecar_wire import error_name
from databus.service.metrics import LatencyHistogram

log = logging.getLogger("databus.sidecar.metrics")

class StreamStats:
    __slots__ = ("messages_in", "bytes_in", "messages_out", "bytes_out", "dropped")

    def __init__(self) -> None:
        self.messages_in = self.bytes_in = self.messages_out = self.bytes_out = 0
        self.dropped = 0


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
