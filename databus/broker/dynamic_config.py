"""Dynamic broker configs (Kafka's DynamicBrokerConfig): the broker configs
(Incremental)AlterConfigs may change at runtime, per broker (resource name = the node id) or
cluster-wide (resource name ""), persisted across restarts.

Accepted: Kafka's list (``PER_BROKER`` and ``CLUSTER_WIDE`` below, and per-broker
``listener.name.NAME.<config>`` forms), validated as Kafka does (a per-broker config at the
cluster level is refused, as is any other broker config: "Cannot update these configs
dynamically").  Applied: the ones the broker uses (``APPLIED``: the ``log.*`` topic defaults,
``message.max.bytes``, ``compression.type`` and the other topic-config synonyms, the
connection limits); the values of configs BrokerConfig models are checked by it.  The rest
(SSL, SASL/Kerberos, thread pools, listeners, ...) are stored and reported but change
nothing here (docs/protocol.md).  A per-broker value wins over a cluster-wide one, which wins
over the static config (``-o``), as in Kafka.

Stored in ``dynamic-broker-configs.json`` in the data directory (written atomically before
the change takes effect).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from databus.storage.durable import atomic_write

from .config import BrokerConfig
from .config_sources import TOPIC_CONFIG_SYNONYMS

FILE = "dynamic-broker-configs.json"

_SSL = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
        "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location",
        "ssl.truststore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
        "ssl.truststore.certificates")
_LISTENER = (
    "advertised.listeners", "listeners", "listener.security.protocol.map",
    "principal.builder.class", "ssl.protocol", "ssl.provider", "ssl.cipher.suites",
    "ssl.enabled.protocols", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation",
    "ssl.client.auth", "ssl.engine.factory.class",
    "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
)
_CLUSTER_LEVEL_LISTENER = ("max.connections", "max.connection.creation.rate",
                           "num.network.threads")
# Kafka's DynamicBrokerConfig.PerBrokerConfigs: only with a broker id as the resource name
PER_BROKER = frozenset(_SSL + _LISTENER)
_LOG = frozenset(name for names in TOPIC_CONFIG_SYNONYMS.values() for name in names
                 if name != "log.message.format.version")
CLUSTER_WIDE = frozenset(_LOG | {
    # LogCleaner.ReconfigurableConfigs
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.buffer.size",
    "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
    # DynamicThreadPool, metrics, SocketServer
    "num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
    "background.threads", "metric.reporters", "max.connections.per.ip",
    "max.connections.per.ip.overrides", "max.connection.creation.rate",
    *_CLUSTER_LEVEL_LISTENER,
    # DynamicProducerStateManagerConfig, DynamicRemoteLogConfig
    "producer.id.expiration.ms", "transaction.partition.verification.enable",
    "remote.log.index.file.cache.total.size.bytes", "remote.fetch.max.wait.ms",
    "remote.log.manager.copy.max.bytes.per.second",
    "remote.log.manager.fetch.max.bytes.per.second", "remote.list.offsets.request.timeout.ms",
})
DYNAMIC = PER_BROKER | CLUSTER_WIDE
_LISTENER_PREFIXED = re.compile(r"listener\.name\.[^.]+\.(.+)")
# What the broker applies at once (the rest is stored): the topic defaults and the
# connection limits.
APPLIED = frozenset(_LOG | {"max.connections", "max.connections.per.ip"})


class DynamicConfigError(ValueError):
    """A dynamic broker config change Kafka would refuse; ``invalid_config`` tells
    INVALID_CONFIG (a bad value) from INVALID_REQUEST (not dynamic, wrong level)."""

    def __init__(self, message: str, *, invalid_config: bool = False) -> None:
        super().__init__(message)
        self.invalid_config = invalid_config


def is_dynamic(name: str) -> bool:
    match = _LISTENER_PREFIXED.fullmatch(name)
    return name in DYNAMIC or (match is not None and match.group(1) in DYNAMIC)


def _per_broker_only(name: str) -> bool:
    match = _LISTENER_PREFIXED.fullmatch(name)
    if match is not None:
        return match.group(1) not in _CLUSTER_LEVEL_LISTENER
    return name in PER_BROKER


@dataclass
class DynamicBrokerConfigs:
    """The dynamic broker configs in force: ``per_broker`` (this node's) and ``cluster``."""

    data_dir: Path
    per_broker: dict[str, str] = field(default_factory=dict)
    cluster: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, data_dir: str | os.PathLike) -> DynamicBrokerConfigs:
        path = Path(data_dir) / FILE
        if not path.exists():
            return cls(Path(data_dir))
        doc = json.loads(path.read_text())
        return cls(Path(data_dir), dict(doc.get("broker", {})), dict(doc.get("cluster", {})))

    def save(self) -> None:
        doc = {"version": 1, "broker": dict(sorted(self.per_broker.items())),
               "cluster": dict(sorted(self.cluster.items()))}
        atomic_write(self.data_dir / FILE, (json.dumps(doc, indent=1) + "\n").encode())

    def layer(self, per_broker: bool) -> dict[str, str]:
        return self.per_broker if per_broker else self.cluster

    def check(self, static: BrokerConfig, new: Mapping[str, str], *, per_broker: bool
              ) -> BrokerConfig:
        """Kafka's checks of a new set of dynamic configs for one level (``new`` replaces
        that level's); the BrokerConfig the broker would run with.  Raises
        DynamicConfigError."""
        static_only = sorted(name for name in new if not is_dynamic(name))
        if static_only:
            raise DynamicConfigError(
                f"Cannot update these configs dynamically: {', '.join(static_only)}")
        if not per_broker:
            wrong_level = sorted(name for name in new if _per_broker_only(name))
            if wrong_level:
                raise DynamicConfigError(
                    "Cannot update these configs at default cluster level, broker id must be "
                    f"specified: {', '.join(wrong_level)}")
        trial = DynamicBrokerConfigs(self.data_dir,
                                     dict(new) if per_broker else dict(self.per_broker),
                                     self.cluster if per_broker else dict(new))
        return trial.applied_to(static)

    def applied_to(self, static: BrokerConfig) -> BrokerConfig:
        """``static`` with the dynamic values BrokerConfig models and the broker applies
        (a value it refuses raises DynamicConfigError, invalid_config)."""
        known = BrokerConfig.option_names()
        merged = {**self.cluster, **self.per_broker}
        updates = {known[name]: value for name, value in merged.items()
                   if name in APPLIED and name in known}
        if not updates:
            return static
        values = {name: getattr(static, name) for name in static.model_fields_set}
        try:
            return BrokerConfig.model_validate({**values, **updates})
        except ValidationError as exc:
            problems = "; ".join(
                f"{BrokerConfig.model_fields[str(e['loc'][0])].alias}={e.get('input')!r}: "
                f"{e['msg']}" if e["loc"] else str(e["msg"]) for e in exc.errors())
            raise DynamicConfigError(f"Invalid config value: {problems}",
                                     invalid_config=True) from None

    def topic_defaults(self, config: BrokerConfig) -> dict[str, str]:
        """The topic-level defaults: ``config``'s (its log.* settings, dynamic ones already
        applied by ``applied_to``), then the topic-config synonyms BrokerConfig does not
        model taken from the dynamic values (log.retention.hours, compression.type, ...)."""
        defaults = config.topic_defaults()
        known = BrokerConfig.option_names()
        for layer in (self.cluster, self.per_broker):  # per-broker last: it wins
            for topic_name, names in TOPIC_CONFIG_SYNONYMS.items():
                for name in names:
                    if name in layer and name in APPLIED:
                        if name not in known:  # BrokerConfig's own are in config already
                            defaults[topic_name] = _in_topic_units(name, layer[name])
                        break
        return defaults


def _in_topic_units(name: str, value: str) -> str:
    """A broker config value in the unit of its topic config (hours and minutes to ms)."""
    factor = 3_600_000 if name.endswith(".hours") else 60_000 if name.endswith(".minutes") else 1
    if factor == 1:
        return value
    try:
        return str(int(value) * factor)
    except ValueError:
        raise DynamicConfigError(f"Invalid value {value} for configuration {name}: not an "
                                 "integer", invalid_config=True) from None
