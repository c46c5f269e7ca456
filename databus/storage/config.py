"""Topic-level log configuration: Kafka's topic config names, defaults and validation.

``LogConfig`` is immutable; a topic's effective config is the broker's defaults (``base``)
with the topic's overrides applied by ``LogConfig.from_topic_config``.  Unknown names and bad
values raise ``InvalidConfigError`` naming the key and the value, as Kafka's AdminClient
reports them.  ``to_topic_config`` gives every key back as strings for DescribeConfigs.
``apply_config_ops`` computes a topic's new overrides from IncrementalAlterConfigs
operations (SET, DELETE, and APPEND/SUBTRACT on list configs).

Supported keys (Kafka's names; see docs/storage.md):
segment.bytes, segment.ms, segment.index.bytes, index.interval.bytes, retention.ms,
retention.bytes, max.message.bytes, cleanup.policy, flush.messages, flush.ms,
min.compaction.lag.ms, max.compaction.lag.ms, min.cleanable.dirty.ratio, delete.retention.ms,
file.delete.delay.ms, message.timestamp.type, compression.type ("producer": batches are stored
as the producer compressed them; uncompressed, gzip, snappy, lz4, zstd: batches in another
codec are recompressed on append), min.insync.replicas (accepted; a single node has one
replica) and Confluent Server's confluent.{key,value}.schema.validation and
confluent.{key,value}.subject.name.strategy (checked on produce against the broker's schema
registry, docs/schemas.md).

Every other topic config Kafka 3.9/4.x knows (``INERT_TOPIC_CONFIGS``: replication, tiered
storage, preallocation, the deprecated ``message.format.version``, ...) is accepted,
validated by type, stored as an override and reported back, but changes nothing here (the
``note`` says why; DescribeConfigs sends it as the entry's documentation).  A name Kafka
does not know is still refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from databus.protocol import defaults
from databus.protocol.defaults import DAY_MS, LONG_MAX
from databus.protocol.records import CODEC_BY_NAME

from .errors import InvalidConfigError

INT_MAX = 2**31 - 1
MIB = 1 << 20


@dataclass(frozen=True)
class LogConfig:
    # The broker's log.* settings default to the same values (databus.protocol.defaults).
    segment_bytes: int = defaults.LOG_SEGMENT_BYTES
    segment_ms: int = defaults.LOG_ROLL_MS
    segment_index_bytes: int = 10 * MIB
    index_interval_bytes: int = 4096
    retention_ms: int = defaults.LOG_RETENTION_MS  # -1 = unlimited
    retention_bytes: int = defaults.LOG_RETENTION_BYTES  # -1 = unlimited
    max_message_bytes: int = defaults.MESSAGE_MAX_BYTES
    cleanup_policy: str = defaults.LOG_CLEANUP_POLICY  # "delete", "compact" or "compact,delete"
    flush_interval_messages: int = defaults.LOG_FLUSH_INTERVAL_MESSAGES
    flush_interval_ms: int = LONG_MAX
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = DAY_MS
    file_delete_delay_ms: int = 60000
    message_timestamp_type: str = "CreateTime"  # or "LogAppendTime"
    compression_type: str = "producer"
    min_insync_replicas: int = 1
    # Confluent Server's broker-side schema validation (docs/schemas.md): records must carry
    # the id of a schema registered under the subject the strategy names.
    confluent_key_schema_validation: bool = False
    confluent_value_schema_validation: bool = False
    confluent_key_subject_name_strategy: str = "TopicNameStrategy"
    confluent_value_subject_name_strategy: str = "TopicNameStrategy"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compression_codec(self) -> int | None:
        """The codec id batches are stored in, or None for ``producer`` (as they came)."""
        if self.compression_type == "producer":
            return None
        return CODEC_BY_NAME["none" if self.compression_type == "uncompressed"
                             else self.compression_type]

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_topic_config(
        cls, overrides: Mapping[str, Any], base: LogConfig | None = None
    ) -> LogConfig:
        """``base`` (default: Kafka's defaults) with the Kafka-named ``overrides`` applied."""
        base = base if base is not None else cls()
        changes: dict[str, Any] = {}
        for key, raw in overrides.items():
            spec = _SPECS.get(key)
            if spec is None:
                inert = INERT_TOPIC_CONFIGS.get(key)
                if inert is None:
                    raise InvalidConfigError(f"unknown topic config {key!r}")
                inert.check(key, str(raw).strip())  # validated, stored, no effect
                continue
            changes[spec.field] = spec.parse(key, raw)
        return dataclasses.replace(base, **changes)

    def to_topic_config(self) -> dict[str, str]:
        """Every supported key with its value, as Kafka's DescribeConfigs strings."""
        return {key: spec.render(getattr(self, spec.field)) for key, spec in _SPECS.items()}

    def overrides_against(self, base: LogConfig) -> dict[str, str]:
        """The keys whose value differs from ``base`` (a topic's overrides)."""
        mine, theirs = self.to_topic_config(), base.to_topic_config()
        return {k: v for k, v in mine.items() if theirs[k] != v}


@dataclass(frozen=True)
class _Spec:
    field: str
    parse_value: Callable[[str, str], Any]

    def parse(self, key: str, raw: Any) -> Any:
        text = str(raw).strip() if not isinstance(raw, bool) else str(raw).lower()
        return self.parse_value(key, text)

    @staticmethod
    def render(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return repr(value) if isinstance(value, float) else str(value)


def _integer(minimum: int, maximum: int = LONG_MAX) -> Callable[[str, str], int]:
    def parse(key: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise InvalidConfigError(
                f"invalid value {text!r} for configuration {key}: not an integer"
            ) from None
        if not minimum <= value <= maximum:
            raise InvalidConfigError(
                f"invalid value {value} for configuration {key}: must be in [{minimum}, {maximum}]"
            )
        return value

    return parse


def _ratio(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidConfigError(
            f"invalid value {text!r} for configuration {key}: not a number"
        ) from None
    if not 0.0 <= value <= 1.0:
        raise InvalidConfigError(f"invalid value {value} for configuration {key}: must be in [0, 1]")
    return value


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(key: str, text: str) -> str:
        if text not in allowed:
            raise InvalidConfigError(
                f"invalid value {text!r} for configuration {key}: must be one of {', '.join(allowed)}"
            )
        return text

    return parse


def _cleanup_policy(key: str, text: str) -> str:
    parts = sorted({p.strip() for p in text.split(",") if p.strip()})
    if not parts or any(p not in ("compact", "delete") for p in parts):
        raise InvalidConfigError(
            f"invalid value {text!r} for configuration {key}: "
            "must be delete, compact, or compact,delete"
        )
    return ",".join(parts)


def _boolean(key: str, text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise InvalidConfigError(f"invalid value {text!r} for configuration {key}: must be "
                                 "true or false")
    return text.lower() == "true"


SUBJECT_NAME_STRATEGIES = ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")


def _subject_name_strategy(key: str, text: str) -> str:
    """Confluent's class name (io.confluent.kafka.serializers.subject.X) or X alone -> X."""
    name = text.rsplit(".", 1)[-1]
    if name not in SUBJECT_NAME_STRATEGIES:
        raise InvalidConfigError(f"invalid value {text!r} for configuration {key}: must be one "
                                 f"of {', '.join(SUBJECT_NAME_STRATEGIES)}")
    return name


# Kafka's BrokerCompressionType names: "uncompressed" is codec none.
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


_SPECS: dict[str, _Spec] = {
    "segment.bytes": _Spec("segment_bytes", _integer(14, INT_MAX)),
    "segment.ms": _Spec("segment_ms", _integer(1)),
    "segment.index.bytes": _Spec("segment_index_bytes", _integer(8, INT_MAX)),
    "index.interval.bytes": _Spec("index_interval_bytes", _integer(0, INT_MAX)),
    "retention.ms": _Spec("retention_ms", _integer(-1)),
    "retention.bytes": _Spec("retention_bytes", _integer(-1)),
    "max.message.bytes": _Spec("max_message_bytes", _integer(0, INT_MAX)),
    "cleanup.policy": _Spec("cleanup_policy", _cleanup_policy),
    "flush.messages": _Spec("flush_interval_messages", _integer(1)),
    "flush.ms": _Spec("flush_interval_ms", _integer(0)),
    "min.compaction.lag.ms": _Spec("min_compaction_lag_ms", _integer(0)),
    "max.compaction.lag.ms": _Spec("max_compaction_lag_ms", _integer(1)),
    "min.cleanable.dirty.ratio": _Spec("min_cleanable_dirty_ratio", _ratio),
    "delete.retention.ms": _Spec("delete_retention_ms", _integer(0)),
    "file.delete.delay.ms": _Spec("file_delete_delay_ms", _integer(0)),
    "message.timestamp.type": _Spec("message_timestamp_type", _choice("CreateTime", "LogAppendTime")),
    "compression.type": _Spec("compression_type", _choice(*COMPRESSION_TYPES)),
    "min.insync.replicas": _Spec("min_insync_replicas", _integer(1, INT_MAX)),
    "confluent.key.schema.validation": _Spec("confluent_key_schema_validation", _boolean),
    "confluent.value.schema.validation": _Spec("confluent_value_schema_validation", _boolean),
    "confluent.key.subject.name.strategy": _Spec("confluent_key_subject_name_strategy",
                                                 _subject_name_strategy),
    "confluent.value.subject.name.strategy": _Spec("confluent_value_subject_name_strategy",
                                                   _subject_name_strategy),
}


@dataclass(frozen=True)
class InertConfig:
    """A topic config Kafka knows that has no effect here: its Kafka default, its check, and
    why it changes nothing."""

    default: str
    check: Callable[[str, str], Any]
    note: str


def _any_text(key: str, text: str) -> str:
    return text


_ONE_NODE = "Accepted for Kafka compatibility; no effect on a single node (one replica)."
_NO_TIERED = "Accepted for Kafka compatibility; no effect: there is no tiered storage."
_DEPRECATED = ("Deprecated by Kafka (removed in 4.0) and ignored there since 3.0; accepted "
               "and ignored here too.")
INERT_TOPIC_CONFIGS: dict[str, InertConfig] = {
    "compression.gzip.level": InertConfig("-1", _integer(-1, 9),
        "Accepted; no effect here: batches recompressed to gzip use level 6."),
    "compression.lz4.level": InertConfig("9", _integer(1, 17),
        "Accepted; no effect here: batches recompressed to lz4 use the fast compressor."),
    "compression.zstd.level": InertConfig("3", _integer(-131072, 22),
        "Accepted; no effect here: batches recompressed to zstd use level 3."),
    "segment.jitter.ms": InertConfig("0", _integer(0),
        "Accepted; no effect here: segments roll at segment.ms without jitter."),
    "preallocate": InertConfig("false", _boolean,
        "Accepted; no effect here: segment files are never preallocated."),
    "unclean.leader.election.enable": InertConfig("false", _boolean, _ONE_NODE),
    "leader.replication.throttled.replicas": InertConfig("", _any_text, _ONE_NODE),
    "follower.replication.throttled.replicas": InertConfig("", _any_text, _ONE_NODE),
    "message.format.version": InertConfig("3.0-IV1", _any_text, _DEPRECATED),
    "message.downconversion.enable": InertConfig("true", _boolean, _DEPRECATED),
    "message.timestamp.difference.max.ms": InertConfig(str(LONG_MAX), _integer(0),
        "Deprecated by Kafka (use message.timestamp.before.max.ms / after.max.ms); accepted, "
        "no effect here: timestamps are not checked."),
    "message.timestamp.before.max.ms": InertConfig(str(LONG_MAX), _integer(0),
        "Accepted; no effect here: timestamps are not checked."),
    "message.timestamp.after.max.ms": InertConfig(str(LONG_MAX), _integer(0),
        "Accepted; no effect here: timestamps are not checked."),
    "remote.storage.enable": InertConfig("false", _boolean, _NO_TIERED),
    "errors.deadletterqueue.group.enable": InertConfig("false", _boolean,
        "Whether share groups may write their dead letters here (KIP-1191): read by the "
        "share groups, nothing else about the topic changes."),
    "local.retention.ms": InertConfig("-2", _integer(-2), _NO_TIERED),
    "local.retention.bytes": InertConfig("-2", _integer(-2), _NO_TIERED),
    "remote.log.copy.disable": InertConfig("false", _boolean, _NO_TIERED),
    "remote.log.delete.on.disable": InertConfig("false", _boolean, _NO_TIERED),
}

# the configs that act here (rendered by to_topic_config); every name Kafka knows
TOPIC_CONFIG_NAMES = tuple(_SPECS)
KNOWN_TOPIC_CONFIG_NAMES = TOPIC_CONFIG_NAMES + tuple(INERT_TOPIC_CONFIGS)


# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType)
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
CONFIG_OPS = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}
# Topic configs of Kafka's LIST type (the only ones APPEND/SUBTRACT apply to)
LIST_CONFIGS = frozenset({"cleanup.policy", "leader.replication.throttled.replicas",
                          "follower.replication.throttled.replicas"})


def apply_config_ops(overrides: Mapping[str, str], effective: Mapping[str, str],
                     ops: Iterable[tuple[str, int, str | None]]) -> dict[str, str]:
    """The overrides after IncrementalAlterConfigs ``ops`` ``(name, op, value)``, as Kafka's
    ConfigAdminManager computes them: SET overrides, DELETE drops the override (back to the
    default), APPEND/SUBTRACT add/remove items of a list config's current value (the override,
    else the effective default), keeping order and dropping repeats.  Unknown names and list
    operations on other configs raise ``InvalidConfigError``; values are validated later, by
    ``LogConfig.from_topic_config`` on the result."""
    result = dict(overrides)
    for name, op, value in ops:
        if name not in _SPECS and name not in INERT_TOPIC_CONFIGS:
            raise InvalidConfigError(f"unknown topic config {name!r}")
        if op == OP_SET:
            if value is None:
                raise InvalidConfigError(f"SET of topic config {name!r} needs a value")
            result[name] = value
        elif op == OP_DELETE:
            result.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if name not in LIST_CONFIGS:
                verb = "append" if op == OP_APPEND else "subtract"
                raise InvalidConfigError(
                    f"Config value {verb} is not allowed for config key: {name} (not a list)")
            current = _items(result.get(name, effective.get(name, "")))
            given = _items(value or "")
            if op == OP_APPEND:
                merged = list(dict.fromkeys(current + given))
            else:
                merged = [item for item in current if item not in given]
            result[name] = ",".join(merged)
        else:
            raise InvalidConfigError(f"unknown config operation {op} for {name}")
    return result


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]
