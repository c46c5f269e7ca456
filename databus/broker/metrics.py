"""``databus broker --metrics-listen HOST:PORT``: the broker's ``/metrics`` (Prometheus text)
and ``/healthz``, served by databus/service/metrics.py as for the sidecar.

What an operator alerts on: writes failing on the data directory (disk full), damaged
batches and index entries found by reads, and what clients hold (connections, request bytes
reserved).  Rendered from plain counters at scrape time.

After them come the metrics clients push (KIP-714, docs/client-metrics.md): one series per
client instance and metric, labelled ``client_id`` and ``client_instance_id``, kept by
``client_metrics/series.py`` (expired here, at scrape time, as well as on pushes).
"""

from __future__ import annotations

import trio


class BrokerMetrics:
    def __init__(self, broker, server) -> None:
        self.broker = broker
        self.server = server

    def render(self) -> bytes:
        health = self.broker.storage_health
        logs = self.broker.log_manager.logs()
        families = [
            ("databus_broker_storage_failing", "gauge",
             "1 while writes to the data directory fail (disk full, read-only, I/O error)",
             int(health.failing)),
            ("databus_broker_storage_failed_writes_total", "counter",
             "Appends and fsyncs that failed on the data directory", health.failed_writes),
            ("databus_broker_storage_failure_episodes_total", "counter",
             "Times writes started failing", health.episodes),
            ("databus_broker_damaged_batches_total", "counter",
             "Damaged batches (segment and position) found by reads",
             sum(len(plog.damage_found) for plog in logs)),
            ("databus_broker_index_repairs_total", "counter",
             "Damaged .index entries found by reads and rebuilt",
             sum(plog.index_repairs for plog in logs)),
            ("databus_broker_connections", "gauge", "Client connections open",
             self.server.connection_limits.total),
            ("databus_broker_queued_request_bytes", "gauge",
             "Bytes reserved for requests being received (queued.max.request.bytes)",
             self.server.request_memory.used),
        ]
        telemetry = self.broker.client_metrics
        telemetry.expire(trio.current_time())
        families += [
            ("databus_broker_client_metrics_clients", "gauge",
             "Client instances whose pushed metrics are exported", len(telemetry.series.clients)),
            ("databus_broker_client_metrics_dropped_series_total", "counter",
             "Pushed series not exported: over the per-client limit",
             telemetry.series.dropped_series),
        ]
        lines = []
        for name, kind, help_text, value in families:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        name = "databus_broker_client_metrics_pushes_total"
        lines += [f"# HELP {name} PushTelemetry requests by outcome (error name)",
                  f"# TYPE {name} counter"]
        lines += [f'{name}{{result="{result}"}} {n}'
                  for result, n in sorted(telemetry.pushes.items())]
        lines += telemetry.series.render()
        return ("\n".join(lines) + "\n").encode()

    def healthy(self) -> tuple[bool, str]:
        if self.broker.storage_health.failing:
            return False, f"writes to {self.broker.data_dir} are failing"
        return True, "ok"
