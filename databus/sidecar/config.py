"""The sidecar's stream and service sections of sidecar.yaml: ``streams:`` (StreamConfig),
the consuming keys (``consumer:``, ConsumeSettings), ``delay:`` and ``transactions:``.
databus/config.py assembles them into DatabusConfig."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from databus.config_base import Model as _Model
from databus.config_base import check_durations, parse_duration_ms

# RocketMQ's delay levels (messageDelayLevel): the Nth failed delivery of a message is
# retried after the Nth level (the last one repeats).
DEFAULT_RETRY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h".split()

# Consumer keys the sidecar sets itself for a subscription's group member.
RESERVED_STREAM_CONSUMER_KEYS = ("group.id", "enable.auto.commit", "bootstrap.servers")
# Where a group member's defaults differ from Kafka's consumer: start at the beginning of a
# topic the group never read (a message sent before the first subscriber is not lost), and
# commit every second (what a crash redelivers is what was not committed).
STREAM_CONSUMER_DEFAULTS = {"auto.offset.reset": "earliest", "auto.commit.interval.ms": 1000}


class ConsumeSettings(_Model):
    """How the sidecar consumes a stream for its subscribers: under a stream's or the
    top-level `consumer:`, beside Kafka consumer keys."""

    max_attempts: int = Field(
        16,
        alias="max.attempts",
        ge=1,
        description="Deliveries of a message before a nack (or ack timeout) sends it to the "
        "group's dead-letter topic `GROUP.dlq` instead of the retry topic `GROUP.retry`.",
    )
    ack_timeout_ms: int = Field(
        30000,
        alias="ack.timeout.ms",
        gt=0,
        description="A message handed to an app and neither acked nor nacked within this "
        "time counts as nacked (reason `ack timeout`).",
    )
    retry_levels: list[str | int] = Field(
        default_factory=lambda: list[str | int](DEFAULT_RETRY_LEVELS),
        alias="retry.levels",
        min_length=1,
        description="Redelivery delays: the Nth failed delivery of a message is retried "
        "after the Nth level (the last one repeats). Default RocketMQ's levels, "
        "`1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h`.",
    )

    @field_validator("retry_levels")
    @classmethod
    def _levels(cls, v: list[str | int]) -> list[str | int]:
        check_durations(v)
        return v

    @property
    def retry_levels_ms(self) -> tuple[int, ...]:
        return tuple(parse_duration_ms(level) for level in self.retry_levels)


CONSUME_SETTINGS_KEYS = tuple(
    field.alias or name for name, field in ConsumeSettings.model_fields.items()
)


class StreamSchema(_Model):
    """A typed stream's schema (docs/schemas.md, "Typed streams"): apps send values as
    msgpack or JSON, the sidecar checks each against the subject's latest version and sends
    it in Confluent's wire format."""

    subject: str | None = Field(
        None,
        description="The registry subject whose latest version the stream's values follow; "
        "default `TOPIC-value` (Confluent's TopicNameStrategy).",
    )
    file: str | None = Field(
        None,
        description="A schema file (Avro `.avsc`, JSON Schema `.json`, Protobuf `.proto`; "
        "relative to the config "
        "file) the sidecar registers "
        "under the subject when the config is applied (an existing identical schema keeps its "
        "id; one the subject's compatibility refuses rejects the config).",
    )
    type: Literal["AVRO", "JSON", "PROTOBUF"] | None = Field(
        None,
        description="The file's schema type; default PROTOBUF for a `.proto` file, JSON for "
        "a JSON Schema document (it names `$schema`, or is an object schema), else AVRO.",
    )
    registry_url: str | None = Field(
        None,
        alias="schema.registry.url",
        description="The registry; default the broker section's `schema.registry.listen`, "
        "else http://127.0.0.1:8081.",
    )
    basic_auth: str | None = Field(
        None,
        alias="basic.auth.user.info",
        description="`USER:PASSWORD` for a registry that requires a login (Confluent's key).",
    )
    input: Literal["auto", "json", "msgpack"] = Field(
        "auto",
        description="How apps send values: `msgpack` (what the SDK sends for a dict or list), "
        "`json` (text), `auto` (a msgpack map or array, else JSON text).",
    )
    latest_cache_ttl_sec: float = Field(
        30.0,
        alias="latest.cache.ttl.sec",
        gt=0,
        description="How long the subject's latest version is trusted before it is looked up "
        "again (Confluent's serializer key); schemas by id are cached for good (ids never "
        "change).",
    )


