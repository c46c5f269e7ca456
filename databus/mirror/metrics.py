"""Mirror metrics: plain counters bumped on the copy path, turned into Prometheus families
at scrape time (the sidecar's pattern, databus/sidecar/metrics.py, whose histogram and HTTP
server are reused).  One ``MirrorMetrics`` per process; ``databus up`` registers its
collector on the sidecar's /metrics, ``databus mirror`` serves it alone.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from databus.service.metrics import LatencyHistogram

STATES = ("running", "stopped")


class PartitionStats:
    __slots__ = (
        "bytes",
        "error",
        "errors",
        "lag",
        "latency",
        "mirrored",
        "records",
        "skipped",
        "source_end",
        "target_offset",
    )

    def __init__(self) -> None:
        self.records = self.bytes = self.skipped = self.errors = 0
        self.lag = 0
        self.source_end = -1     # source high watermark at the last lag check
        self.mirrored = -1       # next source offset not yet acknowledged by the target
        self.target_offset = -1  # where the last acknowledged copy landed
        self.latency = LatencyHistogram()
        self.error: str | None = None  # set when the partition stopped


class MirrorStats:
    def __init__(self, name: str, source: str, target: str) -> None:
        self.name, self.source, self.target = name, source, target
        self.partitions: dict[tuple[str, int], PartitionStats] = {}
        self.reachable = {"source": False, "target": False}
        self.errors = 0  # failures not tied to a partition (topic creation, group sync, ...)
        self.group_offsets_synced = 0

    def partition(self, topic: str, partition: int) -> PartitionStats:
        key = (topic, partition)
        stats = self.partitions.get(key)
        if stats is None:
            stats = self.partitions[key] = PartitionStats()
        return stats


class MirrorMetrics:
    def __init__(self) -> None:
        self.mirrors: dict[str, MirrorStats] = {}
        self.collector = _Collector(self)

    def mirror(self, name: str, source: str, target: str) -> MirrorStats:
        stats = self.mirrors.get(name)
        if stats is None or (stats.source, stats.target) != (source, target):
            stats = self.mirrors[name] = MirrorStats(name, source, target)
        return stats

    def remove(self, name: str) -> None:
        self.mirrors.pop(name, None)

    def render(self) -> bytes:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        return generate_latest(registry)


PARTITION_LABELS = ["mirror", "source", "target", "topic", "partition"]


class _Collector:
    def __init__(self, metrics: MirrorMetrics) -> None:
        self.m = metrics

    def describe(self):
        return []

    def collect(self):
        counters = {
            "records": ("databus_mirror_records", "Records copied and acknowledged by the target"),
            "bytes": ("databus_mirror_bytes", "Key+value+header bytes copied"),
            "skipped": ("databus_mirror_records_skipped",
                        "Records not copied because their provenance names the target"),
            "errors": ("databus_mirror_partition_errors",
                       "Failed deliveries to the target (retried, or the partition stopped)"),
        }
        fams = {attr: CounterMetricFamily(name, doc, labels=PARTITION_LABELS)
                for attr, (name, doc) in counters.items()}
        lag = GaugeMetricFamily("databus_mirror_lag_records",
                                "Source high watermark minus the mirrored offset",
                                labels=PARTITION_LABELS)
        stopped = GaugeMetricFamily("databus_mirror_partition_stopped",
                                    "1 when the target refused a record and the partition stopped",
                                    labels=PARTITION_LABELS)
        latency = HistogramMetricFamily(
            "databus_mirror_replication_latency_seconds",
            "Target acknowledgement (append) time minus the record's timestamp",
            labels=PARTITION_LABELS)
        reachable = GaugeMetricFamily("databus_mirror_cluster_reachable",
                                      "1 when the last request to the cluster succeeded",
                                      labels=["mirror", "role", "cluster"])
        errors = CounterMetricFamily("databus_mirror_errors",
                                     "Mirror-level failures (topic creation, group offset sync)",
                                     labels=["mirror"])
        synced = CounterMetricFamily("databus_mirror_group_offsets_synced",
                                     "Group offsets committed on the target by sync.group.offsets",
                                     labels=["mirror"])
        for name, ms in sorted(self.m.mirrors.items()):
            for (topic, partition), ps in sorted(ms.partitions.items()):
                labels = [name, ms.source, ms.target, topic, str(partition)]
                for attr, fam in fams.items():
                    fam.add_metric(labels, getattr(ps, attr))
                lag.add_metric(labels, ps.lag)
                stopped.add_metric(labels, 1 if ps.error else 0)
                latency.add_metric(labels, ps.latency.buckets(), ps.latency.total)
            for role in ("source", "target"):
                reachable.add_metric([name, role, getattr(ms, role)], int(ms.reachable[role]))
            errors.add_metric([name], ms.errors)
            synced.add_metric([name], ms.group_offsets_synced)
        yield from fams.values()
        yield lag
        yield stopped
        yield latency
        yield reachable
        yield errors
        yield synced
