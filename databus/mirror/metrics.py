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
        "in_flight",
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
        self.lag = 0             # source_end minus the recorded progress
        self.in_flight = 0       # source offsets copied beyond the recorded progress
        self.source_end = -1     # source high watermark at the last lag check
        self.mirrored = -1       # next source offset not in the recorded progress
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
        self.exactly_once: bool | None = None  # None until the mirror looked at the target
        self.transactions_committed = 0
        self.transactions_aborted = 0

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
                                "Source high watermark minus the next offset of the recorded "
                                "(exactly-once: committed) progress",
                                labels=PARTITION_LABELS)
        in_flight = GaugeMetricFamily(
            "databus_mirror_in_flight_records",
            "Source offsets copied (or being copied) beyond the recorded progress: what a "
            "crash now would copy again in at-least-once mode (exactly-once: the open "
            "transaction's, aborted by a crash)", labels=PARTITION_LABELS)
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
        exactly_once = GaugeMetricFamily(
            "databus_mirror_exactly_once",
            "1 when the mirror copies in transactions, 0 when at-least-once", labels=["mirror"])
        txns = CounterMetricFamily("databus_mirror_transactions",
                                   "Exactly-once: transactions committed or abandoned (aborted, "
                                   "the copy started again from the committed progress)",
                                   labels=["mirror", "result"])
        for name, ms in sorted(self.m.mirrors.items()):
            for (topic, partition), ps in sorted(ms.partitions.items()):
                labels = [name, ms.source, ms.target, topic, str(partition)]
                for attr, fam in fams.items():
                    fam.add_metric(labels, getattr(ps, attr))
                if ps.source_end >= 0:  # unknown until the source's end was read once
                    lag.add_metric(labels, ps.lag)
                in_flight.add_metric(labels, ps.in_flight)
                stopped.add_metric(labels, 1 if ps.error else 0)
                latency.add_metric(labels, ps.latency.buckets(), ps.latency.total)
            for role in ("source", "target"):
                reachable.add_metric([name, role, getattr(ms, role)], int(ms.reachable[role]))
            errors.add_metric([name], ms.errors)
            synced.add_metric([name], ms.group_offsets_synced)
            if ms.exactly_once is not None:
                exactly_once.add_metric([name], int(ms.exactly_once))
            txns.add_metric([name, "committed"], ms.transactions_committed)
            txns.add_metric([name, "aborted"], ms.transactions_aborted)
        yield from fams.values()
        yield lag
        yield in_flight
        yield stopped
        yield latency
        yield reachable
        yield errors
        yield synced
        yield exactly_once
        yield txns
