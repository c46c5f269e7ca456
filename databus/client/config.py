"""Producer, consumer and admin settings with Kafka's names and defaults, validated by pydantic.

Build them from the dotted keys every Kafka user knows::

    ProducerConfig.from_kafka({"linger.ms": 5, "compression.type": "lz4", "acks": "all"})
    ConsumerConfig.from_kafka({"group.id": "g", "auto.offset.reset": "earliest"})
    ShareConsumerConfig.from_kafka({"group.id": "g", "share.acknowledgement.mode": "explicit"})

Attributes use the Python spelling (``cfg.linger_ms``).  An unknown key or an invalid value
raises ConfigError naming the key.  Defaults are the Java client's (Kafka 3.x/4.x), except
``partitioner`` which names one of databus's PARTITIONERS (Java's ``partitioner.class`` takes
a class name; librdkafka's ``partitioner`` takes a name, as here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from ..protocol import defaults
from .errors import ConfigError

COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")


class _KafkaConfig(BaseModel):
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, frozen=True, validate_default=True
    )

    bootstrap_servers: str | list[str] | None = Field(None, alias="bootstrap.servers")
    client_id: str = Field("databus", alias="client.id")
    request_timeout_ms: int = Field(defaults.REQUEST_TIMEOUT_MS, alias="request.timeout.ms", gt=0)
    retry_backoff_ms: int = Field(100, alias="retry.backoff.ms", ge=0)
    retry_backoff_max_ms: int = Field(1000, alias="retry.backoff.max.ms", ge=0)
    metadata_max_age_ms: int = Field(300000, alias="metadata.max.age.ms", ge=0)
    socket_connection_setup_timeout_ms: int = Field(
        10000, alias="socket.connection.setup.timeout.ms", gt=0
    )
    reconnect_backoff_ms: int = Field(50, alias="reconnect.backoff.ms", ge=0)
    reconnect_backoff_max_ms: int = Field(1000, alias="reconnect.backoff.max.ms", ge=0)
    # Security (docs/security.md): Kafka's names; librdkafka's spellings where they differ
    # (sasl.mechanisms, ssl.ca.location, ssl.certificate.location, ssl.key.location).
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", alias="security.protocol",
        description="How to reach the brokers: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or "
        "SASL_SSL (a login over TLS); docs/security.md.")
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "PLAIN", alias="sasl.mechanism",
        validation_alias=AliasChoices("sasl.mechanism", "sasl.mechanisms", "sasl_mechanism"),
        description="SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (librdkafka's "
        "`sasl.mechanisms` is accepted too).")
    sasl_username: str | None = Field(None, alias="sasl.username",
                                      description="SASL user name.")
    sasl_password: SecretStr | None = Field(
        None, alias="sasl.password",
        description="SASL password; in sidecar.yaml write `${env:NAME}` or `${file:/path}` "
        "rather than the password itself. Never logged or shown.")
    ssl_ca_location: str | None = Field(
        None, alias="ssl.ca.location",
        validation_alias=AliasChoices("ssl.ca.location", "ssl.truststore.location",
                                      "ssl_ca_location"),
        description="PEM file of the CA certificates that sign the brokers' certificates "
        "(default: the system's CAs).")
    ssl_certificate_location: str | None = Field(
        None, alias="ssl.certificate.location",
        description="PEM client certificate, for brokers with `ssl.client.auth`.")
    ssl_key_location: str | None = Field(
        None, alias="ssl.key.location",
        description="PEM private key of ssl.certificate.location.")
    ssl_key_password: SecretStr | None = Field(
        None, alias="ssl.key.password",
        description="Password of an encrypted ssl.key.location.")
    ssl_endpoint_identification_algorithm: Literal["https", "none", ""] = Field(
        "https", alias="ssl.endpoint.identification.algorithm",
        description="`https`: the broker's certificate must name the host connected to; "
        "`none`: any certificate the CAs signed.")

    @field_validator("security_protocol", "sasl_mechanism", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.strip().upper() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _security(self):
        if self.security_protocol.startswith("SASL_") and (
                not self.sasl_username or self.sasl_password is None):
            raise ValueError(f"security.protocol={self.security_protocol} needs sasl.username "
                             "and sasl.password")
        if bool(self.ssl_certificate_location) != bool(self.ssl_key_location):
            raise ValueError("ssl.certificate.location and ssl.key.location go together")
        return self

    @classmethod
    def from_kafka(cls, settings: Mapping[str, Any] | None = None, **overrides: Any):
        """Validate dotted Kafka keys (``"linger.ms"``) or attribute names (``linger_ms``)."""
        data = dict(settings or {})
        data.update(overrides)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_describe(cls, exc)) from None

    def to_kafka(self) -> dict[str, Any]:
        """The settings as dotted Kafka keys (secrets stay ``SecretStr``: printed, they are
        ``**********``)."""
        return self.model_dump(by_alias=True)

    def explicitly_set(self, key: str) -> bool:
        """Whether ``key`` (dotted or attribute spelling) was given rather than defaulted."""
        attr = _attr_name(type(self), key)
        return attr in self.model_fields_set


def _attr_name(cls: type[BaseModel], key: str) -> str:
    for name, info in cls.model_fields.items():
        if key in (name, info.alias):
            return name
    return key


def _describe(cls: type[BaseModel], exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if not loc:  # a check across several settings: its message names them
            problems.append(str(err["msg"]).removeprefix("Value error, "))
        elif err["type"] == "extra_forbidden":
            problems.append(f"unknown {cls.__name__} key {loc!r}")
        else:
            value = err.get("input")
            shown = "" if isinstance(value, dict) else f" (got {value!r})"
            message = str(err["msg"]).removeprefix("Value error, ")
            problems.append(f"invalid value for {loc!r}{shown}: {message}")
    return "; ".join(problems)


class ProducerConfig(_KafkaConfig):
    """Kafka producer settings (see module docstring for how to build one)."""

    acks: Literal[-1, 0, 1] = Field(-1, alias="acks")
    linger_ms: int = Field(5, alias="linger.ms", ge=0)
    batch_size: int = Field(defaults.BATCH_SIZE, alias="batch.size", ge=0)
    buffer_memory: int = Field(defaults.BUFFER_MEMORY, alias="buffer.memory", gt=0)
    max_block_ms: int = Field(defaults.MAX_BLOCK_MS, alias="max.block.ms", ge=0)
    compression_type: Literal["none", "gzip", "snappy", "lz4", "zstd"] = Field(
        "none", alias="compression.type"
    )
    retries: int = Field(2147483647, alias="retries", ge=0)
    delivery_timeout_ms: int = Field(120000, alias="delivery.timeout.ms", gt=0)
    enable_idempotence: bool = Field(True, alias="enable.idempotence")
    max_in_flight_requests_per_connection: int = Field(
        5, alias="max.in.flight.requests.per.connection", ge=1
    )
    max_request_size: int = Field(1048576, alias="max.request.size", gt=0)
    partitioner: Literal["default", "murmur2", "round_robin", "random"] = Field(
        "default", alias="partitioner"
    )
    transactional_id: str | None = Field(None, alias="transactional.id")
    transaction_timeout_ms: int = Field(60000, alias="transaction.timeout.ms", gt=0)

    @field_validator("acks", mode="before")
    @classmethod
    def _acks(cls, v: Any) -> Any:
        # Literal's own message ("Input should be -1, 0 or 1") would hide `all`, the
        # documented value: name every accepted spelling.
        spelled = v.strip().lower() if isinstance(v, str) else v
        accepted = {"all": -1, "-1": -1, "0": 0, "1": 1}
        if isinstance(spelled, str) and spelled in accepted:
            return accepted[spelled]
        if isinstance(spelled, int) and not isinstance(spelled, bool) and spelled in (-1, 0, 1):
            return spelled
        raise ValueError("acks must be all, -1, 0 or 1 (all and -1 are the same)")

    @field_validator("compression_type", mode="before")
    @classmethod
    def _codec(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _consistent(self) -> ProducerConfig:
        idem_explicit = "enable_idempotence" in self.model_fields_set
        conflicts = []
        if self.acks != -1:
            conflicts.append(f"acks={self.acks} (idempotence needs acks=all)")
        if self.max_in_flight_requests_per_connection > 5:
            conflicts.append(
                "max.in.flight.requests.per.connection="
                f"{self.max_in_flight_requests_per_connection} (idempotence allows at most 5)"
            )
        if self.retries == 0:
            conflicts.append("retries=0 (idempotence needs retries)")
        if self.transactional_id is not None and (conflicts or (
                idem_explicit and not self.enable_idempotence)):
            raise ValueError("transactional.id needs idempotence, which conflicts with "
                             + (", ".join(conflicts) or "enable.idempotence=false"))
        if self.enable_idempotence and conflicts:
            if idem_explicit:
                raise ValueError("enable.idempotence=true conflicts with " + ", ".join(conflicts))
            # As in the Java client: idempotence on by default yields to explicit settings.
            object.__setattr__(self, "enable_idempotence", False)
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ValueError(
                f"delivery.timeout.ms ({self.delivery_timeout_ms}) must be >= linger.ms "
                f"({self.linger_ms}) + request.timeout.ms ({self.request_timeout_ms})"
            )
        return self


class ConsumerConfig(_KafkaConfig):
    """Kafka consumer settings."""

    group_id: str | None = Field(None, alias="group.id")
    group_instance_id: str | None = Field(None, alias="group.instance.id")
    session_timeout_ms: int = Field(45000, alias="session.timeout.ms", gt=0)
    heartbeat_interval_ms: int = Field(3000, alias="heartbeat.interval.ms", gt=0)
    max_poll_interval_ms: int = Field(300000, alias="max.poll.interval.ms", gt=0)
    enable_auto_commit: bool = Field(True, alias="enable.auto.commit")
    auto_commit_interval_ms: int = Field(5000, alias="auto.commit.interval.ms", ge=0)
    auto_offset_reset: Literal["earliest", "latest", "none"] = Field(
        "latest", alias="auto.offset.reset"
    )
    fetch_min_bytes: int = Field(1, alias="fetch.min.bytes", ge=0)
    fetch_max_bytes: int = Field(52428800, alias="fetch.max.bytes", gt=0)
    fetch_max_wait_ms: int = Field(500, alias="fetch.max.wait.ms", ge=0)
    max_partition_fetch_bytes: int = Field(1048576, alias="max.partition.fetch.bytes", gt=0)
    max_poll_records: int = Field(500, alias="max.poll.records", gt=0)
    # the bound of commit()'s retries (Kafka's commitSync without a timeout)
    default_api_timeout_ms: int = Field(
        defaults.DEFAULT_API_TIMEOUT_MS, alias="default.api.timeout.ms", gt=0
    )
    partition_assignment_strategy: tuple[str, ...] = Field(
        ("range", "cooperative-sticky"), alias="partition.assignment.strategy"
    )
    isolation_level: Literal["read_uncommitted", "read_committed"] = Field(
        "read_uncommitted", alias="isolation.level"
    )
    check_crcs: bool = Field(True, alias="check.crcs")
    # Not a Kafka setting (the Java consumer has no bound): the most bytes one fetched
    # batch may decompress to, so that a few KB of zstd holding a 1 GiB record cannot take
    # the consumer's memory with it.  Same scale as fetch.max.bytes' default (50 MiB) times
    # a generous compression ratio.
    max_decompressed_batch_bytes: int = Field(
        256 * 1024 * 1024, alias="max.decompressed.batch.bytes", gt=0
    )
    client_rack: str = Field("", alias="client.rack")

    @field_validator("partition_assignment_strategy", mode="before")
    @classmethod
    def _strategies(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [s.strip() for s in v.split(",") if s.strip()]
        names = []
        for item in v:
            name = str(item).strip()
            # Accept Java's class names too: org.apache...RangeAssignor -> range
            java = {
                "RangeAssignor": "range",
                "RoundRobinAssignor": "roundrobin",
                "StickyAssignor": "sticky",
                "CooperativeStickyAssignor": "cooperative-sticky",
            }
            name = java.get(name.rsplit(".", 1)[-1], name)
            if name not in ASSIGNORS:
                raise ValueError(f"unknown assignor {item!r}; choose from {', '.join(ASSIGNORS)}")
            names.append(name)
        if not names:
            raise ValueError("at least one assignor is required")
        return tuple(names)

    @model_validator(mode="after")
    def _consistent(self) -> ConsumerConfig:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat.interval.ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session.timeout.ms ({self.session_timeout_ms})"
            )
        return self


class ShareConsumerConfig(_KafkaConfig):
    """Share consumer settings (KIP-932; Java's KafkaShareConsumer and librdkafka's share
    consumer).  Membership timing (heartbeat interval, session timeout), the lock duration
    and ``share.auto.offset.reset`` are group configs set on the broker, not here."""

    group_id: str = Field(alias="group.id", min_length=1)
    share_acknowledgement_mode: Literal["implicit", "explicit"] = Field(
        "implicit", alias="share.acknowledgement.mode"
    )
    # KIP-1206 (sent from ShareFetch v2): record_limit makes max.poll.records a strict
    # limit on what a fetch acquires; batch_optimized lets the broker round to batches
    share_acquire_mode: Literal["batch_optimized", "record_limit"] = Field(
        "batch_optimized", alias="share.acquire.mode")
    fetch_min_bytes: int = Field(1, alias="fetch.min.bytes", ge=0)
    fetch_max_bytes: int = Field(52428800, alias="fetch.max.bytes", gt=0)
    fetch_max_wait_ms: int = Field(500, alias="fetch.max.wait.ms", ge=0)
    max_poll_records: int = Field(500, alias="max.poll.records", gt=0)
    check_crcs: bool = Field(True, alias="check.crcs")
    client_rack: str = Field("", alias="client.rack")

    @field_validator("share_acknowledgement_mode", mode="before")
    @classmethod
    def _mode(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v


class AdminConfig(_KafkaConfig):
    """Admin client settings (the common client settings only)."""

    default_api_timeout_ms: int = Field(
        defaults.DEFAULT_API_TIMEOUT_MS, alias="default.api.timeout.ms", gt=0
    )


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """``["linger.ms=5", "acks=all"]`` (the console tools' ``-X key=value``) -> dict.

    Raises ConfigError naming an item without ``=``.  Values stay strings; the config
    models convert and validate them.
    """
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"-X expects key=value, got {item!r}")
        out[key.strip()] = value
    return out
