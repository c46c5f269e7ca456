"""Per-sink Prometheus families, read from each runner's SinkProgress at scrape time (the
runtime only bumps plain integers).  The sidecar registers ``SinkCollector`` on its own
registry; ``databus sinks`` serves ``SinkMetrics`` alone.  docs/operations.md lists them."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class SinkCollector:
    def __init__(self, supervisor) -> None:
        self.supervisor = supervisor

    def describe(self):
        return []

    def collect(self):
        import trio

        try:
            now = trio.current_time()
        except RuntimeError:  # scraped from outside trio (tests): no pending ages then
            now = time.monotonic()
        runners = sorted(self.supervisor.runners.items())
        counters = {
            "records_in": ("databus_sink_records_in", "Records handed to the sink plugin"),
            "dead_letters": ("databus_sink_dead_letters",
                             "Records the plugin rejected, sent to the dead-letter topic"),
            "errors": ("databus_sink_errors", "Plugin or consumer failures (each restarts the sink)"),
            "commits": ("databus_sink_commits", "Offset commits of durable records"),
        }
        for attr, (name, doc) in counters.items():
            fam = CounterMetricFamily(name, doc, labels=["sink"])
            for sink, runner in runners:
                fam.add_metric([sink], getattr(runner.progress, attr))
            yield fam
        running = GaugeMetricFamily(
            "databus_sink_running", "1 while the sink consumes, 0 while it restarts",
            labels=["sink", "plugin"],
        )
        partitions = GaugeMetricFamily(
            "databus_sink_partitions", "Partitions assigned to this member", labels=["sink"]
        )
        age = GaugeMetricFamily(
            "databus_sink_last_durable_age_seconds",
            "How long records handed to the plugin have waited since the durable offset last "
            "moved (0: everything handed is committed)", labels=["sink"],
        )
        lag = GaugeMetricFamily(
            "databus_sink_lag", "Records between the committed offset and the log end",
            labels=["sink", "topic", "partition"],
        )
        for sink, runner in runners:
            running.add_metric([sink, runner.plugin], 1 if runner.running else 0)
            partitions.add_metric([sink], len(runner.progress.partitions))
            age.add_metric([sink], runner.progress.durable_age(now))
            for (topic, partition), n in sorted(runner.progress.lag().items()):
                lag.add_metric([sink, topic, str(partition)], n)
        yield from (running, partitions, age, lag)


class SinkMetrics:
    """The registry ``databus sinks`` serves on /metrics (serve_http wants ``render``)."""

    def __init__(self, supervisor) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SinkCollector(supervisor))

    def render(self) -> bytes:
        return generate_latest(self.registry)
