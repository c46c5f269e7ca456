"""The Clients page's data: a broker's ``/metrics`` (its ``--metrics-listen``) split into the
client metrics it exports (KIP-714: what librdkafka, confluent-kafka and Java clients push,
one set of series per client instance, labelled ``client_id`` and ``client_instance_id``)
and the broker's own series, so an operator sees each producer's and consumer's view of the
cluster beside the broker's.  Parsing is pure (``split_metrics``); ``read_metrics`` fetches.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

CLIENT_LABELS = ("client_id", "client_instance_id")
# The broker's own series: its request, storage, group and client-metrics counters (the
# Python runtime's process_/python_ series are left out).
BROKER_PREFIX = "databus_"
# The OpenTelemetry names of Kafka's client metrics all start so; shown without it.
KAFKA_PREFIX = "org_apache_kafka_"
MAX_BROKER_SERIES = 400  # a page, not a dump: the rest is counted
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Series:
    name: str
    labels: str  # ``k="v", ...`` of the labels other than the client's own
    value: float


@dataclass
class ClientView:
    client_id: str
    instance_id: str
    series: list[Series] = field(default_factory=list)

    @property
    def kinds(self) -> str:
        """``producer``, ``consumer``, ``producer, consumer``...: what its metrics say it is."""
        found = {s.name.split("_", 1)[0] for s in self.series}
        return ", ".join(sorted(found & {"producer", "consumer", "admin"})) or "-"


@dataclass
class MetricsView:
    clients: list[ClientView]
    broker: list[Series]
    broker_left_out: int = 0  # broker series past MAX_BROKER_SERIES


def _short(name: str) -> str:
    return name[len(KAFKA_PREFIX):] if name.startswith(KAFKA_PREFIX) else name


def _labels(labels: dict[str, str]) -> str:
    return ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k not in CLIENT_LABELS)


def split_metrics(text: str) -> MetricsView:
    """Prometheus text -> the client instances' series (by client id, then instance) and
    the broker's own.  A ValueError names text that is not Prometheus' format."""
    clients: dict[tuple[str, str], ClientView] = {}
    broker: list[Series] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if "client_instance_id" in labels:
                key = (labels.get("client_id", ""), labels["client_instance_id"])
                view = clients.get(key)
                if view is None:
                    view = clients[key] = ClientView(*key)
                view.series.append(Series(_short(sample.name), _labels(labels), sample.value))
            elif sample.name.startswith(BROKER_PREFIX):
                broker.append(Series(sample.name, _labels(labels), sample.value))
    for view in clients.values():
        view.series.sort(key=lambda s: (s.name, s.labels))
    broker.sort(key=lambda s: (s.name, s.labels))
    return MetricsView(sorted(clients.values(), key=lambda c: (c.client_id, c.instance_id)),
                       broker[:MAX_BROKER_SERIES], max(len(broker) - MAX_BROKER_SERIES, 0))


def metrics_url(listen: str) -> str:
    """``HOST:PORT`` (a broker's metrics_listen) or a URL -> the URL of its /metrics."""
    if "://" in listen:
        return listen
    host, _, port = listen.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"  # (a wildcard bind is reached on this host's loopback)
    return f"http://{host}:{port}/metrics"


def read_metrics(url: str) -> MetricsView:
    """Fetch and split ``url`` (blocking: the page runs it in a thread).  OSError or
    ValueError say why it could not be read."""
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        text = response.read().decode("utf-8", "replace")
    return split_metrics(text)
