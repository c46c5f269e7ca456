"""Client-metrics subscriptions: Kafka's CLIENT_METRICS config resources (KIP-714).

A subscription is a named set of three configs, made with IncrementalAlterConfigs on
resource type 16 (``databus client-metrics --alter``, like kafka-client-metrics.sh):

- ``metrics``: metric name prefixes the matching clients push (``*``: all of them; empty:
  none);
- ``interval.ms``: how often they push (100 .. 3600000, default 300000);
- ``match``: ``key=regex`` selectors on the client's identity (``client_id``,
  ``client_instance_id``, ``client_software_name``, ``client_software_version``,
  ``client_source_address``, ``client_source_port``); every selector must match the whole
  value; none: every client.

A client gets the union of the prefixes of every subscription it matches, at the shortest
of their intervals (Kafka's rule).  The set is kept in ``client-metrics-configs.json`` in the
data directory (written atomically), so it survives a restart as Kafka's metadata log keeps
it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from databus.storage.durable import atomic_write

FILE = "client-metrics-configs.json"
METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
CONFIG_NAMES = (METRICS, INTERVAL_MS, MATCH)
LIST_CONFIGS = frozenset((METRICS, MATCH))
DEFAULT_INTERVAL_MS = 300_000  # Kafka's ClientMetricsConfigs.DEFAULT_INTERVAL_MS
MIN_INTERVAL_MS = 100
MAX_INTERVAL_MS = 3_600_000
ALL_METRICS = "*"
MATCH_KEYS = ("client_instance_id", "client_id", "client_software_name",
              "client_software_version", "client_source_address", "client_source_port")


class ClientMetricsConfigError(ValueError):
    """A subscription's configs Kafka would refuse (INVALID_CONFIG)."""


def split_list(value: str | None) -> list[str]:
    """A list config's items: comma-separated, blanks dropped."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


@dataclass(frozen=True)
class Subscription:
    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: tuple[tuple[str, re.Pattern], ...]

    def matches(self, identity: Mapping[str, str]) -> bool:
        return all(pattern.fullmatch(identity.get(key) or "") for key, pattern in self.match)


def parse(name: str, configs: Mapping[str, str]) -> Subscription:
    """The subscription ``configs`` describe, or ClientMetricsConfigError saying why not."""
    if not name:
        raise ClientMetricsConfigError("a client metrics subscription needs a name")
    unknown = sorted(set(configs) - set(CONFIG_NAMES))
    if unknown:
        raise ClientMetricsConfigError(
            f"unknown client metrics config {', '.join(unknown)} "
            f"(known: {', '.join(CONFIG_NAMES)})")
    raw_interval = configs.get(INTERVAL_MS)
    interval = DEFAULT_INTERVAL_MS
    if raw_interval is not None:
        try:
            interval = int(raw_interval)
        except ValueError:
            raise ClientMetricsConfigError(
                f"interval.ms {raw_interval!r} is not a number") from None
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise ClientMetricsConfigError(
                f"interval.ms {interval} is out of range "
                f"[{MIN_INTERVAL_MS}, {MAX_INTERVAL_MS}]")
    match = []
    for item in split_list(configs.get(MATCH)):
        key, sep, pattern = item.partition("=")
        key = key.strip()
        if not sep or key not in MATCH_KEYS:
            raise ClientMetricsConfigError(
                f"match {item!r}: expected KEY=REGEX with KEY one of {', '.join(MATCH_KEYS)}")
        try:
            match.append((key, re.compile(pattern.strip())))
        except re.error as exc:
            raise ClientMetricsConfigError(
                f"match {item!r}: bad regular expression: {exc}") from None
    return Subscription(name, tuple(split_list(configs.get(METRICS))), interval, tuple(match))


class SubscriptionStore:
    """Every subscription by name, persisted; ``version`` moves at each change so client
    instances know to recompute theirs."""

    def __init__(self, data_dir: str | os.PathLike | None) -> None:
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self._configs: dict[str, dict[str, str]] = {}
        self._parsed: dict[str, Subscription] = {}
        self.version = 0
        if self.data_dir is not None and (self.data_dir / FILE).exists():
            doc = json.loads((self.data_dir / FILE).read_text())
            for name, configs in doc.get("subscriptions", {}).items():
                self._configs[name] = dict(configs)
                self._parsed[name] = parse(name, configs)

    def names(self) -> list[str]:
        return sorted(self._configs)

    def configs(self, name: str) -> dict[str, str]:
        return dict(self._configs.get(name, {}))

    def check(self, name: str, configs: Mapping[str, str]) -> None:
        parse(name, configs)

    def set(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace ``name``'s configs (none left: the subscription is gone)."""
        parsed = parse(name, configs)
        if configs:
            self._configs[name] = dict(configs)
            self._parsed[name] = parsed
        else:
            self._configs.pop(name, None)
            self._parsed.pop(name, None)
        self.version += 1
        if self.data_dir is not None:
            doc = {"version": 1, "subscriptions": self._configs}
            atomic_write(self.data_dir / FILE, (json.dumps(doc, indent=1, sort_keys=True)
                                                + "\n").encode())

    def matching(self, identity: Mapping[str, str]) -> list[Subscription]:
        return [sub for sub in self._parsed.values() if sub.matches(identity)]
