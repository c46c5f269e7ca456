"""The pushed client metrics as Prometheus series, with bounded cardinality.

Each client instance owns its series, labelled ``client_id`` and ``client_instance_id``
beside the data points' own attributes (``node_id``, ``topic``...).  What bounds them:

- a client instance keeps at most ``max_series_per_client`` series (the rest of a push are
  dropped and counted);
- at most ``max_clients`` instances have series (a new one beyond that is not exported);
- an instance that stops pushing loses its series ``expiry_intervals`` push intervals after
  its last push, and at once when it says it is terminating.

Names follow OpenTelemetry's Prometheus convention: the OTLP name with every character
Prometheus refuses turned into ``_`` (``org.apache.kafka.producer.record.queue.time.avg`` ->
``org_apache_kafka_producer_record_queue_time_avg``); counters end in ``_total``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .otlp import Point

_NOT_NAME = re.compile(r"[^a-zA-Z0-9_:]")
_NOT_LABEL = re.compile(r"[^a-zA-Z0-9_]")
RESERVED = ("client_id", "client_instance_id")
CACHE_LIMIT = 100_000


def metric_name(name: str, counter: bool) -> str:
    out = _NOT_NAME.sub("_", name)
    if out[:1].isdigit():
        out = "_" + out
    if counter and not out.endswith("_total"):
        out += "_total"
    return out


def label_name(key: str) -> str:
    out = _NOT_LABEL.sub("_", key)
    if out[:1].isdigit() or out in RESERVED:
        out = "_" + out  # a data point attribute never hides the client's own labels
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass
class ClientSeries:
    labels: str  # the rendered client_id and client_instance_id labels
    expires_at: float
    # (family name, rendered attribute labels) -> value
    values: dict[tuple[str, str], float] = field(default_factory=dict)


class SeriesStore:
    def __init__(self, max_series_per_client: int = 1000, max_clients: int = 10_000,
                 expiry_intervals: int = 3) -> None:
        self.max_series_per_client = max_series_per_client
        self.max_clients = max_clients
        self.expiry_intervals = expiry_intervals
        self.clients: dict[str, ClientSeries] = {}
        self.families: dict[str, tuple[str, str]] = {}  # name -> (type, help)
        self.dropped_series = 0
        self.dropped_clients = 0
        # what every push of every client repeats: names and label sets, rendered once
        self._names: dict[tuple[str, bool], str] = {}
        self._labels: dict[tuple[tuple[str, str], ...], str] = {}

    def update(self, instance_id: str, client_id: str, points: Iterable[Point],
               now: float, interval_s: float) -> None:
        client = self.clients.get(instance_id)
        if client is None:
            if len(self.clients) >= self.max_clients:
                self.dropped_clients += 1
                return
            client = ClientSeries(
                f'client_id="{_escape(client_id)}",client_instance_id="{instance_id}"', 0.0)
            self.clients[instance_id] = client
        client.expires_at = now + self.expiry_intervals * interval_s
        values = client.values
        names, labels = self._names, self._labels
        if len(labels) > CACHE_LIMIT or len(names) > CACHE_LIMIT:
            labels.clear()  # bounded: pushes may carry any names and attributes
            names.clear()
        for point in points:
            name = names.get((point.name, point.counter))
            if name is None:
                name = names[(point.name, point.counter)] = metric_name(point.name,
                                                                        point.counter)
            kind = "counter" if point.counter else "gauge"
            family = self.families.get(name)
            if family is None:
                self.families[name] = (kind, point.help or point.name)
            elif family[0] != kind:
                continue  # one name, one type: the first seen wins
            attrs = labels.get(point.attributes)
            if attrs is None:
                attrs = labels[point.attributes] = "".join(
                    f',{label_name(k)}="{_escape(v)}"' for k, v in point.attributes)
            key = (name, attrs)
            old = values.get(key)
            if old is None and len(values) >= self.max_series_per_client:
                self.dropped_series += 1
                continue
            values[key] = (old or 0.0) + point.value if point.delta else point.value

    def drop(self, instance_id: str) -> None:
        self.clients.pop(instance_id, None)

    def expire(self, now: float) -> list[str]:
        gone = [i for i, c in self.clients.items() if c.expires_at <= now]
        for instance_id in gone:
            del self.clients[instance_id]
        return gone

    def render(self) -> list[str]:
        by_family: dict[str, list[str]] = {}
        for client in self.clients.values():
            for (name, attrs), value in client.values.items():
                by_family.setdefault(name, []).append(
                    f"{name}{{{client.labels}{attrs}}} {value!r}")
        lines = []
        for name in sorted(by_family):
            kind, help_text = self.families[name]
            lines += [f"# HELP {name} {_escape(help_text)}", f"# TYPE {name} {kind}",
                      *by_family[name]]
        live = {name for name in by_family}
        for name in [n for n in self.families if n not in live]:
            del self.families[name]  # a family no client has any more
        return lines
