"""Where a config's value comes from, and its synonyms: one model for topic, broker and group
configs (DescribeConfigs answers from it).

Kafka reports each config with the source of its value and, when asked
(``include_synonyms``), every place a value for it is set, in precedence order: the
resource's own override, then the broker-level synonyms (the dynamic per-broker value, the
dynamic cluster-wide value, the broker's static config, the default), each under its own
name.  ``retention.ms`` of a topic that does not override it, on a broker started with
``-o log.retention.ms=60000``, is ``60000`` from STATIC_BROKER_CONFIG with synonyms
``log.retention.ms=60000`` (STATIC_BROKER_CONFIG) and ``log.retention.hours=168``
(DEFAULT_CONFIG); ``compression.type`` is ``producer`` from DEFAULT_CONFIG.

``Layers`` holds the broker-level values by source; ``synonyms(names, override)`` walks them.
The broker-level names of a topic config are Kafka's (``TOPIC_CONFIG_SYNONYMS``, from
ServerTopicConfigSynonyms), of a group config ``group.`` + its name.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from databus.protocol.defaults import LONG_MAX


class Source(enum.IntEnum):
    """Kafka's DescribeConfigs config sources."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8


class Synonym(NamedTuple):
    name: str
    value: str | None
    source: Source


def _log(name: str) -> tuple[str, ...]:
    return (f"log.{name}",)


# topic config -> the broker configs that set its default, highest precedence first
TOPIC_CONFIG_SYNONYMS: dict[str, tuple[str, ...]] = {
    "segment.bytes": _log("segment.bytes"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.index.bytes": _log("index.size.max.bytes"),
    "flush.messages": _log("flush.interval.messages"),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "retention.bytes": _log("retention.bytes"),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "max.message.bytes": ("message.max.bytes",),
    "index.interval.bytes": _log("index.interval.bytes"),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms",),
    "file.delete.delay.ms": _log("segment.delete.delay.ms"),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "cleanup.policy": _log("cleanup.policy"),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
    "min.insync.replicas": ("min.insync.replicas",),
    "compression.type": ("compression.type",),
    "compression.gzip.level": ("compression.gzip.level",),
    "compression.lz4.level": ("compression.lz4.level",),
    "compression.zstd.level": ("compression.zstd.level",),
    "preallocate": _log("preallocate"),
    "message.format.version": _log("message.format.version"),
    "message.timestamp.type": _log("message.timestamp.type"),
    "message.timestamp.difference.max.ms": _log("message.timestamp.difference.max.ms"),
    "message.timestamp.before.max.ms": _log("message.timestamp.before.max.ms"),
    "message.timestamp.after.max.ms": _log("message.timestamp.after.max.ms"),
    "message.downconversion.enable": _log("message.downconversion.enable"),
    "local.retention.ms": _log("local.retention.ms"),
    "local.retention.bytes": _log("local.retention.bytes"),
}

# Kafka's defaults of the broker configs above that BrokerConfig does not model (they are
# DEFAULT_CONFIG synonyms; Kafka leaves log.retention.ms/minutes and log.roll.ms unset and
# defaults the hours).
KAFKA_BROKER_DEFAULTS: dict[str, str] = {
    "log.roll.hours": "168",
    "log.roll.jitter.hours": "0",
    "log.retention.hours": "168",
    "log.index.size.max.bytes": "10485760",
    "log.index.interval.bytes": "4096",
    "log.flush.scheduler.interval.ms": str(LONG_MAX),
    "log.cleaner.delete.retention.ms": "86400000",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.max.compaction.lag.ms": str(LONG_MAX),
    "log.segment.delete.delay.ms": "60000",
    "log.cleaner.min.cleanable.ratio": "0.5",
    "unclean.leader.election.enable": "false",
    "min.insync.replicas": "1",
    "compression.type": "producer",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "log.preallocate": "false",
    "log.message.format.version": "3.0-IV1",
    "log.message.timestamp.type": "CreateTime",
    "log.message.timestamp.difference.max.ms": str(LONG_MAX),
    "log.message.timestamp.before.max.ms": str(LONG_MAX),
    "log.message.timestamp.after.max.ms": str(LONG_MAX),
    "log.message.downconversion.enable": "true",
    "log.local.retention.ms": "-2",
    "log.local.retention.bytes": "-2",
}

# A broker config's synonyms (Kafka's DynamicBrokerConfig.brokerConfigSynonyms)
_BROKER_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_config_synonyms(name: str) -> tuple[str, ...]:
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return group
    return (name,)


@dataclass
class Layers:
    """The broker-level config values by source, highest precedence first."""

    per_broker: Mapping[str, str] = field(default_factory=dict)  # DYNAMIC_BROKER_CONFIG
    cluster: Mapping[str, str] = field(default_factory=dict)  # DYNAMIC_DEFAULT_BROKER_CONFIG
    static: Mapping[str, str | None] = field(default_factory=dict)  # STATIC_BROKER_CONFIG
    default: Mapping[str, str | None] = field(default_factory=dict)  # DEFAULT_CONFIG

    def synonyms(self, names: tuple[str, ...], override: Synonym | None = None
                 ) -> tuple[Synonym, ...]:
        """Every value set for ``names`` (broker config names), in Kafka's precedence order:
        ``override`` (the resource's own), then source by source, name by name."""
        found = [override] if override is not None else []
        for source, values in ((Source.DYNAMIC_BROKER_CONFIG, self.per_broker),
                               (Source.DYNAMIC_DEFAULT_BROKER_CONFIG, self.cluster),
                               (Source.STATIC_BROKER_CONFIG, self.static),
                               (Source.DEFAULT_CONFIG, self.default)):
            for name in names:
                if name in values:
                    found.append(Synonym(name, values[name], source))
        return tuple(found)


def source_of(synonyms: tuple[Synonym, ...], fallback: Source = Source.DEFAULT_CONFIG) -> Source:
    """The source of the value in force: its first synonym's."""
    return synonyms[0].source if synonyms else fallback