class StreamConfig(BaseModel):
    """A stream: a logical name apps send to, mapped to a cluster and a topic, with producer
    keys overriding the ``producer:`` defaults for this stream."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    cluster: str | None = Field(
        None,
        description="Cluster name from `clusters:`; may be omitted when there is one cluster "
        "(or none: then the built-in broker of `databus up`).",
    )
    topic: str | None = Field(
        None, description="Topic to write; default: the stream's name."
    )
    ordering: Literal["partition", "none"] = Field(
        "partition",
        description="For subscribers (docs/consuming.md): `partition` hands each partition "
        "to one app of a group at a time, in order; `none` is queue mode: any app of the "
        "group gets any message (a share group where the cluster serves them).",
    )
    consumer: dict[str, Any] = Field(
        default_factory=dict,
        description="For subscribers: Kafka consumer keys and `max.attempts`, "
        "`ack.timeout.ms`, `retry.levels`, overriding the top-level `consumer:`.",
    )
    schema_: StreamSchema | None = Field(
        None,
        alias="schema",
        description="Make it a typed stream: `{subject: ...}` and/or `{file: ...}`, "
        "docs/schemas.md.",
    )

    @property
    def producer_settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class _GroupService(_Model):
    """What the sidecar's cluster-wide services (delay, transactions) share: each runs as one
    consumer group per cluster, with its own group consumer and producer."""

    clusters: list[str] | None = Field(
        None,
        description="Clusters this sidecar runs the service for; default every configured "
        "cluster (or the built-in broker).",
    )
    consumer: dict[str, Any] = Field(
        default_factory=dict,
        description="Kafka consumer keys for the service's group consumer, over its defaults "
        "`session.timeout.ms: 6000` (how soon a dead sidecar's share moves to another: the "
        "broker's `group.min.session.timeout.ms` is the floor), `heartbeat.interval.ms: 500` "
        "(lowered to a third of a session set below it) and "
        "`partition.assignment.strategy: cooperative-sticky` (docs/delayed.md, "
        "docs/transactions.md).",
    )
    producer: dict[str, Any] = Field(
        default_factory=dict,
        description="Kafka producer keys for the service's producer (default acks=all, "
        "idempotent).",
    )


class DelayConfig(_GroupService):
    """The delay service (docs/delayed.md): delivers delayed messages at their time."""

    enabled: bool = Field(
        False,
        description="Run the delay service in this sidecar. Sidecars running it share the "
        "delayed messages of a cluster through one consumer group; at least one must run it "
        "for delayed messages to be delivered.",
    )
    group_id: str = Field(
        "databus-delay", alias="group.id",
        description="Consumer group of the delay services of a cluster.",
    )


class TransactionsConfig(_GroupService):
    """The half-message service (docs/transactions.md): apps' transactions with check-back."""

    enabled: bool = Field(
        False,
        description="Run the half-message service in this sidecar: settle apps' "
        "transactions (`client.transaction(...)`) and pass check-backs to this sidecar's "
        "apps. At least one sidecar per cluster must run it; every sidecar whose apps "
        "register check callbacks should.",
    )
    group_id: str = Field(
        "databus-txn", alias="group.id",
        description="Consumer group of the half-message services of a cluster.",
    )
    check_ms: int = Field(
        60_000, alias="check.ms", ge=1,
        description="A transaction neither committed nor rolled back this long after its "
        "first message is checked: an app of its producer group is asked (its check "
        "callback), and again every `check.ms`.",
    )
    max_checks: int = Field(
        15, alias="max.checks", ge=0,
        description="Unanswered checks after which a transaction is rolled back (and logged).",
    )
